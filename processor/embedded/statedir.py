"""The embedded state directory: a main store and a fixed number of partition stores.

```
STATE/main/              RocksDB: the header, the ledger mark, the journal position, the record index,
                         dead-letter rows and counts, pattern rows (everything written in ledger order),
                         the state's id and the partitions it committed lines to (``parts``)
STATE/partitions/007/    RocksDB: the engine rows of the scopes whose partition is 7, the header, the
                         state's id and the number 7, and how far into the journal this partition has
                         applied (``APPLIED_KEY``)
```

The partition count is chosen when the state is created (``--partitions``)
and never changes; a scope's partition is Kafka's default partitioner over
its id (``partitioning``). ``replay --jobs N`` only assigns partitions to
processes, so N may change between runs. A partition's store is created the
first time one of its scopes appears.

Readers (``stats``, ``explain``, ``patterns``, ``serve``) open a ``StateView``:
one read-only ``StateStore`` over all of them, which sends a key to the store
that holds it (the main store's namespaces by name, every other row by its
scope) and merges scans across partitions in key order. A state of the
earlier single-store layout (state format 1: RocksDB files directly in STATE)
is still read; ``replay`` refuses it with the one line that says what to do
(``recurrence migrate``, ``migration``).
"""

import heapq
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import orjson
from rocksdict import Cache, WriteBufferManager

from ..core.partitioning import partition_for
from ..exceptions import StateDirError
from ..host.journalfile import JournalPosition
from ..host.printable import shown
from ..store.base import StateStore
from ..store.memory import MemoryStore
from ..store.rocksdb import RocksStore, rocks_options
from .ledgerfile import sync_directory
from .mainkeys import MAIN_NAMESPACES, MIGRATED_KEY, PARTITIONS_KEY

log = logging.getLogger("recurrence.state")

MAIN: Final = "main"
PARTITIONS: Final = "partitions"
#: Partitions of a new state: as many processes as a replay can use, few enough to open quickly (a
#: RocksDB store costs 4-5 ms of CPU to create or open and a dozen fsyncs to create, 15-25 ms on a busy
#: disk; a store is created only when one of its scopes appears). ``--partitions`` chooses another.
DEFAULT_PARTITIONS: Final = 8
MAX_PARTITIONS: Final = 256

#: Where ``recurrence migrate`` builds a state's new stores before they are moved into place.
MIGRATING: Final = ".migrating"
#: Partition-store row: [epoch, offset, line] -- every journal line of this partition up to there is applied.
APPLIED_KEY: Final = b'["applied"]'


@dataclass(frozen=True, slots=True)
class Applied:
    """How far a partition has applied the journal of its state's current epoch."""

    epoch: int
    offset: int
    line: int

    def encode(self) -> bytes:
        return orjson.dumps([self.epoch, self.offset, self.line])

    @classmethod
    def decode(cls, raw: bytes) -> "Applied":
        epoch, offset, line = orjson.loads(raw)
        return cls(int(epoch), int(offset), int(line))


def clean_mark(epoch: int, position: JournalPosition | None) -> bytes:
    """``CLEAN_KEY``'s value for a run of ``epoch`` that ended with every partition durable at ``position``."""
    return orjson.dumps([epoch, None if position is None else [position.offset, position.line]])


def main_path(root: Path) -> Path:
    return root / MAIN


def partition_path(root: Path, partition: int) -> Path:
    return root / PARTITIONS / f"{partition:03d}"


def is_single_store(root: Path) -> bool:
    """A state of the layout before partitions: one RocksDB directly in the directory."""
    return (root / "CURRENT").exists() and not main_path(root).exists()


def enclosing_state(path: Path) -> tuple[Path, str] | None:
    """The state ``path`` is a part of (its main store, or one of its partition stores), and which part."""
    if path.name == MAIN and holds_store(path) and (path.parent / PARTITIONS).is_dir():
        return path.parent, "its main store"
    if path.parent.name == PARTITIONS and len(path.name) == 3 and path.name.isdigit():
        root = path.parent.parent
        if holds_store(main_path(root)):
            return root, f"its partition {path.name}"
    return None


