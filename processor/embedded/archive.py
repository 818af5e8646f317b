"""The embedded runner's archive for ``recurrence explain``: the ledger file and the journal file.

The runner indexes every record it writes (``["rid", id]`` -> the byte offset
of its ledger line, committed with the batch) and remembers the paths of the
ledger and of the journal it last read. ``FileArchive`` reads a record back
by seeking to its line, and a journal entry by its origin line number.

Both files are opened as regular files only (``regularfile``): a device or a
FIFO put where the ledger was is refused, never read until memory runs out,
and a line is read up to ``MAX_LINE_BYTES`` (a longer one is refused in one
line). Whether the ledger is the state's is checked once, when the archive is
opened for a command or a server (``embedded.open_archive``); that each
record read back is the one asked for, by the Explainer. A journal that can
be read but has no line where the state's entry was (a shorter file) gives an
empty entry, which the Explainer refuses as not the state's journal: only a
journal that cannot be read at all is "not readable here".
"""

import os
from pathlib import Path
from typing import Any, BinaryIO, Final

from ...topics.definitions import OUTPUT_MAX_RECORD_BYTES
from ..core.recordindex import record_key
from ..host.printable import shown
from ..host.regularfile import LineTooLongError, open_regular
from ..store.base import StateStore
from .mainkeys import JOURNAL_PATH_KEY, LEDGER_PATH_KEY

_CHUNK: Final = 1 << 20
#: The longest line read back: the largest record a deployment's topics hold. An entry or a record
#: longer than that could never be on a topic; it is refused rather than read into memory whole.
MAX_LINE_BYTES: Final = OUTPUT_MAX_RECORD_BYTES


def _bounded_line(handle: BinaryIO, where: str) -> bytes:
    line = handle.readline(MAX_LINE_BYTES + 2).rstrip(b"\r\n")
    if len(line) > MAX_LINE_BYTES:
        raise LineTooLongError(
            f"{where} is longer than {MAX_LINE_BYTES:,} bytes, the largest record a topic holds; "
            "explain reads no longer line (is the file the one the state wrote and read?)"
        )
    return line


def _read_line(path: Path, offset: int) -> bytes | None:
    try:
        with open_regular(path, "the ledger") as handle:
            handle.seek(offset)
            line = _bounded_line(handle, f"the ledger {shown(path)} line at byte {offset:,}")
    except OSError:
        return None
    return line or None


def _line_number(path: Path, number: int) -> bytes | None:
    """Line ``number`` (1-based) of a file, found by counting newlines a chunk at a time; None when the file
    cannot be read, ``b""`` when it has no such line (or a blank one)."""
    try:
        with open_regular(path, "the journal") as handle:
            seen, start = 1, 0
            while seen < number:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    return b""  # fewer lines than the state read: not its journal
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
            return _bounded_line(handle, f"the journal {shown(path)} line {number:,}")
    except OSError:
        return None


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
