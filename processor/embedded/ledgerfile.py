"""The ledger file: appended to, made durable, and checked against the mark its state recorded.

The state binds to the ledger's bytes, not its path: the mark is the committed length and the sha256 of
the last ``TAIL_BYTES`` before it. A ledger that is missing, shorter, or different before that length is
refused (``check_ledger``), never silently continued; bytes after it are an uncommitted tail the next run
cuts and regenerates.

A run owns its ledger file (``owned``): it holds an ``flock`` on the file for the whole run, so a second
run writing the same file (into another state: both would see an empty ledger and interleave their
records) is refused at once. The kernel drops the lock when the run ends, however it ends.
"""

import errno
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from ..exceptions import REBUILD, LedgerMismatchError, UnusableError
from ..host.printable import shown

#: The ledger mark covers the last this many committed bytes.
TAIL_BYTES: Final = 64 * 1024


_REBUILD: Final = f"restore the ledger file the state wrote, or rebuild: {REBUILD}"


class LedgerWriteError(UnusableError):
    """The ledger cannot be written or made durable (disk full, file too large, I/O error)."""


class LedgerInUseError(UnusableError):
    """Another run holds the ledger file."""


def _lock(path: Path) -> tuple[int, bool]:
    """A descriptor of ``path`` (created if absent) holding its exclusive lock, and whether it was created."""
    while True:
        created = False
        try:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except FileNotFoundError:
                path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                except FileExistsError:
                    continue  # another run created it first: lock that one
                created = True
        except OSError as error:
            raise LedgerWriteError(f"cannot write the ledger {shown(path)}: {error.strerror or error}") from None
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):
            os.close(fd)
            raise LedgerWriteError(f"the ledger {shown(path)} is not a regular file; give --out a file path")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LedgerInUseError(
                f"the ledger {shown(path)} is being written by another run (it holds the file until it ends); "
                "wait for that run to finish, or give this one another --out"
            ) from None
        try:
            named = os.stat(path)
        except FileNotFoundError:
            named = None
        if named is not None and os.path.samestat(named, held):
            if created:
                sync_directory(path.parent)  # the new file's name is durable before anything refers to it
            return fd, created
        # Between the open and the lock, the file was removed (a refused run removing the empty file it
        # created) or replaced: the lock is on a file no run will write. Lock the one the path names now.
        os.close(fd)


def _remove_if_empty(path: Path, fd: int) -> None:
    """Remove the file this run created if it is still empty: a refused run leaves no ledger behind."""
    try:
        if os.fstat(fd).st_size == 0 and os.path.samestat(os.stat(path), os.fstat(fd)):
            path.unlink()
    except OSError:
        return


@contextmanager
def owned(path: Path) -> Iterator[bool]:
    """Hold the ledger file ``path`` for the block (created if absent: the block gets True); ``LedgerInUseError``
    if another run holds it. A file created here and still empty when the block fails is removed again."""
    fd, created = _lock(path)
    try:
        yield created
    except BaseException:
        if created:
            _remove_if_empty(path, fd)
        raise
    finally:
        os.close(fd)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class LedgerMark:
    """What the state knows of its ledger: the committed length and the sha256 of the bytes before it."""

    length: int
    tail_sha256: str  # of the last min(length, TAIL_BYTES) committed bytes

    def encode(self) -> bytes:
        return orjson.dumps([self.length, self.tail_sha256])

    @classmethod
    def decode(cls, raw: bytes) -> "LedgerMark":
        length, tail = orjson.loads(raw)
        return cls(int(length), str(tail))


EMPTY_LEDGER: Final = LedgerMark(0, _sha256(b""))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LedgerWriteError(f"cannot read the ledger {shown(path)}: {error.strerror or error}") from error


def _read_tail(path: Path, end: int) -> bytes:
    start = max(0, end - TAIL_BYTES)
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start)
    except OSError as error:
        raise LedgerWriteError(f"cannot read the ledger {shown(path)}: {error.strerror or error}") from error


def _rebuild(path: Path, bound: Path | None) -> str:
    """What to do about a ledger the state did not write: its own ledger when ``path`` is another file."""
    if bound is None or Path(os.path.realpath(path)) == bound:
        return _REBUILD
    return (
        f"this state is bound to its ledger {shown(bound)}: pass --out {shown(bound)} to go on, or rebuild: {REBUILD}"
    )


