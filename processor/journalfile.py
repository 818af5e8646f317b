"""Reading a ``.jsonl`` journal (a path, or ``-`` for stdin) with progress on a terminal.

Shared by ``recurrence replay`` and ``recurrence publish`` so both treat lines
the same way: line endings stripped, blank lines skipped and counted, bytes
read tracked for the progress bar.
"""

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Self


class Progress:
    """A single self-rewriting stderr line, only when the stream is a terminal."""

    def __init__(self, total_bytes: int | None, stream: IO[str] | None = None) -> None:
        self.total = total_bytes
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0

    def update(self, entries: int, done_bytes: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.25):
            return
        self.last = now
        rate = entries / max(now - self.started, 1e-9)
        if self.total:
            share = min(done_bytes / self.total, 1.0)
            bar = "#" * int(share * 30)
            text = f"[{bar:<30}] {share:6.1%} {entries:,} entries {rate:,.0f}/s"
        else:
            text = f"{entries:,} entries {rate:,.0f}/s"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


class JournalReader:
    """Yields ``(line number, entry)`` for non-blank journal lines, without their line ending."""

    def __init__(self, journal: str) -> None:
        if journal == "-":
            self._source: IO[bytes] = sys.stdin.buffer
            self.total_bytes: int | None = None
        else:
            path = Path(journal)
            self._source = path.open("rb")
            self.total_bytes = path.stat().st_size
        self.read_bytes = 0
        self.blank_lines = 0

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        for number, line in enumerate(self._source, start=1):
            self.read_bytes += len(line)
            entry = line.rstrip(b"\r\n")
            if not entry.strip():
                self.blank_lines += 1
                continue
            yield number, entry

    def close(self) -> None:
        if self._source is not sys.stdin.buffer:
            self._source.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
