"""CPU a process has used so far, read from ``/proc``: what the benches sample around a timed window."""

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, all its threads (RocksDB's compactions, a worker's
    consumer thread); OSError once the process is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