def check_ledger(path: Path, mark: LedgerMark | None, bound: Path | None = None, created: bool = False) -> int:
    """How many uncommitted bytes to cut from the ledger; refuses a ledger the state did not write.
    ``bound``: the ledger path the state last wrote (named when ``path`` is another file). ``created``: the file
    is the empty one this run's lock created (``owned``), so it was missing."""
    size = None if created else _size(path)
    where = shown(path)
    if mark is None:
        if size:
            raise LedgerMismatchError(
                f"the ledger {where} already holds {size:,} bytes but the state is new, so its records would be "
                "written a second time; pass the --state that wrote it, or rebuild: a fresh --state with a fresh "
                "(absent or empty) --out"
            )
        return 0
    if size is None:
        if mark.length == 0:
            return 0
        if bound is not None and Path(os.path.realpath(path)) != bound:
            raise LedgerMismatchError(
                f"this state is bound to its ledger {shown(bound)} ({mark.length:,} bytes written), and there is no "
                f"{where}: pass --out {shown(bound)} to go on, or rebuild: {REBUILD}"
            )
        raise LedgerMismatchError(
            f"the ledger {where} is missing, but the state recorded {mark.length:,} bytes of it; {_REBUILD}"
        )
    if size < mark.length:
        raise LedgerMismatchError(
            f"the ledger {where} holds {size:,} bytes, fewer than the {mark.length:,} the state recorded "
            f"(truncated or replaced); {_rebuild(path, bound)}"
        )
    if _sha256(_read_tail(path, mark.length)) != mark.tail_sha256:
        raise LedgerMismatchError(
            f"the ledger {where} is not the one the state wrote: its bytes before offset {mark.length:,} differ "
            f"from what the state recorded (rewritten, cut and appended to, or another file); {_rebuild(path, bound)}"
        )
    return size - mark.length


class Ledger:
    """The ledger file opened for appending, and the mark it will have once synced."""

    def __init__(self, path: Path, mark: LedgerMark) -> None:
        self.path = path
        self.length = mark.length
        self._tail = _read_tail(path, mark.length) if mark.length else b""
        self._dirty = False
        created = not path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if created:
                sync_directory(path.parent)  # the new file's name is durable before anything refers to it
        except OSError as error:
            raise self._error(error) from error

    def cut(self, length: int) -> None:
        """Drop bytes after ``length``: lines whose state change never committed."""
        try:
            os.ftruncate(self._fd, length)
        except OSError as error:
            raise self._error(error) from error

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as error:
            raise self._error(error) from error
        self.length += len(data)
        # A batch is usually longer than the tail: keep its end without copying the whole batch again.
        self._tail = data[-TAIL_BYTES:] if len(data) >= TAIL_BYTES else (self._tail + data)[-TAIL_BYTES:]
        self._dirty = True

    def sync(self) -> LedgerMark:
        """Make every appended byte durable; the mark the state may now record."""
        if self._dirty:
            try:
                os.fsync(self._fd)
            except OSError as error:
                raise self._error(error) from error
            self._dirty = False
        return LedgerMark(self.length, _sha256(self._tail))

    def close(self) -> None:
        os.close(self._fd)

    def _error(self, error: OSError) -> LedgerWriteError:
        if error.errno in _FULL:
            advice = "free space (or raise the file size limit)"
        else:
            advice = "fix the path, its permissions or the disk"
        return LedgerWriteError(
            f"cannot write the ledger {shown(self.path)}: {error.strerror or error}; nothing after the last "
            f"committed batch was kept: {advice} and run again to resume (the rerun cuts any partial line)"
        )


class DiscardedLedger:
    """The ledger of a dry run (``recurrence tune``): records are counted, not kept. Its mark can never
    match a real ledger's bytes, so the state it leaves refuses any ledger given to it later."""

    DISCARDED: Final = "discarded by a dry run"

    def __init__(self) -> None:
        self.length = 0

    def append(self, data: bytes) -> None:
        self.length += len(data)

    def sync(self) -> LedgerMark:
        return LedgerMark(self.length, self.DISCARDED)

    def close(self) -> None:
        return None


# A full disk, a quota, a file size limit (RLIMIT_FSIZE makes writes fail with EFBIG).
_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def sync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
