"""Files a command writes its output to (``--out`` of ``ledger-dump`` and ``statistics-dump``).

An existing file is never overwritten without ``--force``, and only a
regular file is written (a device or a FIFO is refused; ``-`` is stdout).
A file that is followed (``ledger-dump --follow``) is opened for append and
checked at every flush: when it was truncated under the command (it is
shorter than what was written) or replaced (its path names another file, or
none), the command stops with one line (exit 2) instead of writing on at its
old position, which left a hole of NUL bytes and a broken line.
"""

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..exceptions import SettingsError, UnusableError
from .printable import shown
from .regularfile import not_regular


class Writable(Protocol):
    """What the records are written to: a binary stream, or a ``WatchedFile``."""

    def write(self, data: bytes, /) -> Any: ...

    def flush(self) -> None: ...


class OutputChangedError(UnusableError):
    """The output file was truncated or replaced while the command wrote to it."""


class WatchedFile:
    """An output file opened for append that notices, at every flush, a truncation or a replacement."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        info = os.fstat(fd)
        self._identity = (info.st_dev, info.st_ino)
        self._written = info.st_size
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._pending.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        self.check()
        data = b"".join(self._pending)
        self._pending.clear()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._written += len(data)

    def check(self) -> None:
        where = shown(self.path)
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            raise OutputChangedError(f"--out {where} was removed while ledger-dump wrote to it; stopped") from None
        if (named.st_dev, named.st_ino) != self._identity:
            raise OutputChangedError(
                f"--out {where} was replaced by another file while ledger-dump wrote to it; stopped"
            )
        size = os.fstat(self._fd).st_size
        if size < self._written:
            raise OutputChangedError(
                f"--out {where} was truncated to {size:,} bytes while ledger-dump had written "
                f"{self._written:,}; stopped (run again with --force to start it over)"
            )

    def close(self) -> None:
        os.close(self._fd)


def _open(path: Path, force: bool, append: bool) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_APPEND if append else 0)
    if not force:
        flags |= os.O_EXCL  # an existing file (or a link to one) is refused by the open itself
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise SettingsError(
            f"--out {shown(path)} exists; pass --force to overwrite it, or choose another path"
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise not_regular(path, "--out", mode)
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)  # only reached for a new file, or with --force
    return fd


def check_output(path: str | None, force: bool) -> None:
    """Refuse ``--out`` before any work (an existing file without ``force``, anything but a regular file)."""
    if path in (None, "-"):
        return
    try:
        mode = os.stat(str(path)).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise not_regular(str(path), "--out", mode)
    if not force:
        raise SettingsError(f"--out {shown(str(path))} exists; pass --force to overwrite it, or choose another path")


@contextmanager
def output(path: str | None, force: bool, follow: bool = False) -> Iterator[Writable]:
    """Where the records go: stdout (no path, or ``-``), else the file (refused if it exists, unless ``force``)."""
    import sys  # noqa: PLC0415 - read when called: tests swap the stream

    if path in (None, "-"):
        yield sys.stdout.buffer
        return
    target = Path(str(path))
    fd = _open(target, force, append=follow)
    if follow:
        watched = WatchedFile(target, fd)
        try:
            yield watched
        finally:
            watched.close()
        return
    with os.fdopen(fd, "wb") as handle:
        yield handle
