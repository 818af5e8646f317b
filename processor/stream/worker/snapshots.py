"""Partition snapshots: a worker that lost its disk restores in time bounded by state size, not history.

Without them, a partition with no local database is rebuilt by replaying its
whole changelog, which grows with every batch ever run. Here the owner of a
partition periodically ships a consistent copy of its partition database to
``<app id>-snapshots``, and a worker that is assigned a partition it has no
database for loads the latest complete copy *before* Faust's recovery, which
then replays only the changelog tail after the copy's offset.

Shipping (``Snapshots.tick``, on a timer, for every partition this worker owns
and has restored; and at a clean stop, ``at_shutdown``, for the partitions that
changed since their last snapshot -- one pass over their rows, ~2 s per million):

* due when the partition's changelog offset moved ``snapshot_batches`` change
  sets past the last snapshot, or moved at all and ``snapshot_interval``
  seconds passed; a snapshot older than ``MAX_AGE`` is shipped again even
  without changes, so retention never takes the only copy. A partition without
  any snapshot is measured the same way from an empty state and from when this
  worker first served it: its first snapshot waits until its changelog holds
  ``snapshot_batches`` change sets or ``snapshot_interval`` seconds pass (a
  young partition's changelog restores as fast as its snapshot would, and a
  new deployment's backlog ran ~4% slower while every partition shipped one
  in its first seconds);
* a RocksDB snapshot of the partition database is a point-in-time view: every
  write to it is one write batch holding change sets *and* the changelog offset
  they reach (``tablestore``), so the view is the changelog folded up to
  exactly the offset it records. Under exactly_once the database only ever
  receives committed change sets (batches are flushed locally after their
  transaction commits; recovery and standbys read read_committed), so the
  snapshot never reflects an aborted one;
* its rows, in key order, are one byte stream cut into chunk records of
  ``CHUNK_BYTES`` each (zlib; a row may straddle two chunks, so no row however
  large makes a record the broker refuses), keyed
  ``<table>/<partition>/<snapshot id>/<index>``, written to the
  topic partition of the state partition; once every chunk is acknowledged the
  **manifest** follows (key ``<table>/<partition>/manifest``: changelog offset,
  row count, chunk offsets and sha256). A snapshot without its manifest (a
  crash or a revocation mid-upload) is never used; after a new manifest the
  chunks of the snapshot it replaces are deleted (tombstones).

The topic is ``cleanup.policy=compact,delete``: compaction removes superseded
chunks and manifests, so it holds about one copy of each partition's state;
the retention (``topics/definitions.py``) removes what nothing tombstones --
chunks of uploads that never got a manifest.

Restoring (``Snapshots.before_recovery``, from the table store's rebalance
hook, before Faust's recovery reads the offset a database holds): for each
assigned partition of the table with no database on disk, find the latest
manifest (read backwards from the end of the partition), fetch exactly its
chunks, check every key and digest, write the rows into ``<db>.restoring`` and
rename it into place. Anything missing or different: the copy is dropped and
recovery replays the whole changelog, as without snapshots.
"""

import asyncio
import hashlib
import logging
import os
import shutil
import struct
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from ...core.formats import OLDEST_SNAPSHOT_FORMAT, SNAPSHOT_FORMAT
from ..batch.metrics import SnapshotCounts
from ..batch.types import ChangelogRecord
from .tablestore import OFFSET_KEY, ChangeSetRocksStore

log = logging.getLogger("recurrence.stream")

#: 2: chunks are slices of the row stream (a row may straddle chunks). 1: every chunk held whole rows;
#: still read (its chunks are slices that happen to end at row boundaries). A newer one is not used:
#: recovery then replays the whole changelog, as without snapshots.
FORMAT: Final = SNAPSHOT_FORMAT
_READABLE: Final = frozenset(range(OLDEST_SNAPSHOT_FORMAT, SNAPSHOT_FORMAT + 1))
#: Raw row bytes per chunk record before compression (zlib adds at most ~0.03% to incompressible bytes).
CHUNK_BYTES: Final = 512 * 1024
#: Largest snapshot record (the manifest is the only one that can grow past a chunk: ~80 bytes per
#: chunk); the topic's ``max.message.bytes`` is the same (topics/definitions.py).
MAX_RECORD_BYTES: Final = 8 * 1024 * 1024
#: Chunk records in flight while shipping, and fetched per request while restoring.
WINDOW: Final = 8
#: A snapshot this old is shipped again even if its partition did not change (< the topic's retention).
MAX_AGE: Final = 24 * 3600.0
_ROW: Final = struct.Struct(">II")


