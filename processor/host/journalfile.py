"""Reading a ``.jsonl`` journal (a path, a pipe, or ``-`` for stdin), counting what it has read.

Shared by ``recurrence replay`` and ``recurrence publish`` so both treat lines
the same way: line endings stripped, blank lines skipped and counted (they
still count as lines), bytes read tracked for the progress bar.

For ``replay`` the reader also keeps a ``JournalPosition``: how much of the
journal it has consumed (whole lines only, with the sha256 of those bytes),
and can resume from one: when the journal starts with exactly the bytes a
position describes, they are skipped (a seek for a regular file, read and
discarded for a pipe) and line numbers continue where they stopped.
Otherwise the journal is read from its first byte, as if there were no
position.

A last line without its line end that is not JSON is a line still being
written (or cut by a crash of its writer): it is held back (``held_back``),
not yielded, so it is never dead-lettered half; the next run reads it whole
once it is complete. A last line without its line end that parses is yielded
as any other (a file whose writer left off the final newline).
"""

import hashlib
import io
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Final, Self

import orjson

from ..exceptions import JournalError
from .printable import shown

_CHUNK: Final = 1 << 20
# A pipe's prefix is kept while it is being checked, in case it is not the one
# the position describes and has to be replayed after all; past this size it
# goes to a temporary file rather than RAM.
_SPOOL_IN_MEMORY: Final = 16 << 20


@dataclass(frozen=True, slots=True)
class JournalPosition:
    """The consumed prefix of a journal: its first ``offset`` bytes (ending a line), ``line`` lines, their sha256."""

    offset: int
    line: int
    sha256: str

    def encode(self) -> bytes:
        return orjson.dumps([self.offset, self.line, self.sha256])

    @classmethod
    def decode(cls, raw: bytes) -> "JournalPosition":
        size, line, sha = orjson.loads(raw)
        return cls(int(size), int(line), str(sha))


@dataclass(frozen=True, slots=True)
class HeldBack:
    """The journal's last line, not yielded: no line end, not JSON (``line`` its number, ``size`` its bytes)."""

    line: int
    size: int


def _parses(entry: bytes) -> bool:
    """Is ``entry`` a whole JSON text? orjson first; the standard parser for what orjson alone refuses
    (integers beyond 64 bits, which free-form fields may hold). A cut object never parses."""
    try:
        orjson.loads(entry)
    except orjson.JSONDecodeError:
        try:
            json.loads(entry)
        except (ValueError, RecursionError):
            return False
    return True


class _Chain(io.RawIOBase):
    """Two binary streams read as one: a spooled prefix, then the rest of a pipe."""

    def __init__(self, first: IO[bytes], second: IO[bytes]) -> None:
        self._streams = [first, second]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "memoryview | bytearray") -> int:  # type: ignore[override]
        while self._streams:
            stream = self._streams[0]
            # read1: whatever a pipe has now, so lines reach the engine as they arrive.
            data = stream.read1(len(buffer)) if isinstance(stream, io.BufferedIOBase) else stream.read(len(buffer))
            if data:
                buffer[: len(data)] = data
                return len(data)
            self._streams.pop(0)
        return 0


def check_journal(journal: str) -> os.stat_result | None:
    """Refuse a journal that cannot be read, before anything else happens; its stat (None for stdin)."""
    if journal == "-":
        # With fd 0 closed (``<&-``) Python starts with ``sys.stdin`` set to None.
        if sys.stdin is None:
            raise JournalError("standard input is closed; pipe a journal into 'replay -' or pass its path")
        return None
    try:
        info = os.stat(journal)
    except OSError as error:
        raise JournalError(f"cannot read journal {shown(journal)}: {error.strerror or error}") from error
    if stat.S_ISDIR(info.st_mode):
        raise JournalError(f"cannot read journal {shown(journal)}: it is a directory")
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) or stat.S_ISSOCK(info.st_mode):
        # A file or a pipe (``<(zcat j.gz)``) is read; /dev/zero would be read forever.
        raise JournalError(f"cannot read journal {shown(journal)}: it is a device; pass a file, a pipe or -")
    return info


def _open(journal: str) -> tuple[IO[bytes], int | None]:
    """The journal as a binary stream and, for a regular file, its size (``None``: a pipe or stdin)."""
    info = check_journal(journal)
    if info is None:
        return sys.stdin.buffer, None
    try:
        # Pipes and devices (``<(cat j)`` is /dev/fd/N) are read as streams: no size, no seek.
        handle = open(journal, "rb")  # noqa: SIM115 - closed by JournalReader.close
    except OSError as error:
        raise JournalError(f"cannot read journal {shown(journal)}: {error.strerror or error}") from error
    return handle, info.st_size if stat.S_ISREG(info.st_mode) else None


