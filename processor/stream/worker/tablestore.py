"""Engine state in a Faust table: the ``StateStore`` adapter over Faust's per-partition stores.

The table is an ordinary changelog-backed Faust table (raw bytes keys and
values, ``rocksdb://`` store, changelog with the journal's partition count),
with two store subclasses that add what the engine needs and Faust lacks:

* ``iterate_prefix``: Faust tables are mappings without ordered scans. The
  RocksDB store keeps one rocksdict database per partition
  (``<tabledir>/<table>-<partition>.db``, opened with ``raw_mode=True`` so keys
  and values are exactly the bytes written); ``RocksPartition`` seeks that
  database with ``items(from_key=prefix)`` and stops at the first key past the
  prefix, which is the same byte order ``processor.store.RocksStore`` uses. The
  memory store (broker-less tests) keeps a sorted ``MemoryStore`` per partition.
* change sets: every entry's changes travel as one changelog record (see
  ``changeset``) and are applied locally as one write batch together with the
  changelog offset Faust uses to resume recovery (``__faust\\0offset__``), so a
  partition's database is never ahead of, or half of, its changelog.
* snapshots (``snapshots``): the store's rebalance hook loads a partition's
  latest snapshot before Faust's recovery when the partition has no database,
  and the store hands out point-in-time views of its databases to ship.

The Faust methods these classes override (two of them private: the table's
``_new_store_by_url``, the RocksDB store's ``_db_for_partition``) are declared
in ``faustcompat.MEMBERS`` and checked on every upgrade; the store's open
databases are reached through ``faustcompat.open_databases``.

All keys of one scope start with ``["<ns>","<scope_id>",``, and a scope's
entries all arrive on the journal partition of key ``scope_id``, so each
partition's database holds whole scopes and the engine never needs a key from
another partition.
"""

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import faust
from faust.stores import memory as faust_memory
from faust.stores import rocksdb as faust_rocksdb
from rocksdict import AccessType, Rdict, ReadOptions, WriteBatch, WriteOptions
from yarl import URL

from ...store.base import StateStore, Transaction
from ...store.memory import MemoryStore
from ...store.rocksdb import RocksStore, verified_rows
from ..batch import changeset
from ..batch.types import ChangelogRecord
from ..clients.faustcompat import open_databases

OFFSET_KEY = faust_rocksdb.Store.offset_key
#: Faust's key and value decoders, handed to ``apply_changelog_batch`` (change sets are decoded here).
Convert = Callable[[Any], Any]
log = logging.getLogger("recurrence.stream")


def _expand(value: bytes | None, key: bytes | None) -> Iterable[tuple[bytes, bytes | None]]:
    if changeset.is_changeset(value):
        assert value is not None
        return changeset.decode(value).items()
    return () if key is None else ((key, value),)  # a plain record; one without a key names nothing


def _joined(
    assembler: changeset.Assembler, partition: int, applied: int, records: Iterable[ChangelogRecord]
) -> Iterator[ChangelogRecord]:
    """The records past ``applied`` to apply, split change sets joined (yielded at their last part)."""
    assembler.forget_through(partition, applied)
    orphaned = assembler.orphaned
    for offset, key, value in records:
        if offset <= applied:
            continue
        joined = assembler.take(partition, offset, value)
        if joined is not changeset.Held.HELD:
            yield offset, key, joined
            applied = offset
    if assembler.orphaned > orphaned:
        log.warning(
            "changelog partition %d: dropped %d parts of a change set whose other parts were never written "
            "(a crash mid-write; its batch ran again)",
            partition,
            assembler.orphaned - orphaned,
        )


class KeptRocksDBOptions(faust_rocksdb.RocksDBOptions):
    """Faust's RocksDB options, except that a reopened database keeps its table options.

    Faust opens with ``Rdict(path, options=...)`` alone; rocksdict then reopens an
    existing database with the column family options it reloads from the OPTIONS
    file, where the table options come back as defaults (``filter_policy=nullptr``,
    a default block cache): after every restart each miss read a data block (7 µs
    instead of under 1 µs). Passing the same options for the default column family
    too keeps them, as ``processor.store.rocksdb.RocksStore.open`` does.
    """

    def open(self, path: Path, *, read_only: bool = False) -> Any:
        if not self.use_rocksdict:
            return super().open(path, read_only=read_only)
        options = self.as_options()
        access = AccessType.read_write() if self.ttl is None else AccessType.with_ttl(self.ttl)
        db = Rdict(str(path), options=options, column_families={"default": options}, access_type=access)
        db.set_read_options(ReadOptions())
        return db


