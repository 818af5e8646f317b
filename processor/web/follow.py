"""Following a state that a replay is writing: ``recurrence serve`` shows each commit within seconds.

A replay owns its state (RocksDB's lock) and must never wait for a reader,
and a reader must never see half a batch. So a follower never shares the
writer's database: it reads a *view* (``RocksStore.open_follower``: what was
committed when the view opened; batch-atomic, because RocksDB recovers its
write-ahead log batch by batch) and, when the state's files changed, opens a
new view and drops the old one. Requests are answered on one thread, so each
answer is computed from one view: one batch boundary.

Why not catch one view up in place (RocksDB's ``TryCatchUpWithPrimary`` on a
secondary instance): measured with rocksdict 0.3.29, a view caught up while
the writer closed (or reopened) the database went on returning, on point
reads, values it had taken from the write-ahead log before the writer's
last flush, while its scans were current: after the writer ended, a key
bumped by every batch read 59,330 to 59,991 instead of 59,999, for good
(in 8 runs of 8). A new view is exact, and
opening one costs ~6 ms on a 200k-entry state (the write-ahead log it
recovers is at most two write buffers, 16 MiB).

When to look again: every durable commit grows the write-ahead log, every
flush or compaction changes the set of table files; so the names, sizes and
modification times of the state's files (RocksDB's info logs and rocksdict's
config file aside: they change without a commit) are the *signature* that
says a new view may differ. It is one directory listing (recursive, so a
state of several stores is followed the same way), taken every ``interval``.

Pace: a new view costs its reader more than the open: every answer is
computed again (``/statistics`` of 50 scopes on a 200k-entry state: ~1 s of
CPU). While a replay writes without pause (the files differ at every look) a
new view opens at most every ``pace()`` seconds; ``serve`` passes four times
the CPU it spent since the last view (every answer, whoever asked), so
following takes at most about a fifth of a core from the writer, whatever
the state's size and however many pages are open. As soon as the
files stop changing (the replay ended or paused), the next look opens the
view: the end of a replay shows at once.

What the view is as of comes from the state, never the reader's clock: the
position the runner commits with every batch (journal lines and bytes
applied), its ledger mark and the batch's wall-clock time (``state_mark``).

Gone or replaced: every look also takes the state's *identity* (device and
inode of the folder and of its main store, ``state_identity``). When the
folder or its main store is gone, the follower says so (``problem``: serve's
``/readyz`` answers 503 and the page shows it) and keeps the last view, whose
files stay readable while it holds them; the numbers are then the last
known, never presented as current. When the identity changed (another folder
at the path: a restored backup, a rebuilt state), a view of the new folder
opens at once, without waiting for the pace; until one does, that is the
problem. A view of the state at the path clears it.
"""

import asyncio
import logging
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from ..embedded.ledgerfile import LedgerMark
from ..embedded.mainkeys import JOURNAL_KEY, LEDGER_KEY, WRITTEN_KEY
from ..embedded.statedir import StateView, check_state, is_single_store, main_path
from ..embedded.views import open_view
from ..exceptions import StateDirError
from ..host.journalfile import JournalPosition
from ..host.printable import shown
from ..store.base import StateStore

log = logging.getLogger("recurrence.follow")

INTERVAL: Final = 0.25
MIN_PACE: Final = 1.0
# Files that change while nothing is committed: RocksDB's info log (and its rotated copies), rocksdict's
# config (rewritten by every open, a reader's included).
_NOT_STATE: Final = ("LOG", "rocksdict-config.json")


