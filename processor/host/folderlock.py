"""One process per data folder: an exclusive lock on the folder for the holder's lifetime.

Two workers on one ``--datadir`` would open the same RocksDB databases; the
second used to retry RocksDB's own lock for about 30 s, join the group (a
rebalance on the healthy worker) and die with a traceback. The lock is
taken first, before anything else happens: ``<folder>/.recurrence.lock``,
``flock``ed and holding the holder's pid and host, so a second process stops
at once with one line naming the folder and the holder, and never reaches
the group. The kernel drops the lock when the holder exits, however it
exits (kill -9 included), so a stale file never blocks a restart.
"""

import fcntl
import os
import socket
from pathlib import Path
from typing import Final

from ..exceptions import StateDirError
from .printable import shown

LOCK_NAME: Final = ".recurrence.lock"

# The descriptors of the locks this process holds: open until it exits.
_HELD: Final[dict[Path, int]] = {}
# Per held folder, the outermost folder its lock created (None: it existed): what ``release_folder`` removes.
_CREATED: Final[dict[Path, Path | None]] = {}


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
    except OSError:
        return "another process"
    if not text or not text[0].isdigit():
        return "another process"
    host = f" on {text[1]}" if len(text) > 1 else ""
    return f"pid {text[0]}{host}"


def lock_folder(folder: Path, who: str = "worker") -> None:
    """Hold ``folder`` for this process (created if missing); StateDirError naming the holder if it is taken."""
    folder = folder.resolve()
    if folder in _HELD:
        return
    missing = [path for path in (folder, *folder.parents) if not path.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise StateDirError(f"cannot use the data folder {shown(folder)}: {error.strerror or error}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise StateDirError(
            f"the data folder {shown(folder)} is in use by another {who} ({holder}); give each {who} its own "
            "--datadir, or stop that one first"
        ) from None
    except OSError as error:
        os.close(fd)
        raise StateDirError(f"cannot lock the data folder {shown(folder)}: {error.strerror or error}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    _HELD[folder] = fd
    _CREATED[folder] = missing[-1] if missing else None


def release_folder(folder: Path) -> None:
    """Give the folder up after a refused start: the lock released and, if the lock created the folder
    (and its parents) and nothing else was written there, the folders removed -- a refused start leaves
    nothing behind."""
    folder = folder.resolve()
    fd = _HELD.pop(folder, None)
    created = _CREATED.pop(folder, None)
    if fd is None:
        return
    os.close(fd)
    if created is None:
        return
    (folder / LOCK_NAME).unlink(missing_ok=True)
    for path in (folder, *folder.parents):
        try:
            path.rmdir()  # only an empty folder: anything written there stays
        except OSError:
            return
        if path == created:
            return
