"""A state knows its parts: the one check, at open, that every partition is this state's and where main says.

The main store records the state's identity (``IDENTITY_KEY``: a random id made when the state is created)
and which partitions it has committed journal lines to (``COMMITTED_KEY``, rewritten only when a batch
brings a partition's first line, so a batch costs nothing more). Each partition records the same id and its
own number (its ``IDENTITY_KEY``), stamped with its header when it is created, and how far it has applied
the journal (``statedir.Applied``, which the shards already write). Opening a state (``replay``, one
process or ``--jobs``, and every read command) compares them, before anything is written:

* a partition main committed to must be there, carry this state's id and its own number, and never stand
  after main (main is written first, ``coordinator.Run._commit``: a partition after it means an older main);
* when the state ended clean (``CLEAN_KEY`` is main's position), every such partition stands exactly at
  main's position; after a crash it may be behind (the next replay catches it up), but never before the
  last clean end (``CLEAN_KEY`` stays until the next one): before it, it is from an older copy;
* a partition main never committed to holds nothing of the state (a crash while it was being created,
  or a batch that never committed): a replay creates it again at its first line, readers pass it by. One
  that holds rows main never recorded means main is older than it.

A state of 1.0.0 (no id) is accepted and stamped by its first replay (its partitions as they are opened;
main says ``upgraded``, so a partition without an id is accepted from then on); reads of it skip the
identity part. A follower (``serve`` while a replay writes) opens main before its partitions, so it checks
presence and identity only: its partitions may be a batch ahead of its main.
"""

import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Final

import orjson

from ..core.stateheader import CONFIG_KEY, FORMAT_KEY
from ..exceptions import StateDirError, StorageError
from ..host.journalfile import JournalPosition
from ..host.printable import shown
from ..store.base import StateStore
from .header import NEW_STATE
from .ledgerfile import sync_directory
from .mainkeys import CLEAN_KEY, COMMITTED_KEY, EPOCH_KEY, IDENTITY_KEY, JOURNAL_KEY
from .statedir import (
    APPLIED_KEY,
    MAIN,
    PARTITIONS,
    Applied,
    MemoryState,
    StateDir,
    clean_mark,
    holds_store,
    is_store_file,
    partition_path,
)

CREATED: Final = "created"
UPGRADED: Final = "upgraded"
#: Rows a partition holds before any of the state's rows: a partition with nothing else holds nothing.
_PARTITION_HEADER: Final = frozenset({FORMAT_KEY, CONFIG_KEY, APPLIED_KEY, IDENTITY_KEY})
RESTORE: Final = f"restore the whole state folder from one backup, or {NEW_STATE}"

Get = Callable[[bytes], bytes | None]


@dataclass(frozen=True, slots=True)
class MainIdentity:
    id: str
    since: str

    def encode(self) -> bytes:
        return orjson.dumps({"id": self.id, "since": self.since})


def new_identity(since: str) -> MainIdentity:
    return MainIdentity(secrets.token_hex(16), since)


def partition_identity(state_id: str, partition: int) -> bytes:
    """A partition's ``IDENTITY_KEY`` row."""
    return orjson.dumps({"id": state_id, "partition": partition})


def committed_row(partitions: Iterable[int]) -> bytes:
    return orjson.dumps(sorted(partitions))


@dataclass(frozen=True, slots=True)
class Header:
    """What a partition store says of itself (``read_header``)."""

    layout: bool  # it has the row-layout stamp, written when it was created
    state_id: str | None
    number: int | None
    applied: Applied | None
    has_rows: bool  # rows beyond the header: rows of the state