class SnapshotUnusableError(Exception):
    """A snapshot whose records are missing or do not match its manifest."""


# -- the record format ---------------------------------------------------------------------


def chunk_key(table: str, partition: int, snapshot: str, index: int) -> bytes:
    return f"{table}/{partition}/{snapshot}/{index}".encode()


def manifest_key(table: str, partition: int) -> bytes:
    return f"{table}/{partition}/manifest".encode()


def split_rows(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The whole rows at the start of ``raw``, and the bytes of a row it holds only the start of."""
    rows: list[tuple[bytes, bytes]] = []
    at, end = 0, len(raw)
    while at + _ROW.size <= end:
        key_length, value_length = _ROW.unpack_from(raw, at)
        stop = at + _ROW.size + key_length + value_length
        if stop > end:
            break
        key_at = at + _ROW.size
        rows.append((raw[key_at : key_at + key_length], raw[key_at + key_length : stop]))
        at = stop
    return rows, raw[at:]


@dataclass
class RowStream:
    """A partition's rows as one byte stream, cut into slices of at most ``size`` bytes."""

    size: int = CHUNK_BYTES
    rows: int = 0
    raw_bytes: int = 0
    offset: bytes | None = None  # the changelog offset row's value, once passed

    def slices(self, items: Iterable[tuple[bytes, bytes]]) -> Iterator[bytes]:
        buffer = bytearray()
        for key, value in items:
            self.rows += 1
            if key == OFFSET_KEY:
                self.offset = value
            buffer += _ROW.pack(len(key), len(value))
            buffer += key
            buffer += value
            while len(buffer) >= self.size:
                self.raw_bytes += self.size
                yield bytes(buffer[: self.size])
                del buffer[: self.size]
        if buffer:
            self.raw_bytes += len(buffer)
            yield bytes(buffer)


@dataclass(frozen=True)
class Chunk:
    offset: int  # where the chunk record is in the snapshots topic partition
    sha256: str  # of the record's value (compressed rows)


@dataclass(frozen=True)
class Manifest:
    table: str
    partition: int
    snapshot: str
    changelog_offset: int  # the last change set the rows reflect; recovery resumes after it
    rows: int
    raw_bytes: int
    chunks: tuple[Chunk, ...]
    created: float  # unix time

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "format": FORMAT,
                "table": self.table,
                "partition": self.partition,
                "snapshot": self.snapshot,
                "changelog_offset": self.changelog_offset,
                "rows": self.rows,
                "raw_bytes": self.raw_bytes,
                "chunks": [[c.offset, c.sha256] for c in self.chunks],
                "created": self.created,
            }
        )

    @classmethod
    def decode(cls, value: bytes) -> "Manifest | None":
        """The manifest, or None for a format this version does not read."""
        data = orjson.loads(value)
        if data.get("format") not in _READABLE:
            return None
        return cls(
            data["table"],
            data["partition"],
            data["snapshot"],
            data["changelog_offset"],
            data["rows"],
            data["raw_bytes"],
            tuple(Chunk(offset, digest) for offset, digest in data["chunks"]),
            data["created"],
        )


# -- the topic -------------------------------------------------------------------------------


class SnapshotLog(Protocol):
    """One topic, partitioned like the state: what ``Snapshots`` writes to and reads from."""

    async def send(self, key: bytes, value: bytes | None, partition: int) -> Awaitable[int]:
        """Enqueue a record; the awaitable resolves to its offset once the broker acknowledged it."""
        ...

    async def log_start(self, partition: int) -> int: ...

    async def log_end(self, partition: int) -> int: ...

    async def fetch_records(self, partition: int, start: int, stop: int) -> list[ChangelogRecord]: ...

    async def close(self) -> None: ...