#: What to do about a worker's local table store that cannot be read back: the changelog is the source of truth.
REBUILD_LOCAL: Final = (
    "stop the worker, remove its --datadir and start it again: it restores its partitions from the changelog"
)


def _where(store: Any, partition: int) -> str:
    return f"the worker's local store of table {store.table.name!r} partition {partition}"


class VerifiedSnapshot:
    """A point-in-time view of a partition database whose rows are read with every block verified: a corrupt
    block ends ``items`` with ``StorageError``, never early (a short snapshot would be shipped as whole)."""

    def __init__(self, snapshot: Any, where: str) -> None:
        self.snapshot = snapshot
        self.where = where

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return verified_rows(self.snapshot, b"", self.where, REBUILD_LOCAL)


class SnapshotHook(Protocol):
    """What the store asks of ``snapshots.Snapshots`` (set on the table by the app)."""

    async def before_recovery(self, store: "ChangeSetRocksStore", assigned: set[Any], revoked: set[Any]) -> None: ...

    async def at_shutdown(self, store: "ChangeSetRocksStore") -> None: ...


class ChangeSetRocksStore(faust_rocksdb.Store):
    """Faust's RocksDB table store, plus prefix scans, change-set changelog records and snapshots."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rocksdb_options = KeptRocksDBOptions(**(self.options or {}), use_rocksdict=self.use_rocksdict)
        self.replayed = 0  # changelog records applied by recovery and standbys
        self.assembler = changeset.Assembler()  # split change sets, joined across recovery batches

    # -- snapshots (see ``snapshots``) ---------------------------------------------------------
    async def on_rebalance(
        self, assigned: set[Any], revoked: set[Any], newly_assigned: set[Any], generation_id: int = 0
    ) -> None:
        hook: SnapshotHook | None = getattr(self.table, "snapshots", None)
        if hook is not None:  # before Faust's recovery reads the offset each database holds
            await hook.before_recovery(self, assigned, revoked)
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)

    async def stop(self) -> None:
        hook: SnapshotHook | None = getattr(self.table, "snapshots", None)
        if hook is not None and open_databases(self):  # streams are drained by now: the state is final
            await hook.at_shutdown(self)
        await super().stop()

    def is_open(self, partition: int) -> bool:
        return partition in open_databases(self)

    def open_changelog_offset(self, partition: int) -> int | None:
        """The changelog offset an open partition database holds (None if it is not open or holds none)."""
        db = open_databases(self).get(partition)
        raw = None if db is None else db.get(OFFSET_KEY)
        return None if raw is None else int(raw)

    def snapshot_view(self, partition: int) -> "VerifiedSnapshot | None":
        """A point-in-time view of an open partition database (rows in key order, the offset among them)."""
        db = open_databases(self).get(partition)
        return None if db is None else VerifiedSnapshot(db.snapshot(), _where(self, partition))

    def open_scratch(self, path: Path) -> Any:
        """A new database with the store's options, to load a snapshot into before it is renamed into place."""
        return self.rocksdb_options.open(path)

    @staticmethod
    def write_rows(db: Any, rows: Iterable[tuple[bytes, bytes]]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in rows:
            batch.put(key, value)
        options = WriteOptions()
        # A scratch database: flushed once loaded, discarded if the load fails. (A property at
        # runtime; rocksdict's stub declares a method.)
        options.disable_wal = True  # type: ignore[method-assign,assignment]
        db.write(batch, options)

    def partition_state(self, partition: int) -> StateStore:
        db = self._db_for_partition(partition)
        return RocksStore(db, owned=False, where=_where(self, partition), advice=REBUILD_LOCAL)

    def open_partition_state(self, partition: int) -> StateStore | None:
        db = open_databases(self).get(partition)
        return None if db is None else RocksStore(db, owned=False, where=_where(self, partition), advice=REBUILD_LOCAL)

    def generation(self, partition: int) -> int:
        generations: dict[int, int] = self.__dict__.setdefault("_generations", {})
        return generations.get(partition, 0)

    def _changed(self, partition: int) -> None:
        generations: dict[int, int] = self.__dict__.setdefault("_generations", {})
        generations[partition] = generations.get(partition, 0) + 1

    def flush_local(self, partition: int, txn: Transaction, changelog_offset: int) -> None:
        txn.flush({OFFSET_KEY: str(changelog_offset).encode()})

    def changelog_offset(self, partition: int) -> int | None:
        raw = self._db_for_partition(partition).get(OFFSET_KEY)
        return None if raw is None else int(raw)

    def apply_changelog_batch(self, batch: Iterable[Any], to_key: Convert, to_value: Convert) -> None:
        """Recovery and standby replicas: expand change sets, one write batch per partition."""
        by_partition: dict[int, list[ChangelogRecord]] = {}
        for event in batch:
            message = event.message
            by_partition.setdefault(message.partition, []).append((message.offset, message.key, message.value))
            self.replayed += 1
        for partition, records in by_partition.items():
            self.apply_changelog(partition, records)

    def apply_changelog(self, partition: int, records: Sequence[ChangelogRecord]) -> None:
        """Changelog records of one partition in one write batch, with the last one's offset.

        Records at or below the offset the database already holds are skipped: each
        was applied before (by Faust's recovery, a standby, or ``restore_tail``), and
        applying an old change set again would move keys back. The parts of a split
        change set are applied with its last part (``changeset.Assembler``); until then
        the recorded offset stays at the last whole one.
        """
        db = self._db_for_partition(partition)
        raw = db.get(OFFSET_KEY)
        applied = -1 if raw is None else int(raw)
        write = WriteBatch(raw_mode=True)
        last = applied
        for offset, key, value in _joined(self.assembler, partition, applied, records):
            for k, v in _expand(value, key):
                if v is None:
                    write.delete(k)
                else:
                    write.put(k, v)
            last = offset
        if last == applied:
            return
        write.put(OFFSET_KEY, str(last).encode())
        db.write(write)
        self._changed(partition)

    def _db_for_partition(self, partition: int) -> Any:
        if partition not in open_databases(self):
            self._changed(partition)  # a newly opened database: nothing cached about it can hold
        return super()._db_for_partition(partition)


class ChangeSetMemoryStore(faust_memory.Store[bytes, bytes]):
    """In-memory variant for broker-less tests: a sorted ``MemoryStore`` per partition."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._partitions: dict[int, MemoryStore] = {}
        self._generations: dict[int, int] = {}
        self._offsets: dict[int, int] = {}
        self.assembler = changeset.Assembler()

    def partition_state(self, partition: int) -> StateStore:
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = MemoryStore()
        return state

    def open_partition_state(self, partition: int) -> StateStore | None:
        return self._partitions.get(partition)

    def generation(self, partition: int) -> int:
        return self._generations.get(partition, 0)

    def flush_local(self, partition: int, txn: Transaction, changelog_offset: int) -> None:
        txn.flush()
        self._offsets[partition] = changelog_offset

    def changelog_offset(self, partition: int) -> int | None:
        return self._offsets.get(partition)

    def apply_changelog_batch(self, batch: Iterable[Any], to_key: Convert, to_value: Convert) -> None:
        for event in batch:
            message = event.message
            self.apply_changelog(message.partition, [(message.offset, message.key, message.value)])

    def apply_changelog(self, partition: int, records: Sequence[ChangelogRecord]) -> None:
        applied = self._offsets.get(partition, -1)
        for offset, key, value in _joined(self.assembler, partition, applied, records):
            self.partition_state(partition).apply(dict(_expand(value, key)))
            applied = self._offsets[partition] = offset
            self._generations[partition] = self._generations.get(partition, 0) + 1


class StateTable(faust.Table[bytes, bytes]):
    """A Faust table whose store is one of the change-set stores above."""

    snapshots: SnapshotHook | None = None  # set by the app when snapshots are on

    def _new_store_by_url(self, url: str | URL) -> Any:
        scheme = URL(str(url)).scheme
        store_class: type[Any]
        if scheme == "rocksdb":
            store_class = ChangeSetRocksStore
        elif scheme == "memory":
            store_class = ChangeSetMemoryStore
        else:
            raise ValueError(f"engine state needs a rocksdb:// or memory:// store, not {url}")
        return store_class(
            url,
            self.app,
            self,
            table_name=self.name,
            key_type=self.key_type,
            key_serializer=self.key_serializer,
            value_serializer=self.value_serializer,
            value_type=self.value_type,
            loop=self.loop,
            options=self.options,
        )
