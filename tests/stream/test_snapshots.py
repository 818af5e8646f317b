"""Partition snapshots without a broker: ship from one table store, load into another.

The snapshots topic is an in-memory log with Kafka's offsets (and, where a
test says so, its compaction); the stores are the worker's own RocksDB table
stores in a Faust app that is built but never started.
"""

import asyncio
import random
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.types import TP

from recurrence_ledger.processor.stream.batch import changeset
from recurrence_ledger.processor.stream.batch.types import ChangelogRecord
from recurrence_ledger.processor.stream.worker.snapshots import (
    CHUNK_BYTES,
    MAX_AGE,
    MAX_RECORD_BYTES,
    Manifest,
    Snapshots,
    chunk_key,
    latest_manifest,
    manifest_key,
)
from recurrence_ledger.processor.stream.worker.tablestore import ChangeSetRocksStore, KeptRocksDBOptions, StateTable
from tests.support.rocksdb_options import latest_options


class MemoryLog:
    """``SnapshotLog`` in memory: per partition a list of (offset, key, value), offsets never reused."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[ChangelogRecord]] = {}
        self.ends: dict[int, int] = {}
        self.refuse: bytes | None = None  # a key whose send fails (the worker dies there)
        self.on_send: Any = None

    async def send(self, key: bytes, value: bytes | None, partition: int) -> Awaitable[int]:
        if key == self.refuse:
            raise ConnectionError("the worker died here")
        offset = self.ends.get(partition, 0)
        self.ends[partition] = offset + 1
        self.partitions.setdefault(partition, []).append((offset, key, value))
        if self.on_send is not None:
            await self.on_send(key)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(offset)
        return done

    async def log_start(self, partition: int) -> int:
        records = self.partitions.get(partition, [])
        return records[0][0] if records else self.ends.get(partition, 0)

    async def log_end(self, partition: int) -> int:
        return self.ends.get(partition, 0)

    async def fetch_records(self, partition: int, start: int, stop: int) -> list[ChangelogRecord]:
        return [r for r in self.partitions.get(partition, []) if start <= r[0] < stop]

    async def close(self) -> None:
        return None

    def compact(self) -> None:
        """Kafka's cleaner: the last record per key survives (tombstones too are dropped), offsets kept."""
        for partition, records in self.partitions.items():
            last = {key: offset for offset, key, _ in records}
            self.partitions[partition] = [r for r in records if last[r[1]] == r[0] and r[2] is not None]


def _store(tmp_path: Path, name: str) -> ChangeSetRocksStore:
    app = faust.App(f"snap-{name}", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(tmp_path / name))
    table = StateTable(app, name="state", key_type=bytes, value_type=bytes, partitions=2)
    store = table.data
    assert isinstance(store, ChangeSetRocksStore)
    return store


def _fill(store: ChangeSetRocksStore, partition: int, first_offset: int, batches: int, seed: int) -> None:
    """Change sets as the worker writes them: rows of a few hundred bytes, some deleted again."""
    rng = random.Random(seed)
    for offset in range(first_offset, first_offset + batches):
        changes: dict[bytes, bytes | None] = {
            f'["s","scope{rng.randrange(40)}",{rng.randrange(2000)}]'.encode(): rng.randbytes(300) for _ in range(100)
        }
        changes[f'["s","scope{rng.randrange(40)}",{rng.randrange(2000)}]'.encode()] = None
        store.apply_changelog(partition, [(offset, b"scope", changeset.encode(changes))])


def _rows(store: ChangeSetRocksStore, partition: int) -> list[tuple[bytes, bytes]]:
    return list(store.partition_state(partition).iterate_prefix(b""))


def _snapshots(log: MemoryLog, interval: float = 300.0, batches: int = 1000) -> Snapshots:
    return Snapshots(log, interval, batches)


def test_a_shipped_snapshot_loads_into_an_empty_worker_with_its_rows_and_changelog_offset(tmp_path: Path) -> None:
    owner, newcomer, log = _store(tmp_path, "owner"), _store(tmp_path, "newcomer"), MemoryLog()
    _fill(owner, 1, 0, 40, seed=1)
    snapshots = _snapshots(log)
    manifest = asyncio.run(snapshots.ship(owner, "state", 1))
    assert manifest is not None and len(manifest.chunks) > 1  # several chunks of ~CHUNK_BYTES
    assert manifest.raw_bytes > CHUNK_BYTES and manifest.changelog_offset == 39
    assert all(p == 1 for p in log.partitions)  # on the topic partition of the state partition

    path = newcomer.partition_path(1)
    rows = asyncio.run(_snapshots(log).restore(newcomer, "state", 1, path))
    assert rows == manifest.rows == len(_rows(owner, 1))
    assert _rows(newcomer, 1) == _rows(owner, 1)  # the changelog offset row included
    assert newcomer.changelog_offset(1) == 39
    assert not path.with_name(path.name + ".restoring").exists()