async def latest_manifest(topic: SnapshotLog, table: str, partition: int) -> Manifest | None:
    """The last manifest written for the table's partition: read backwards in growing windows.

    The manifest is normally among the last records (after it come only
    tombstones and other snapshots, themselves ending in manifests), so this
    reads a few records, not the partition.
    """
    wanted = manifest_key(table, partition)
    start, end = await topic.log_start(partition), await topic.log_end(partition)
    window = WINDOW
    stop = end
    while stop > start:
        first = max(start, stop - window)
        for offset, key, value in reversed(await topic.fetch_records(partition, first, stop)):
            if key == wanted and value is not None and offset < stop:
                return Manifest.decode(value)
        stop, window = first, window * 2
    return None


async def fetch_chunks(topic: SnapshotLog, manifest: Manifest) -> AsyncIterator[bytes]:
    """The manifest's chunks, each checked against its key and digest, decompressed, in order."""
    chunks = manifest.chunks
    for group in range(0, len(chunks), WINDOW):
        wanted = chunks[group : group + WINDOW]
        records = await topic.fetch_records(manifest.partition, wanted[0].offset, wanted[-1].offset + 1)
        by_offset = {offset: (key, value) for offset, key, value in records}
        for index, chunk in enumerate(wanted, start=group):
            key, value = by_offset.get(chunk.offset, (None, None))
            if key != chunk_key(manifest.table, manifest.partition, manifest.snapshot, index) or value is None:
                raise SnapshotUnusableError(f"chunk {index} is missing at offset {chunk.offset}")
            if hashlib.sha256(value).hexdigest() != chunk.sha256:
                raise SnapshotUnusableError(f"chunk {index} at offset {chunk.offset} does not match its digest")
            yield zlib.decompress(value)


# -- shipping and restoring ------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotTarget:
    """A table whose partitions are snapshotted: its store and the partitions this worker serves."""

    store: Callable[[], Any]  # -> ChangeSetRocksStore (the table's ``data``)
    ready: Callable[[], set[int]]