def refuse_part_of_state(path: Path) -> None:
    """A store inside a state is never a state of its own: reading it alone would give part of the evidence, and
    upgrading or replaying into it would break the state it belongs to."""
    found = enclosing_state(path)
    if found is not None:
        root, part = found
        raise StateDirError(
            f"{shown(path)} is part of the state {shown(root)} ({part}), not a state: pass --state {shown(root)}"
        )


def refuse_single_store(root: Path) -> None:
    refuse_part_of_state(root)
    if is_single_store(root):
        raise StateDirError(
            f"the state {shown(root)} has state format 1 (the single store of a recurrence before 1.0.0), which "
            f"replay no longer writes: upgrade it in place once with 'recurrence migrate --state {shown(root)}' "
            "(stats, explain, patterns and serve read it as it is)"
        )


#: The files a RocksDB store (and rocksdict) keeps in its directory: what a single store leaves in STATE.
_STORE_FILE: Final = re.compile(
    r"CURRENT|IDENTITY|LOCK|LOG(\.old\.\d+)?|MANIFEST-\d+|OPTIONS-\d+(\.dbtmp)?|\d+\.(sst|log|blob)"
    r"|rocksdict-config\.json|\d+\.dbtmp"
)


def is_store_file(name: str) -> bool:
    """A name RocksDB (or rocksdict) gives a file it keeps in a store's directory."""
    return _STORE_FILE.fullmatch(name) is not None