def test_a_snapshot_without_its_manifest_is_never_used(tmp_path: Path) -> None:
    owner, log = _store(tmp_path, "owner"), MemoryLog()
    snapshots = _snapshots(log)
    _fill(owner, 0, 0, 10, seed=2)
    first = asyncio.run(snapshots.ship(owner, "state", 0))
    assert first is not None
    _fill(owner, 0, 10, 10, seed=3)
    log.refuse = manifest_key("state", 0)  # every chunk written, then the worker dies
    with pytest.raises(ConnectionError):
        asyncio.run(snapshots.ship(owner, "state", 0))

    found = asyncio.run(latest_manifest(log, "state", 0))
    assert found == first
    newcomer = _store(tmp_path, "newcomer")
    asyncio.run(_snapshots(log).restore(newcomer, "state", 0, newcomer.partition_path(0)))
    assert newcomer.changelog_offset(0) == 9  # the complete snapshot; recovery replays 10..19

    empty = _store(tmp_path, "empty")
    assert asyncio.run(_snapshots(MemoryLog()).restore(empty, "state", 0, empty.partition_path(0))) == 0
    assert not empty.partition_path(0).exists()  # nothing to load: recovery replays the whole changelog


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_damaged_snapshot_is_dropped_and_recovery_replays_everything(tmp_path: Path, damage: str) -> None:
    owner, newcomer, log = _store(tmp_path, "owner"), _store(tmp_path, "newcomer"), MemoryLog()
    _fill(owner, 0, 0, 30, seed=4)
    manifest = asyncio.run(_snapshots(log).ship(owner, "state", 0))
    assert manifest is not None
    records = log.partitions[0]
    victim = next(i for i, r in enumerate(records) if r[0] == manifest.chunks[1].offset)
    if damage == "changed":
        offset, key, value = records[victim]
        assert value is not None
        records[victim] = (offset, key, value[:-1] + bytes([value[-1] ^ 1]))
    else:
        del records[victim]
    path = newcomer.partition_path(0)
    assert asyncio.run(_snapshots(log).restore(newcomer, "state", 0, path)) == 0
    assert not path.exists() and not path.with_name(path.name + ".restoring").exists()


def test_a_new_snapshot_deletes_the_one_it_replaces_and_survives_compaction(tmp_path: Path) -> None:
    owner, log = _store(tmp_path, "owner"), MemoryLog()
    snapshots = _snapshots(log)
    _fill(owner, 0, 0, 20, seed=5)
    first = asyncio.run(snapshots.ship(owner, "state", 0))
    _fill(owner, 0, 20, 5, seed=6)
    second = asyncio.run(snapshots.ship(owner, "state", 0))
    assert first is not None and second is not None and first.snapshot != second.snapshot
    log.compact()
    keys = {key for _, key, _ in log.partitions[0]}
    assert keys == {manifest_key("state", 0)} | {
        chunk_key("state", 0, second.snapshot, i) for i in range(len(second.chunks))
    }
    newcomer = _store(tmp_path, "newcomer")
    assert asyncio.run(_snapshots(log).restore(newcomer, "state", 0, newcomer.partition_path(0))) == second.rows
    assert _rows(newcomer, 0) == _rows(owner, 0)


def test_a_partition_revoked_during_an_upload_gets_no_manifest(tmp_path: Path) -> None:
    owner, log = _store(tmp_path, "owner"), MemoryLog()
    snapshots = _snapshots(log)
    _fill(owner, 0, 0, 30, seed=7)
    changelog = TP(owner.table.changelog_topic.get_topic_name(), 0)

    async def revoke_after_the_first_chunk(key: bytes) -> None:
        if key == chunk_key("state", 0, key.decode().split("/")[2], 0):
            await snapshots.before_recovery(owner, set(), {changelog})

    log.on_send = revoke_after_the_first_chunk
    assert asyncio.run(snapshots.ship(owner, "state", 0)) is None
    assert asyncio.run(latest_manifest(log, "state", 0)) is None