@dataclass
class Snapshots:
    topic: SnapshotLog
    interval: float  # seconds; 0: never by time
    batches: int  # change sets; 0: never by count
    counts: SnapshotCounts = field(default_factory=SnapshotCounts)
    # (table, partition) -> the latest manifest known to exist (shipped, loaded or looked up)
    _known: dict[tuple[str, int], Manifest | None] = field(default_factory=dict)
    # (table, partition) -> when this worker first served it without finding a snapshot of it
    _unshipped_since: dict[tuple[str, int], float] = field(default_factory=dict)
    # (table, partition) -> bumped on every revocation: an upload in progress stops
    _epochs: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def shipping(self) -> bool:
        return self.interval > 0 or self.batches > 0

    # -- the table store's rebalance hook ----------------------------------------------------
    async def before_recovery(self, store: ChangeSetRocksStore, assigned: set[Any], revoked: set[Any]) -> None:
        """Load a snapshot for every assigned partition of the store's table that has no database."""
        table = str(store.table.name)
        topics = store.table.changelog_topic.topics
        for tp in revoked:
            if tp.topic in topics:
                key = (table, tp.partition)
                self._epochs[key] = self._epochs.get(key, 0) + 1
                self._known.pop(key, None)
                self._unshipped_since.pop(key, None)
        standbys = store.app.assignor.assigned_standbys()
        # Actives first: readiness waits for them, standbys only warm a copy.
        mine = sorted((tp in standbys, tp.partition) for tp in assigned if tp.topic in topics)
        for _, partition in mine:
            path = store.partition_path(partition)
            if store.is_open(partition) or path.exists():
                continue
            await self.restore(store, table, partition, path)

    async def restore(self, store: ChangeSetRocksStore, table: str, partition: int, path: Path) -> int:
        """Load the latest complete snapshot into ``path``; the rows loaded (0: none, replay it all)."""
        started = time.perf_counter()
        manifest = await latest_manifest(self.topic, table, partition)
        if manifest is None:
            log.info(
                "%s partition %d: no local state and no snapshot; recovery replays the whole changelog",
                table,
                partition,
            )
            return 0
        scratch = path.with_name(path.name + ".restoring")
        shutil.rmtree(scratch, ignore_errors=True)  # a restore killed half-way
        try:
            rows = await self._load(store, manifest, scratch)
        except SnapshotUnusableError as error:
            shutil.rmtree(scratch, ignore_errors=True)
            log.warning(
                "%s partition %d: snapshot %s is unusable (%s); recovery replays the whole changelog",
                table,
                partition,
                manifest.snapshot,
                error,
            )
            return 0
        os.rename(scratch, path)
        self._known[(table, partition)] = manifest
        self.counts.restored += 1
        self.counts.restored_rows += rows
        log.info(
            "%s partition %d: loaded snapshot %s (%d rows, %d chunks) at changelog offset %d in %.2fs; "
            "recovery replays only the changelog after it",
            table,
            partition,
            manifest.snapshot,
            rows,
            len(manifest.chunks),
            manifest.changelog_offset,
            time.perf_counter() - started,
        )
        return rows

    async def _load(self, store: ChangeSetRocksStore, manifest: Manifest, scratch: Path) -> int:
        rows = 0
        offset: bytes | None = None
        rest = b""  # the start of a row the next chunk ends
        db = store.open_scratch(scratch)
        try:
            async for raw in fetch_chunks(self.topic, manifest):
                decoded, rest = split_rows(rest + raw if rest else raw)
                store.write_rows(db, decoded)
                rows += len(decoded)
                offset = next((v for k, v in decoded if k == OFFSET_KEY), offset)
                await asyncio.sleep(0)
            db.flush()
        finally:
            db.close()
        if rest:
            raise SnapshotUnusableError(f"the last chunk ends inside a row ({len(rest)} bytes)")
        if rows != manifest.rows or offset != str(manifest.changelog_offset).encode():
            raise SnapshotUnusableError(f"{rows} rows at offset {offset!r}, the manifest says {manifest.rows}")
        return rows

    async def at_shutdown(self, store: ChangeSetRocksStore) -> None:
        """A clean stop: ship the actives that changed since their last snapshot (one pass over each)."""
        if not self.shipping:
            return
        table = str(store.table.name)
        topics = store.table.changelog_topic.topics
        actives = sorted(tp.partition for tp in store.app.assignor.assigned_actives() if tp.topic in topics)
        for partition in actives:
            offset = store.open_changelog_offset(partition)
            known = self._known.get((table, partition))
            if offset is None or (known is not None and offset <= known.changelog_offset):
                continue
            try:
                await self.ship(store, table, partition)
            except Exception as error:  # never hold up a shutdown: the last complete snapshot stays usable
                log.warning("%s partition %d: no snapshot at shutdown: %s", table, partition, type(error).__name__)

    # -- shipping (the app's timer) ------------------------------------------------------------
    async def tick(self, targets: Sequence[SnapshotTarget]) -> None:
        """Ship a snapshot of every served partition that is due."""
        for target in targets:
            store: ChangeSetRocksStore = target.store()
            table = str(store.table.name)
            for partition in sorted(target.ready()):
                offset = store.open_changelog_offset(partition)
                if offset is None:
                    continue
                key = (table, partition)
                if key not in self._known:
                    self._known[key] = await latest_manifest(self.topic, table, partition)
                    self._unshipped_since[key] = time.time()
                if self._due(self._known[key], offset, self._unshipped_since[key]):
                    await self.ship(store, table, partition)

    def _due(self, known: Manifest | None, offset: int, unshipped_since: float) -> bool:
        """``known``: the partition's latest snapshot; without one, an empty state as of ``unshipped_since``."""
        if known is None:
            last_offset, created = -1, unshipped_since
        else:
            last_offset, created = known.changelog_offset, known.created
        age = time.time() - created
        if offset <= last_offset:
            return known is not None and age >= MAX_AGE
        by_count = self.batches > 0 and offset - last_offset >= self.batches
        by_time = self.interval > 0 and age >= self.interval
        return by_count or by_time

    async def ship(self, store: ChangeSetRocksStore, table: str, partition: int) -> Manifest | None:
        """Upload one snapshot of the partition; None if it was revoked meanwhile (no manifest written)."""
        started = time.perf_counter()
        key = (table, partition)
        epoch = self._epochs.get(key, 0)
        view = store.snapshot_view(partition)
        if view is None:
            return None
        snapshot = uuid.uuid4().hex[:12]

        def owned() -> bool:
            return self._epochs.get(key, 0) == epoch and store.is_open(partition)

        chunks: list[Chunk] = []
        pending: list[Awaitable[int]] = []
        digests: list[str] = []
        sent_bytes = 0
        stream = RowStream()
        slices = stream.slices(view.items())
        while True:
            # Reading, slicing, compressing and hashing a chunk is ~15 ms of CPU: done on the event
            # loop it held up every batch in flight that long, once per chunk, for the whole upload
            # (thousands of chunks for a large partition). In a thread the loop runs meanwhile
            # (zlib and hashlib release the GIL; the rest yields it every switch interval). Only
            # one thread advances the stream at a time: each chunk is awaited before the next.
            built = await asyncio.to_thread(_chunk, slices)
            if built is None:
                break
            if not owned():
                log.info("%s partition %d: revoked during snapshot %s; not completed", table, partition, snapshot)
                return None
            value, sha256 = built
            sent_bytes += len(value)
            digests.append(sha256)
            pending.append(await self.topic.send(chunk_key(table, partition, snapshot, len(pending)), value, partition))
            if len(pending) - len(chunks) >= WINDOW:
                chunks.append(Chunk(await pending[len(chunks)], digests[len(chunks)]))
        del slices, view  # the point-in-time view pins the database's files
        for index in range(len(chunks), len(pending)):
            chunks.append(Chunk(await pending[index], digests[index]))
        if stream.offset is None or not owned():
            return None
        manifest = Manifest(
            table, partition, snapshot, int(stream.offset), stream.rows, stream.raw_bytes, tuple(chunks), time.time()
        )
        encoded = manifest.encode()
        if len(encoded) > MAX_RECORD_BYTES:  # ~100k chunks (~50 GB of rows): the topic would refuse it
            log.warning(
                "%s partition %d: snapshot %s has %d chunks, a manifest of %d bytes (at most %d); "
                "not completed: recovery replays the changelog",
                table,
                partition,
                snapshot,
                len(chunks),
                len(encoded),
                MAX_RECORD_BYTES,
            )
            return None
        await (await self.topic.send(manifest_key(table, partition), encoded, partition))
        previous = self._known.get(key)
        self._known[key] = manifest
        if previous is not None and previous.snapshot != snapshot:
            # The snapshot this one replaces goes away at the next compaction.
            gone = [
                await self.topic.send(chunk_key(table, partition, previous.snapshot, index), None, partition)
                for index in range(len(previous.chunks))
            ]
            await asyncio.gather(*gone)
        self.counts.shipped += 1
        self.counts.shipped_bytes += sent_bytes
        log.info(
            "%s partition %d: shipped snapshot %s at changelog offset %d: %d rows, %d chunks, %d bytes in %.2fs",
            table,
            partition,
            snapshot,
            manifest.changelog_offset,
            manifest.rows,
            len(chunks),
            sent_bytes,
            time.perf_counter() - started,
        )
        return manifest


def _chunk(slices: Iterator[bytes]) -> tuple[bytes, str] | None:
    """The next slice of a snapshot's row stream, compressed, and its sha256; None after the last."""
    raw = next(slices, None)
    if raw is None:
        return None
    value = zlib.compress(raw, 1)
    return value, hashlib.sha256(value).hexdigest()
