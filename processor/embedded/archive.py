"""The embedded runner's archive for ``recurrence explain``: the ledger file and the journal file.

The runner indexes every record it writes (``["rid", id]`` -> the byte offset
of its ledger line, committed with the batch) and remembers the paths of the
ledger and of the journal it last read. ``FileArchive`` reads a record back
by seeking to its line, and a journal entry by its origin line number.

Both files are opened as regular files only (``regularfile``): a device or a
FIFO put where the ledger was is refused, never read until memory runs out.
Whether the ledger is the state's is checked once, when the archive is
opened for a command or a server (``embedded.open_archive``); that each
record read back is the one asked for, by the Explainer.
"""

import os
from pathlib import Path
from typing import Any, Final

from ..core.recordindex import record_key
from ..core.state import key
from ..host.regularfile import open_regular
from ..store.base import StateStore

LEDGER_PATH_KEY: Final = key("ledger_path")
JOURNAL_PATH_KEY: Final = key("journal_path")
_CHUNK: Final = 1 << 20


def _read_line(path: Path, offset: int) -> bytes | None:
    try:
        with open_regular(path, "the ledger") as handle:
            handle.seek(offset)
            line = handle.readline()
    except OSError:
        return None
    return line.rstrip(b"\r\n") or None


def _line_number(path: Path, number: int) -> bytes | None:
    """Line ``number`` (1-based) of a file, found by counting newlines a chunk at a time."""
    try:
        with open_regular(path, "the journal") as handle:
            seen, start = 1, 0
            while seen < number:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    return None
                count = chunk.count(b"\n")
                if seen + count < number:
                    seen += count
                    start += len(chunk)
                    continue
                at = -1
                for _ in range(number - seen):
                    at = chunk.index(b"\n", at + 1)
                start += at + 1
                seen = number
            handle.seek(start)
            line = handle.readline()
    except OSError:
        return None
    return line.rstrip(b"\r\n") or None


class FileArchive:
    def __init__(self, store: StateStore, ledger: Path | None = None, journal: Path | None = None) -> None:
        self.store = store
        self.ledger = ledger or self._path(LEDGER_PATH_KEY)
        self.journal = journal or self._path(JOURNAL_PATH_KEY)

    def _path(self, row: bytes) -> Path | None:
        raw = self.store.get(row)
        return None if raw is None else Path(os.fsdecode(raw))

    def record(self, record_id: str) -> bytes | None:
        raw = self.store.get(record_key(record_id))
        if raw is None or self.ledger is None:
            return None
        return _read_line(self.ledger, int(raw))

    def entry(self, origin: dict[str, Any]) -> bytes | None:
        line = origin.get("line")
        if not isinstance(line, int) or self.journal is None:
            return None
        return _line_number(self.journal, line)