def read_header(store: StateStore) -> Header:
    state_id: str | None = None
    number: int | None = None
    raw = store.get(IDENTITY_KEY)
    if raw is not None:
        try:
            found = orjson.loads(raw)
            state_id, number = str(found["id"]), int(found["partition"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            state_id, number = "unreadable", -1
    applied = store.get(APPLIED_KEY)
    rows = any(key not in _PARTITION_HEADER for key, _ in islice(store.iterate_prefix(b""), len(_PARTITION_HEADER) + 1))
    return Header(
        store.get(FORMAT_KEY) is not None, state_id, number, None if applied is None else Applied.decode(applied), rows
    )


def main_identity(get: Get) -> MainIdentity | None:
    raw = get(IDENTITY_KEY)
    if raw is None:
        return None
    try:
        found = orjson.loads(raw)
        return MainIdentity(str(found["id"]), str(found["since"]))
    except (orjson.JSONDecodeError, KeyError, TypeError) as error:
        raise StateDirError(f"the state's main store has an unreadable identity ({raw[:60]!r}); {RESTORE}") from error


def committed(get: Get) -> frozenset[int] | None:
    """The partitions main committed lines to (None: not recorded, a state of 1.0.0)."""
    raw = get(COMMITTED_KEY)
    return None if raw is None else frozenset(int(partition) for partition in orjson.loads(raw))


@dataclass(frozen=True, slots=True)
class Expected:
    """Main's side: where it stands, and where every partition stood at the last clean end (picklable: a
    ``replay --jobs`` worker checks its partitions against it as it opens them)."""

    state: str  # the state folder, as messages show it
    identity: MainIdentity | None
    committed: frozenset[int] | None
    at: tuple[int, int] | None  # (epoch, line) of main's journal position
    clean: bool  # every partition durable at ``at``
    floor: tuple[int, int] | None  # (epoch, line) of the last clean end, when not after ``at``

    @classmethod
    def read(cls, root: Path, get: Get) -> "Expected":
        epoch_raw, journal = get(EPOCH_KEY), get(JOURNAL_KEY)
        epoch = 0 if epoch_raw is None else int(epoch_raw)
        at = None if journal is None else (epoch, int(orjson.loads(journal)[1]))
        floor: tuple[int, int] | None = None
        clean_raw = get(CLEAN_KEY)
        if clean_raw is not None:
            clean_epoch, position = orjson.loads(clean_raw)
            if position is not None:
                floor = (int(clean_epoch), int(position[1]))
        # A clean mark after main's position (a run that read a new journal and applied nothing) says nothing.
        if floor is not None and (at is None or floor > at):
            floor = None
        # Clean exactly as the replay decides it (``runner._resume``): then it does not look at the partitions.
        clean = journal is not None and clean_raw == clean_mark(epoch, JournalPosition.decode(journal))
        return cls(shown(root), main_identity(get), committed(get), at, clean, floor)

    def missing(self, name: str) -> StateDirError:
        return StateDirError(f"partition {name} of the state {self.state} is missing: {RESTORE}")


@dataclass(slots=True)
class Parts:
    """The partitions of a state as the check found them."""

    use: list[int] = field(default_factory=list)  # the state's partitions: open these
    # Folders main never committed to, holding nothing of the state: created again (replay) or passed by.
    again: list[int] = field(default_factory=list)
    applied: dict[int, Applied | None] = field(default_factory=dict)  # per partition looked at
    committed: frozenset[int] = frozenset()  # main's record, or (a state of 1.0.0) every partition in ``use``
    unstamped: bool = False  # main records no identity yet
    # The partitions main committed to were found present and not opened: whoever opens them checks each
    # (``check_header``) against this.
    deferred: Expected | None = None


def _line(at: tuple[int, int]) -> str:
    return f"{at[1]:,}"


def check_parts(
    expected: Expected,
    folders: Iterable[int],
    header_of: Callable[[int], Header | None],
    follower: bool = False,
    present: Callable[[int], bool] | None = None,
) -> Parts:
    """Check every partition folder (``folders``) and every partition main committed to against main (what
    it records: ``expected``, ``Expected.read``).

    ``header_of``: a partition's ``Header``, or None when its folder holds no store that opens (a
    ``StorageError`` it raises for a partition main committed to is the answer). ``present``: when given and
    the state ended clean with an id, a partition main committed to is only looked for here, and checked by
    whoever opens it (``Parts.deferred``): a replay opens every partition anyway. Refuses (StateDirError, one
    line) or says which partitions to open and which to make again.
    """
    defer = present is not None and expected.clean and expected.identity is not None
    parts = Parts(unstamped=expected.identity is None, deferred=expected if defer else None)
    use: set[int] = set()
    for partition in sorted(set(folders) | set(expected.committed or ())):
        name = f"{partition:03d}"
        recorded = expected.committed is None or partition in expected.committed
        if defer and recorded and present is not None:
            if not present(partition):
                raise expected.missing(name)
            use.add(partition)
            continue
        try:
            header = header_of(partition)
        except StorageError:
            if recorded:
                raise
            header = None
        if header is None or not header.layout:
            if expected.committed is not None and partition in expected.committed:
                raise expected.missing(name)
            parts.again.append(partition)
            continue
        if not recorded:
            _check_identity(expected, header, name)
            if header.has_rows and not follower:
                raise StateDirError(
                    f"the main store of the state {expected.state} ({expected.state}/{MAIN}) is older than its "
                    f"partitions (partition {name} holds rows it never recorded): {RESTORE}"
                )
            if not header.has_rows:
                parts.again.append(partition)
                continue
        else:
            check_header(expected, partition, header, follower)
        use.add(partition)
        parts.applied[partition] = header.applied
    parts.use = sorted(use)
    parts.committed = expected.committed if expected.committed is not None else frozenset(use)
    return parts


def check_header(expected: Expected, partition: int, header: Header, follower: bool = False) -> None:
    """A partition main committed to (or, a state of 1.0.0, one with a header) against main: refuse (one line)
    one that is not this state's, not this number's, or not where main says it can stand."""
    name = f"{partition:03d}"
    if not header.layout:
        raise expected.missing(name)
    _check_identity(expected, header, name)
    if not follower:
        _check_position(expected, header, name)


def _check_identity(main: Expected, header: Header, name: str) -> None:
    state = main.state
    if header.state_id is None:
        if main.identity is not None and main.identity.since == CREATED:
            raise StateDirError(
                f"partition {name} of the state {state} carries no state id (it was not written into this state): "
                f"{RESTORE}"
            )
        return
    if main.identity is None:
        raise StateDirError(
            f"the main store of the state {state} ({state}/{MAIN}) is older than its partitions (they carry a state "
            f"id it does not): {RESTORE}"
        )
    if header.state_id != main.identity.id:
        raise StateDirError(
            f"partition {name} of the state {state} belongs to another state (id {header.state_id[:12]}, this "
            f"state's is {main.identity.id[:12]}): {RESTORE}"
        )
    if header.number != int(name):
        raise StateDirError(
            f"{state}/{PARTITIONS}/{name} holds partition {header.number:03d} of the state {state} (folders moved or "
            f"swapped): {RESTORE}"
        )


def _check_position(main: Expected, header: Header, name: str) -> None:
    state = main.state
    applied = (0, 0) if header.applied is None else (header.applied.epoch, header.applied.line)
    if main.at is None:
        # Main is written before any partition row: a main with no journal position under partitions that
        # hold rows is not theirs (a main deleted and made again, or one restored from before the first batch).
        if header.has_rows:
            raise StateDirError(
                f"the main store of the state {state} ({state}/{MAIN}) is older than its partitions (it records no "
                f"journal position, partition {name} holds rows to line {_line(applied)}): {RESTORE}"
            )
        return
    if applied > main.at:
        raise StateDirError(
            f"the main store of the state {state} ({state}/{MAIN}) is older than its partitions (main at journal "
            f"line {_line(main.at)}, partition {name} at line {_line(applied)}): {RESTORE}"
        )
    older = applied != main.at if main.clean else main.floor is not None and applied < main.floor
    if older:
        raise StateDirError(
            f"partition {name} of the state {state} is from an older copy of it (journal line {_line(applied)}, main "
            f"at line {_line(main.at)}): {RESTORE}"
        )


def stamps(parts: Parts) -> dict[bytes, bytes]:
    """Main's rows for a state that has none yet: a new state (nothing committed), or one of 1.0.0."""
    if not parts.unstamped:
        return {}
    identity = new_identity(UPGRADED if parts.committed else CREATED)
    return {IDENTITY_KEY: identity.encode(), COMMITTED_KEY: committed_row(parts.committed)}


def headers(stores: Mapping[int, StateStore]) -> Callable[[int], Header | None]:
    """``header_of`` over stores already open (readers)."""

    def header_of(partition: int) -> Header | None:
        store = stores.get(partition)
        return None if store is None else read_header(store)

    return header_of


def check_state_parts(state: "StateDir | MemoryState", main: StateStore) -> Parts:
    """``check_parts`` for a replay. A state that ended clean with an id: the partitions main committed to are
    looked for, and each is checked by the shard that opens it (``Shard.open``, ``Parts.deferred``); else
    (after a crash, where the replay needs every partition's position, or a state of 1.0.0) each partition's
    header is read here through a read-only open, closed again."""
    if isinstance(state, MemoryState):
        return check_parts(Expected.read(Path("(in memory)"), main.get), state.existing(), headers(state.partitions))
    open_partition = state.opener(read_only=True)

    def header_of(partition: int) -> Header | None:
        if not holds_store(partition_path(state.root, partition)):
            return None  # no database (yet): opening it read-only would write rocksdict's config into it
        store = open_partition(partition)
        try:
            return read_header(store)
        finally:
            store.close()

    def present(partition: int) -> bool:
        return holds_store(partition_path(state.root, partition))

    return check_parts(Expected.read(state.root, main.get), state.existing(), header_of, present=present)


def make_again(state: "StateDir | MemoryState", partitions: Iterable[int]) -> None:
    """Remove the folders of partitions main never committed to (``Parts.again``): created again at their
    first line. Only a store's own files are removed; a folder holding anything else is refused."""
    for partition in partitions:
        if isinstance(state, MemoryState):
            state.partitions.pop(partition, None)
            continue
        path = partition_path(state.root, partition)
        if not path.exists():
            continue
        foreign = [name for name in sorted(os.listdir(path)) if not is_store_file(name)]
        if foreign:
            raise StateDirError(
                f"partition {partition:03d} of the state {shown(state.root)} was never committed to and is made "
                f"again, but its folder holds files that are not a store's ({', '.join(foreign[:3])}): move them "
                "out and run again"
            )
        shutil.rmtree(path)
        sync_directory(path.parent)