class JournalReader:
    """Yields ``(line number, entry)`` for non-blank journal lines, without their line ending."""

    def __init__(self, journal: str) -> None:
        self.name = journal
        self._source, self.total_bytes = _open(journal)
        self._opened = None if journal == "-" else self._source  # what close() must close
        self._spool: IO[bytes] | None = None
        self.read_bytes = 0
        self.blank_lines = 0
        # True only while (about to be) blocked reading the journal, where a stop request
        # may end the read at once; ``before_wait`` runs just before each such read.
        self.waiting = False
        self.before_wait: Callable[[], None] | None = None
        self.resumed: JournalPosition | None = None
        self.held_back: HeldBack | None = None
        self._hash = hashlib.sha256()
        self._lines = 0
        self._done_bytes = 0
        self._done_lines = 0

    # -- resume --------------------------------------------------------------------------
    def resume(self, at: JournalPosition, back_to: tuple[int, int] | None = None) -> bool:
        """Skip the prefix ``at`` describes if the journal starts with it; else read from the start.

        ``back_to`` (byte offset, line) at or before ``at``: when the prefix matches, reading goes on
        from there instead (the lines between are read again: ``replay`` catches up partitions a
        crash left behind the ledger).
        """
        if at.offset == 0 or (self.total_bytes is not None and self.total_bytes < at.offset):
            return False  # nothing to skip, or shorter than what was consumed: not the same journal
        spool = None if self.total_bytes is not None else self._new_spool()
        back = back_to if back_to is not None and back_to[0] < at.offset else None
        prefix = hashlib.sha256()
        size = self._read_prefix(at.offset if back is None else back[0], prefix, spool)
        at_back = prefix.copy()
        if back is not None and size == back[0]:
            size += self._read_prefix(at.offset - back[0], prefix, spool)
        if size == at.offset and prefix.hexdigest() == at.sha256:
            self.resumed = at
            if back is None:
                if spool is not None:
                    spool.close()
                self._hash, self.read_bytes, self._lines = prefix, at.offset, at.line
                self._done_bytes, self._done_lines = at.offset, at.line
                return True
            self._hash, self.read_bytes, self._lines = at_back, back[0], back[1]
            self._done_bytes, self._done_lines = back
            self._reread_from(back[0], spool)
            return True
        self._reread_from(0, spool)
        return False

    def _reread_from(self, offset: int, spool: IO[bytes] | None) -> None:
        if spool is None:
            self._source.seek(offset)
        else:
            spool.seek(offset)
            self._spool = spool
            self._source = io.BufferedReader(_Chain(spool, self._source), _CHUNK)

    @staticmethod
    def _new_spool() -> IO[bytes]:
        return tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)

    def _read_prefix(self, size: int, digest: "hashlib._Hash", spool: IO[bytes] | None) -> int:
        done = 0
        while done < size:
            self._wait()
            chunk = self._read(min(_CHUNK, size - done))
            self.waiting = False
            if not chunk:
                break
            digest.update(chunk)
            if spool is not None:
                spool.write(chunk)
            done += len(chunk)
        return done

    def _wait(self) -> None:
        self.waiting = True
        if self.before_wait is not None:
            self.before_wait()

    def _read(self, size: int) -> bytes:
        try:
            return self._source.read(size)
        except OSError as error:
            raise JournalError(f"cannot read journal {shown(self.name)}: {error.strerror or error}") from error

    def _readline(self) -> bytes:
        try:
            return self._source.readline()
        except OSError as error:
            raise JournalError(f"cannot read journal {shown(self.name)}: {error.strerror or error}") from error

    # -- lines ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        while True:
            self._wait()
            line = self._readline()
            self.waiting = False
            if not line:
                return
            self._lines += 1
            self.read_bytes += len(line)
            if line.endswith(b"\n"):
                # Only whole lines count in a position: a last line without its newline may
                # still grow, so it is read again next time.
                self._hash.update(line)
                self._done_bytes, self._done_lines = self.read_bytes, self._lines
            entry = line.rstrip(b"\r\n")
            if not entry or entry.isspace():  # blank: what ``strip`` strips, tested without a copy
                self.blank_lines += 1
                continue
            if not line.endswith(b"\n") and not _parses(entry):
                # Still being written: read whole by the next run, never dead-lettered half.
                self.held_back = HeldBack(self._lines, len(line))
                return
            yield self._lines, entry

    def position(self) -> JournalPosition:
        """The whole lines read so far (every line up to the last one yielded, and any blank ones after it)."""
        return JournalPosition(self._done_bytes, self._done_lines, self._hash.hexdigest())

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
        if self._opened is not None:
            self._opened.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