@dataclass(frozen=True, slots=True)
class StateMark:
    """How far a state is: the journal prefix applied, the ledger's length, when the batch committed."""

    line: int
    offset: int
    ledger_bytes: int
    written_ms: int | None  # None: nothing committed yet, or a state written before the time was kept

    @property
    def etag(self) -> str:
        """A strong entity tag: every commit writes a new time, so two commits never share one."""
        return f'"{self.line}-{self.offset}-{self.ledger_bytes}-{self.written_ms or 0}"'

    def body(self) -> dict[str, Any]:
        written = None
        if self.written_ms is not None:
            written = datetime.fromtimestamp(self.written_ms / 1000, UTC).isoformat(timespec="milliseconds")
        return {
            "journal": {"line": self.line, "offset": self.offset},
            "ledger_bytes": self.ledger_bytes,
            "written_at": written and written.replace("+00:00", "Z"),
        }


def state_mark(store: StateStore) -> StateMark:
    raw = store.get(JOURNAL_KEY)
    position = JournalPosition.decode(raw) if raw is not None else None
    as_of = store.as_of() if isinstance(store, StateView) else None
    if as_of is not None and position is not None and as_of.line != position.line:
        # A replay is running: the statistics come from the partitions, which the main store's position
        # may lead (committed first) or trail (a batch the writer committed after the view opened the main
        # store and before it opened the partitions): they say how far the numbers are.
        position = JournalPosition(as_of.offset, as_of.line, position.sha256)
    raw = store.get(LEDGER_KEY)
    ledger = LedgerMark.decode(raw).length if raw is not None else 0
    raw = store.get(WRITTEN_KEY)
    return StateMark(
        line=position.line if position else 0,
        offset=position.offset if position else 0,
        ledger_bytes=ledger,
        written_ms=int(raw) if raw is not None else None,
    )


def files_signature(root: Path) -> Hashable:
    """Names, sizes and modification times of the state's files under ``root``; None when it is gone."""
    found: list[tuple[str, int, int]] = []
    pending = [root]
    try:
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
                    elif not entry.name.startswith(_NOT_STATE):
                        stat = entry.stat(follow_symlinks=False)
                        found.append((entry.path, stat.st_size, stat.st_mtime_ns))
    except FileNotFoundError:
        return None
    return tuple(sorted(found))


def state_identity(root: Path) -> Hashable:
    """Which folder the state at ``root`` is: device and inode of the folder and of its main store (of the
    folder alone for a single-store state); None when the folder or its main store is gone."""
    try:
        folder = os.stat(root)
        main = None if is_single_store(root) else os.stat(main_path(root)).st_ino
    except OSError:
        return None
    return (folder.st_dev, folder.st_ino, main)


class Follower:
    """The current view of a followed state and its mark; ``follow`` replaces the view as the state moves.

    ``identity``: which folder the state is (None: gone; ``state_identity``); ``problem``: why the view
    served is not the state at the path (gone, or replaced by one that does not open), else None."""

    def __init__(
        self,
        open_view: Callable[[], StateStore],
        signature: Callable[[], Hashable],
        identity: Callable[[], Hashable] = lambda: True,
        where: str = "the state",
    ) -> None:
        self._open = open_view
        self._signature = signature
        self._identity = identity
        self.where = where
        self.identity = identity()
        self._next_identity = self.identity
        self._seen = signature()
        self.view = open_view()
        self.mark = state_mark(self.view)
        self.views_opened = 1
        self.problem: str | None = None

    def look_identity(self) -> Hashable:
        return self._identity()

    def gone(self) -> str:
        return (
            f"{self.where} is gone (deleted or moved away); the numbers shown are the last view's, as of journal "
            f"line {self.mark.line:,}, until a state is back at that path"
        )

    def replaced_by_unreadable(self, error: StateDirError) -> str:
        return (
            f"{self.where} was replaced by another folder that cannot be opened ({error}); the numbers shown are "
            f"the last view's, as of journal line {self.mark.line:,}"
        )

    def changed(self) -> bool:
        return self._signature() != self._seen

    def look(self) -> Hashable:
        """The state's files as they are now."""
        return self._signature()

    def differs(self, signature: Hashable) -> bool:
        """Do these files differ from those of the view served?"""
        return signature != self._seen

    def open_next(self) -> tuple[Hashable, StateStore, StateMark]:
        """A new view (may run on another thread: it touches nothing the current view's readers use)."""
        # The signature and the identity are taken before the view opens: a commit (or a swap) that lands
        # during the open changes them again, so the next look opens another view instead of missing it.
        seen = self._signature()
        self._next_identity = self._identity()
        view = self._open()
        try:
            return seen, view, state_mark(view)
        except BaseException:
            view.close()
            raise

    def replace(self, seen: Hashable, view: StateStore, mark: StateMark) -> StateStore:
        """Serve ``view`` from now on; the old view, for the caller to close."""
        old, self.view, self.mark, self._seen = self.view, view, mark, seen
        self.identity = self._next_identity
        self.views_opened += 1
        return old

    def close(self) -> None:
        self.view.close()


