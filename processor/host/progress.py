"""The progress line of a long command on a terminal (``replay``, ``publish``, ``migrate``)."""

import sys
import time
from typing import IO


class Progress:
    """A single self-rewriting stderr line, only when the stream is a terminal.

    ``replay --jobs N`` feeds it what the ledger has committed, whichever process ran it, so the
    line covers every worker; ``processes`` is shown when there is more than one.
    """

    def __init__(
        self,
        total_bytes: int | None,
        stream: IO[str] | None = None,
        start_bytes: int = 0,
        processes: int = 1,
        unit: str = "entries",
    ) -> None:
        """``total_bytes``: what ``done_bytes`` counts up to (``recurrence migrate`` counts rows, in ``unit``)."""
        self.total = total_bytes
        self.stream = stream or sys.stderr
        self.enabled = self.stream is not None and self.stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.start_bytes = start_bytes
        self.processes = processes
        self.unit = unit

    def update(self, entries: int, done_bytes: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.25):
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        rate = entries / elapsed
        workers = f" ({self.processes} processes)" if self.processes > 1 else ""
        if self.total:
            share = min(done_bytes / self.total, 1.0)
            bar = "#" * int(share * 30)
            text = f"[{bar:<30}] {share:6.1%} {entries:,} {self.unit} {rate:,.0f}/s{workers}"
            done = done_bytes - self.start_bytes
            if done > 0 and done_bytes < self.total:
                left = (self.total - done_bytes) * elapsed / done
                text += f", {int(left) // 60}:{int(left) % 60:02d} left"
        else:
            text = f"{entries:,} {self.unit} {rate:,.0f}/s{workers}"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