@pytest.mark.parametrize(
    ("interval", "batches", "age", "offset", "due"),
    [
        (300, 1000, None, 5, False),  # no snapshot yet, a young partition served for 10 s
        (300, 1000, None, 999, True),  # no snapshot yet: 1000 change sets (offsets 0-999) since an empty state
        (0, 1000, None, 998, False),
        (10, 0, None, 5, True),  # no snapshot yet, served for 10 s: by time
        (300, 1000, 10, 100, False),  # unchanged
        (300, 1000, MAX_AGE + 1, 100, True),  # unchanged, but about to age out
        (300, 1000, 10, 1099, False),
        (300, 1000, 10, 1100, True),  # by count
        (300, 1000, 301, 101, True),  # by time, changed
        (0, 1000, 10_000, 101, False),  # time off
        (300, 0, 10, 10_000, False),  # count off
    ],
)
def test_when_a_snapshot_is_due(interval: float, batches: int, age: float | None, offset: int, due: bool) -> None:
    # The last snapshot is at changelog offset 100, ``age`` seconds old (None: there is none, and the
    # partition was first served 10 s ago).
    known = None if age is None else Manifest("state", 0, "s", 100, 1, 1, (), time.time() - age)
    assert _snapshots(MemoryLog(), interval, batches)._due(known, offset, time.time() - 10) is due


def test_the_store_loads_a_snapshot_before_recovery_only_where_there_is_no_database(tmp_path: Path) -> None:
    owner, log = _store(tmp_path, "owner"), MemoryLog()
    _fill(owner, 0, 0, 12, seed=8)
    _fill(owner, 1, 0, 3, seed=9)
    for partition in (0, 1):
        asyncio.run(_snapshots(log).ship(owner, "state", partition))
    newcomer = _store(tmp_path, "newcomer")
    _fill(newcomer, 1, 0, 1, seed=10)  # partition 1 has a local database already: it is kept
    newcomer.revoke_partitions(newcomer.table, {TP(newcomer.table.changelog_topic.get_topic_name(), 1)})
    table = newcomer.table
    assert isinstance(table, StateTable)
    table.snapshots = snapshots = _snapshots(log)
    topic = newcomer.table.changelog_topic.get_topic_name()
    assigned = {TP(topic, 0), TP(topic, 1)}
    asyncio.run(newcomer.on_rebalance(assigned, set(), assigned))
    assert snapshots.counts.restored == 1
    assert newcomer.changelog_offset(0) == 11 and _rows(newcomer, 0) == _rows(owner, 0)
    assert newcomer.persisted_offset(TP(topic, 1)) == 0  # its own, not the snapshot's


def test_a_reopened_partition_database_keeps_its_bloom_filter(tmp_path: Path) -> None:
    # Faust's RocksDBOptions.open reopened with the table options reset (filter_policy=nullptr).
    store = _store(tmp_path, "w")
    assert isinstance(store.rocksdb_options, KeptRocksDBOptions)
    path = tmp_path / "p.db"
    first = store.rocksdb_options.open(path)
    first.put(b"k", b"v")
    first.close()
    again = store.rocksdb_options.open(path)
    try:
        assert again.get(b"k") == b"v"
        assert "filter_policy=bloomfilter" in latest_options(path)
    finally:
        again.close()


def test_a_row_larger_than_a_chunk_straddles_chunks_and_loads_back(tmp_path: Path) -> None:
    # Chunks are slices of the row stream: no row, however large, makes a record the topic refuses.
    owner, newcomer, log = _store(tmp_path, "owner"), _store(tmp_path, "newcomer"), MemoryLog()
    big = random.Random(11).randbytes(2 * CHUNK_BYTES + 12_345)  # incompressible
    owner.apply_changelog(0, [(0, b"s", changeset.encode({b"a": b"small", b"big": big, b"z": b"last"}))])
    manifest = asyncio.run(_snapshots(log).ship(owner, "state", 0))
    assert manifest is not None and len(manifest.chunks) >= 3
    sizes = [len(value or b"") for _, _, value in log.partitions[0]]
    assert max(sizes) <= CHUNK_BYTES + CHUNK_BYTES // 100 < MAX_RECORD_BYTES
    assert asyncio.run(_snapshots(log).restore(newcomer, "state", 0, newcomer.partition_path(0))) == manifest.rows
    assert _rows(newcomer, 0) == _rows(owner, 0)


@pytest.mark.parametrize(("version", "readable"), [(1, True), (2, True), (3, False)])
def test_manifests_of_the_previous_format_are_still_read(version: int, readable: bool) -> None:
    # Format 1 chunks held whole rows: slices that end at row boundaries, which format 2 reads.
    raw = Manifest("state", 0, "s", 7, 1, 1, (), 0.0).encode().replace(b'"format":2', f'"format":{version}'.encode())
    assert (Manifest.decode(raw) is not None) is readable
