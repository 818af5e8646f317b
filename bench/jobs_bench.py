"""``replay --jobs N`` against ``--jobs 1``: speed-up, what bounds it, memory of all processes.

    python bench/jobs_bench.py JOURNAL [JOURNAL ...] [--jobs 1,2,4,8] [--rounds 3] [--partitions 16]

For each journal, ``recurrence replay`` runs once per job count per round, the
job counts interleaved within a round (1, 2, 4, ... then again), each into a
fresh state and ledger, timed as a whole process (interpreter start-up and the
workers' start included). Printed per job count: the median wall time, the
speed-up against the median of ``--jobs 1``, the rate (whole process, and
after start-up: the run's own seconds from its summary line), the CPU of all
processes (from ``wait4``: the coordinator and the workers it reaped), the
peak RSS of all processes together (each process's ``VmHWM`` from ``/proc``,
polled, summed: in one more run per job count, untimed, since the polling
takes CPU the timed runs would otherwise share), and two bounds on the speed-up the journal allows:

* *largest scope*: the share of the entries in the busiest scope; a scope
  runs in one process, so no N does better than 1 / that share;
* *busiest process*: the share of the entries the busiest process gets from
  the partition assignment ``replay`` makes for N (partitions by Kafka's
  murmur2 of the scope, weighed by the journal's first lines, placed so the
  busiest process is as light as the search finds), with its bound.

Every run's ledger must be byte-identical to the first one's; the bench stops
otherwise. Job counts above the cores this process may use are still run
(the table says how many cores there were): the figures then show
oversubscription, not scaling. Nothing here asserts a speed.
"""

import argparse
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from recurrence_ledger.processor.core.partitioning import Router, assign, scope_key
from recurrence_ledger.processor.embedded.runner import assignment_weights
from recurrence_ledger.processor.embedded.statedir import DEFAULT_PARTITIONS

COMMAND = [sys.executable, "-m", "recurrence_ledger.processor.cli", "replay"]


@dataclass
class Sample:
    wall: float
    own: float  # the run's own seconds, from its summary line (journal opened to last commit)
    cpu: float
    rss_mib: float
    ledger_sha: str


@dataclass
class Row:
    jobs: int
    samples: list[Sample] = field(default_factory=list)


def _children(pid: int) -> list[int]:
    """Direct children (the workers are forked by the coordinator): one small read per thread, not a scan
    of /proc, so the poller takes next to no CPU from the run it watches."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def _hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakRss:
    """Each process's peak resident set (the coordinator and its children), polled while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for pid in [self.pid, *_children(self.pid)]:
                peak = _hwm_kib(pid)
                if peak is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), peak)
            self._stop.wait(0.05)

    def total_mib(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self.peaks.values()) / 1024


def run_once(journal: Path, jobs: int, partitions: int, workdir: Path, watch_rss: bool = False) -> Sample:
    state, out = workdir / f"state-{jobs}", workdir / f"ledger-{jobs}.jsonl"
    shutil.rmtree(state, ignore_errors=True)
    out.unlink(missing_ok=True)
    command = [
        *COMMAND,
        str(journal),
        "--state",
        str(state),
        "--out",
        str(out),
        "--jobs",
        str(jobs),
        "--partitions",
        str(partitions),
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rss = PeakRss(process.pid) if watch_rss else None
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    peak = rss.total_mib() if rss is not None else 0.0
    stderr = process.stderr.read() if process.stderr else b""
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"--jobs {jobs} exited {process.returncode}: {stderr.decode(errors='replace')[-500:]}")
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    shutil.rmtree(state, ignore_errors=True)
    found = re.search(rb"entries in ([0-9.]+)s", stderr)
    own = float(found.group(1)) if found else wall
    return Sample(wall, own, usage.ru_utime + usage.ru_stime, peak, sha)


def shares(journal: Path, partitions: int, jobs: list[int]) -> tuple[int, float, dict[int, float]]:
    """Entries, the largest scope's share, and per job count the busiest process's share."""
    router = Router(partitions)
    scopes: Counter[bytes | None] = Counter()
    per_partition: Counter[int] = Counter()
    entries = 0
    with journal.open("rb") as handle:
        for line in handle:
            entry = line.rstrip(b"\r\n")
            if not entry.strip():
                continue
            entries += 1
            scopes[scope_key(entry)] += 1
            per_partition[router.partition(entry)] += 1
    largest_scope = max(count for scope, count in scopes.items() if scope is not None) / entries
    busiest = {}
    weights = assignment_weights(str(journal), 0, router)  # what replay weighs partitions by
    for n in jobs:
        owned = assign(weights, partitions, n)
        busiest[n] = max(sum(per_partition[p] for p in parts) for parts in owned) / entries
    return entries, largest_scope, busiest


def bench(journal: Path, jobs: list[int], rounds: int, partitions: int) -> None:
    entries, largest_scope, busiest = shares(journal, partitions, jobs)
    rows = {n: Row(n) for n in jobs}
    with tempfile.TemporaryDirectory(prefix="recurrence-jobs-bench-") as tmp:
        workdir = Path(tmp)
        for _ in range(rounds):
            for n in jobs:
                rows[n].samples.append(run_once(journal, n, partitions, workdir))
        # Memory in runs of their own: polling /proc takes CPU, which the timed runs must not share.
        peaks = {n: run_once(journal, n, partitions, workdir, watch_rss=True) for n in jobs}
    ledgers = {s.ledger_sha for row in rows.values() for s in row.samples} | {s.ledger_sha for s in peaks.values()}
    if len(ledgers) != 1:
        raise SystemExit(f"{journal.name}: the ledgers differ between runs ({len(ledgers)} different)")
    base = statistics.median(s.wall for s in rows[jobs[0]].samples)
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    print(
        f"\n{journal.name}: {entries:,} entries, {partitions} partitions, {rounds} interleaved rounds, "
        f"{cores} cores, load average {load:.1f} at the end; ledgers byte-identical across every run"
    )
    print(
        "| jobs | wall s (median) | speed-up | entries/s | after start-up | CPU s, all processes "
        "| peak RSS, all processes | largest scope (bound) | busiest process (bound) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in jobs:
        samples = rows[n].samples
        wall = statistics.median(s.wall for s in samples)
        cpu = statistics.median(s.cpu for s in samples)
        own = statistics.median(s.own for s in samples)
        rss = peaks[n].rss_mib
        walls = ", ".join(f"{s.wall:.2f}" for s in samples)
        print(
            f"| {n} | {wall:.2f} ({walls}) | {base / wall:.2f}x | {entries / wall:,.0f} | {entries / own:,.0f} | "
            f"{cpu:.1f} | "
            f"{rss:.0f} MiB | {largest_scope:.1%} ({1 / largest_scope:.1f}x) | "
            f"{busiest[n]:.1%} ({1 / busiest[n]:.2f}x) |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("journals", type=Path, nargs="+")
    parser.add_argument(
        "--jobs", default="1,2,4,8", metavar="N,N,...", help="job counts, the first the reference (default %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    args = parser.parse_args()
    jobs = [int(n) for n in args.jobs.split(",")]
    for journal in args.journals:
        bench(journal, jobs, args.rounds, args.partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
