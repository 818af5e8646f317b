"""File arguments are regular files: a directory, a device or a FIFO is refused before a byte is read.

``/dev/zero`` given where a file is read (a ledger line, a config file, a
token) never ends, a FIFO blocks the command until some writer comes, a
directory fails late with an unrelated error. Each open here does not block
(``O_NONBLOCK``), checks what it opened (``fstat`` on the open descriptor, so
nothing can be swapped in between a check and the open), small files are
read up to a bound, and files read a line at a time are read a bounded line
at a time (``bounded_lines``): a file of zeros without a newline is not read
whole into memory to find its first line.
"""

import os
import stat
from collections.abc import Iterator
from typing import BinaryIO, Final, Protocol

from ..exceptions import SettingsError, UnusableError
from .printable import shown

#: Files read whole (a config file, a token): anything longer is not one.
SMALL_FILE_LIMIT: Final = 1 << 20


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def not_regular(path: str | os.PathLike[str], what: str, mode: int) -> SettingsError:
    return SettingsError(f"{what} {shown(path)} is {_kind(mode)}; it must be a regular file")


def check_regular(path: str | os.PathLike[str], what: str, must_exist: bool = True) -> None:
    """Refuse ``path`` unless it is a regular file (or, with ``must_exist=False``, absent)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if must_exist:
            raise SettingsError(f"{what} {shown(path)} does not exist") from None
        return
    except OSError as error:
        raise SettingsError(f"cannot read {what} {shown(path)}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise not_regular(path, what, mode)


def open_regular(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """``path`` opened for reading, refused unless what was opened is a regular file (SettingsError); an
    OSError when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, what, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small(path: str | os.PathLike[str], what: str, limit: int = SMALL_FILE_LIMIT) -> bytes:
    """The whole of a small regular file; refused (SettingsError) when it cannot be read, is not a regular
    file or holds more than ``limit`` bytes."""
    try:
        with open_regular(path, what) as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise SettingsError(f"cannot read {what} {shown(path)}: {error.strerror or error}") from None
    if len(data) > limit:
        raise SettingsError(f"{what} {shown(path)} is larger than {limit:,} bytes; it is not the file meant")
    return data


class LineTooLongError(UnusableError):
    """A line longer than the longest the file can hold when it is what it should be."""


class _Lines(Protocol):
    def readline(self, size: int = -1, /) -> bytes: ...


def bounded_lines(handle: _Lines, limit: int, what: str, advice: str) -> Iterator[bytes]:
    """The lines of ``handle`` (with their line endings); LineTooLongError naming ``what``, the line's number
    and ``advice`` for a line longer than ``limit`` bytes (its ending not counted), after reading at most
    that much of it."""
    number = 0
    while True:
        line = handle.readline(limit + 2)  # the line, and an ending of at most two bytes (\r\n)
        if not line:
            return
        number += 1
        if len(line.rstrip(b"\r\n")) > limit:
            raise LineTooLongError(f"{what} line {number:,} is longer than {limit:,} bytes; {advice}")
        yield line