async def follow(
    follower: Follower,
    replaced: Callable[[StateStore, StateMark], None],
    interval: float = INTERVAL,
    pace: Callable[[], float] = lambda: MIN_PACE,
    troubled: Callable[[str | None], None] = lambda _: None,
) -> None:
    """Look at the files every ``interval``; open a new view (off the event loop) when they changed, at most
    every ``pace()`` seconds while they keep changing, at once when the state's folder was replaced; hand it
    to ``replaced`` on the loop's thread (between two requests), then close the old one. ``troubled`` gets
    ``follower.problem`` whenever it changes (a message, or None once the view is the state's again)."""
    loop = asyncio.get_running_loop()
    failing = False
    opened = loop.time()
    previous: Hashable = None

    def trouble(problem: str | None, kind: str = "") -> None:
        if problem != follower.problem:
            if problem is not None and follower.problem is None:
                log.warning("the state is %s: serving the last view, as of journal line %d", kind, follower.mark.line)
            elif problem is None:
                log.warning("the state is back: serving it as of journal line %d", follower.mark.line)
            follower.problem = problem
            troubled(problem)

    while True:
        await asyncio.sleep(interval)
        identity = follower.look_identity()
        if identity is None:
            trouble(follower.gone(), "gone")
            continue
        moved = identity != follower.identity
        current = follower.look()
        settled, previous = current == previous, current
        if not moved and not follower.differs(current):
            trouble(None)  # the same folder back (moved away and back): the view served is its own
            continue
        if not moved and not settled and loop.time() - opened < pace():
            continue  # still being written: the next view waits for the pace, or for the writer to stop
        try:
            seen, view, mark = await loop.run_in_executor(None, follower.open_next)
        except StateDirError as error:
            # The writer removed a file the open was reading, or the state is being rebuilt: keep
            # serving the last view and look again (saying so when it is no longer the state's).
            if moved:
                trouble(follower.replaced_by_unreadable(error), "replaced by a folder that does not open")
            if not failing:
                log.warning("cannot open a new view of the state yet (%s); serving the last one", type(error).__name__)
            failing = True
            continue
        failing = False
        opened = loop.time()
        old = follower.replace(seen, view, mark)
        replaced(view, mark)
        old.close()
        trouble(None if follower.look_identity() == follower.identity else follower.problem)
        log.debug("state now as of journal line %d (%d views opened)", mark.line, follower.views_opened)


def follow_state(path: Path) -> Follower:
    """A follower of the embedded state at ``path``: its main store and every partition (``statedir``).

    A view opens the main store first, then the partitions: a batch the writer commits in between shows
    in a partition one view early (its counters ahead of the main store's position by that batch),
    never the other way round; the next view is whole again.
    """
    if not path.exists():
        raise StateDirError(f"no state directory at {shown(path)}; run 'recurrence replay' first")
    check_state(path)  # before the first view: a folder no replay wrote is refused untouched
    return Follower(
        lambda: open_view(path, follower=True),
        lambda: files_signature(path),
        lambda: state_identity(path),
        f"the state folder {shown(path)}",
    )