def leftovers(root: Path) -> list[Path]:
    """The single store's files a migration recorded (``MIGRATED_KEY``) still in ``root``, and the work folder
    of a migration. A file of a store's name that the migration did not record (an operator's ``LOG``, a copied
    ``CURRENT``) is not one: it is left where it is."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    recorded = _migrated(root)
    found = [root / name for name in sorted(names) if name in recorded and _STORE_FILE.fullmatch(name)]
    return [*found, root / MIGRATING] if (root / MIGRATING).exists() else found


def store_files(root: Path) -> list[str]:
    """The names of the files a single store in ``root`` keeps (what a migration records)."""
    return sorted(name for name in os.listdir(root) if _STORE_FILE.fullmatch(name))


def _migrated(root: Path) -> frozenset[str]:
    main = main_path(root)
    if not holds_store(main):
        return frozenset()
    store = RocksStore.open(main, read_only=True)
    try:
        raw = store.get(MIGRATED_KEY)
    finally:
        store.close()
    return frozenset() if raw is None else frozenset(str(name) for name in orjson.loads(raw))


def remove_leftovers(root: Path) -> int:
    """Remove what ``leftovers`` finds, once the main store is in place; how many were removed."""
    found = leftovers(root)
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    if found:
        sync_directory(root)
    return len(found)


def existing_partitions(root: Path) -> list[int]:
    """The partitions whose store was created (a name the layout does not use is not one)."""
    try:
        names = os.listdir(root / PARTITIONS)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise StateDirError(f"cannot list the state's partitions in {shown(root)}: {error.strerror}") from error
    return sorted(int(name) for name in names if len(name) == 3 and name.isdigit())


class PartitionStores:
    """Opens this process's partition stores with one block cache and one memtable budget between them,
    so memory does not grow with the number of partitions a process owns."""

    _CACHE_BYTES: Final = 32 * 2**20
    _MEMTABLE_BYTES: Final = 32 * 2**20
    #: A partition's memtable is flushed at this size, in RocksDB's background thread while the engine
    #: runs on. At the single store's 8 MiB no partition of a 50k-entry run ever filled one, so ``close``
    #: wrote every partition's whole memtable out, one after the other, with the run otherwise over
    #: (0.085 s of a 3.4 s run; 0.04 s at 2 MiB, 0.03 s at 1 MiB). At 1 MiB the flushes and the
    #: compactions they bring cost 4% more CPU on a 200k run than at 8 MiB; at 2 MiB none measurable.
    WRITE_BUFFER_BYTES: Final = 2 * 2**20

    def __init__(self, root: Path, read_only: bool = False, share: float = 1.0) -> None:
        """``share``: this process's part of one process's budget (``replay --jobs N``: 1/N each)."""
        self.root = root
        self.read_only = read_only
        self._cache = Cache(max(8 * 2**20, int(self._CACHE_BYTES * share)))
        self._buffers = WriteBufferManager(max(8 * 2**20, int(self._MEMTABLE_BYTES * share)), False)

    def open(self, partition: int) -> RocksStore:
        options = rocks_options(self._cache)
        options.set_write_buffer_manager(self._buffers)
        options.set_write_buffer_size(self.WRITE_BUFFER_BYTES)
        # Not durable (no fsync per batch): a partition the crash left behind the ledger is caught up from
        # the journal on the next run (runner.py); only the main store must never fall behind the ledger.
        return RocksStore.open(
            partition_path(self.root, partition), read_only=self.read_only, durable=False, options=options
        )


def _namespace_and_scope(key: bytes) -> tuple[str, str | None]:
    parts = orjson.loads(key)
    scope = parts[1] if len(parts) > 1 and isinstance(parts[1], str) else None
    return str(parts[0]), scope


def home(key: bytes, count: int) -> int | None:
    """The partition whose store holds the row ``key`` (None: the main store's): the main store's
    namespaces by name, every other row by its scope (a key that is not a JSON array goes to main)."""
    try:
        namespace, scope = _namespace_and_scope(key)
    except (orjson.JSONDecodeError, IndexError, TypeError):
        return None
    if namespace in MAIN_NAMESPACES or scope is None:
        return None
    return partition_for(scope, count)


def _prefix_parts(prefix: bytes) -> list[object]:
    if not prefix:
        return []
    body = prefix[:-1] + b"]" if prefix.endswith(b",") else prefix
    try:
        parts = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    return parts if isinstance(parts, list) else []


class StateView:
    """One read-only ``StateStore`` over a partitioned state directory (see the module docstring)."""

    def __init__(self, main: StateStore, partitions: Mapping[int, StateStore], count: int) -> None:
        self.main = main
        self.partitions = dict(partitions)
        self.count = count

    def as_of(self) -> Applied | None:
        """Where every partition stands, when they agree (None: no partition, or they differ)."""
        found = {store.get(APPLIED_KEY) for store in self.partitions.values()}
        if len(found) != 1:
            return None
        raw = found.pop()
        return None if raw is None else Applied.decode(raw)

    def partitions_agree(self) -> bool:
        return not self.partitions or self.as_of() is not None

    def _store_for(self, namespace: str, scope: str | None) -> StateStore | None:
        if namespace in MAIN_NAMESPACES or scope is None:
            return self.main
        return self.partitions.get(partition_for(scope, self.count))

    def get(self, key: bytes) -> bytes | None:
        partition = home(key, self.count)
        if partition is None:
            return self.main.get(key)
        store = self.partitions.get(partition)
        return None if store is None else store.get(key)

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        parts = _prefix_parts(prefix)
        if parts and isinstance(parts[0], str) and parts[0] in MAIN_NAMESPACES:
            yield from self.main.iterate_prefix(prefix)
            return
        if len(parts) > 1 and isinstance(parts[0], str) and isinstance(parts[1], str):
            store = self._store_for(parts[0], parts[1])
            if store is not None:
                yield from store.iterate_prefix(prefix)
            return
        stores = [self.main, *self.partitions.values()] if not parts else list(self.partitions.values())
        yield from heapq.merge(*(store.iterate_prefix(prefix) for store in stores), key=lambda row: row[0])

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        raise StateDirError("a state opened for reading cannot be written")

    def close(self) -> None:
        failure: Exception | None = None
        for store in [*self.partitions.values(), self.main]:
            try:
                store.close()
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise failure


class Store(StateStore, Protocol):
    def sync(self) -> None: ...


class StateDir:
    """The state as a directory (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def prepare(self) -> None:
        """Before a replay: refuse a single store; finish what an interrupted migration left (files only)."""
        refuse_single_store(self.root)
        if main_path(self.root).is_dir() and remove_leftovers(self.root):
            log.warning("removed the files an interrupted 'recurrence migrate' left in the state")

    def open_main(self, durable: bool = True) -> RocksStore:
        # Durable writes: after a power cut the main store never falls behind what it recorded of the ledger
        # (``durable=False``: a store being built, synced once when it is complete; ``splitstore``).
        # Its memtable (the records index, mostly) is flushed at the size a partition's is
        # (``PartitionStores``): in the background while the run goes on, not all of it at close.
        options = rocks_options()
        options.set_write_buffer_size(PartitionStores.WRITE_BUFFER_BYTES)
        return RocksStore.open(main_path(self.root), durable=durable, options=options)

    def existing(self) -> list[int]:
        return existing_partitions(self.root)

    def opener(self, read_only: bool = False, share: float = 1.0) -> Callable[[int], Store]:
        return PartitionStores(self.root, read_only=read_only, share=share).open


class MemoryState:
    """A state held in memory (tests, dry runs): the same layout, one process."""

    def __init__(self) -> None:
        self.main = MemoryStore()
        self.partitions: dict[int, MemoryStore] = {}

    def prepare(self) -> None:
        return None

    def open_main(self) -> MemoryStore:
        return self.main

    def existing(self) -> list[int]:
        return sorted(self.partitions)

    def opener(self, read_only: bool = False, share: float = 1.0) -> Callable[[int], Store]:
        def open_partition(partition: int) -> MemoryStore:
            return self.partitions.setdefault(partition, MemoryStore())

        return open_partition

    def view(self) -> "StateView":
        return StateView(self.main, self.partitions, partition_count(self.main) or 1)


def partition_count(main: StateStore) -> int | None:
    raw = main.get(PARTITIONS_KEY)
    return None if raw is None else int(raw)


def holds_store(path: Path) -> bool:
    """Does ``path`` hold a RocksDB database? (Its ``CURRENT`` file names the live manifest.)"""
    return (path / "CURRENT").is_file()


def check_state(root: Path) -> None:
    """Refuse, before anything is opened, a ``--state`` that no replay wrote.

    A reader must find a database where it looks: rocksdict creates the directory it is given and writes
    its ``rocksdict-config.json`` there before RocksDB finds no ``CURRENT`` and fails, so opening a folder
    that is not a state would leave ``main/`` behind in it. Nothing is written here, whatever the folder.
    """
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise StateDirError(f"{shown(root)} {what}; pass the --state directory that 'recurrence replay' wrote")
    refuse_part_of_state(root)
    if not (holds_store(main_path(root)) or is_single_store(root)):
        raise StateDirError(
            f"{shown(root)} is not a recurrence state (no {MAIN}/CURRENT in it); pass the --state directory that "
            "'recurrence replay' wrote, or replay a journal into it first"
        )


@contextmanager
def closing_store(store: StateStore, where: str) -> Iterator[StateStore]:
    """The store, closed when the block ends; a failure to close is a ``StateDirError`` naming ``where``."""
    try:
        yield store
    except BaseException:
        # The run already failed (a full disk, say): RocksDB may refuse to close as well,
        # and that second error must not hide the first.
        try:
            store.close()
        except Exception as error:  # rocksdict raises plain Exception
            log.debug("closing the state after a failure also failed: %s", type(error).__name__)
        raise
    try:
        store.close()
    except Exception as error:
        raise StateDirError(f"cannot close the state {where}: {error}") from error
