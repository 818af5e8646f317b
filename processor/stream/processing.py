"""One batch of journal entries through the engine, made durable in the only safe order.

For a batch of entries (any partitions, offset order per partition):

0. per partition, continue exactly at the journal position recorded in the
   state (``POSITION_KEY``): entries below it are skipped (already applied),
   entries the stream did not hand over are read from the journal directly;
1. run ``Engine.process`` on each raw entry over a per-partition overlay of the
   table state (nothing reaches the table yet) and hand every output record to
   the producer, in order, keyed by ``scope_id``;
2. wait until every output record is acknowledged by the broker (acks=all);
3. write each entry's change set as one changelog record -- the partition's
   last one also carries the new journal position -- and wait for those
   acknowledgements (under exactly_once, then commit the partition's Kafka
   transaction: outputs, change sets and journal offsets become visible together);
4. only then write the change sets to the local partition database, together
   with the changelog offset recovery resumes from;
5. return, and the agent acknowledges the entries (Faust commits the journal
   offsets later).

A crash at any point leaves the changelog (and the local database) at or
behind the outputs, so the entries run again: entries whose change set never
reached the changelog run on the old state and re-emit byte-identical records
(same ids); entries whose change set did reach it are skipped by the recorded
position or recognised by the engine as applied, and emit nothing. No record
is lost; duplicates are identical and deduplicated by id.
"""

import asyncio
import bisect
import logging
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import orjson

from recurrence.processor.embedded import serialize
from recurrence.processor.engine import Engine, EngineConfig
from recurrence.processor.store import StateStore, Transaction
from recurrence.processor.stream import changeset
from recurrence.processor.stream.metrics import Metrics
from recurrence.processor.stream.settings import TopicNames
from recurrence.processor.stream.tablestore import PartitionedState
from recurrence.schemas.records import DeadLetterRecord, OutputRecord

log = logging.getLogger("recurrence.stream")

#: Header on every output record: "<journal partition>:<journal offset>:<index in the entry's output>".
SOURCE_HEADER: Final = "recurrence-source"
#: Per-partition key (outside every engine namespace): the next journal offset the state expects.
POSITION_KEY: Final = b'["stream","next_offset"]'


@dataclass(frozen=True)
class Entry:
    partition: int
    offset: int
    value: bytes


class Delivered(Protocol):
    @property
    def offset(self) -> int: ...


class Sink(Protocol):
    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        headers: list[tuple[str, bytes]],
        source_partition: int,
    ) -> Awaitable[Delivered]:
        """Hand a record to the producer; the returned awaitable resolves once it is durable.

        ``source_partition`` is the journal partition whose entry produced the record (the
        exactly-once sink sends through that partition's transactional producer).
        """
        ...

    async def begin(self, partitions: Sequence[int]) -> None:
        """A batch for these journal partitions starts (exactly_once: take their producers)."""
        ...

    def end(self) -> None:
        """The batch is over, successfully or not."""
        ...

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        """After outputs and change sets are durable: make them visible with the journal offsets
        (one Kafka transaction per journal partition under exactly_once; nothing to do otherwise)."""
        ...


class Overlay:
    """A sorted, uncommitted layer over one partition's state, shared by the entries of a batch."""

    def __init__(self, base: StateStore) -> None:
        self.base = base
        self.changes: dict[bytes, bytes | None] = {}
        self._keys: list[bytes] = []
        self.position: int | None = None  # next journal offset once this batch is durable

    def get(self, key: bytes) -> bytes | None:
        if key in self.changes:
            return self.changes[key]
        return self.base.get(key)

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        start = bisect.bisect_left(self._keys, prefix)
        stop = start
        while stop < len(self._keys) and self._keys[stop].startswith(prefix):
            stop += 1
        if start == stop:
            yield from self.base.iterate_prefix(prefix)
            return
        merged = dict(self.base.iterate_prefix(prefix))
        for key in self._keys[start:stop]:
            merged[key] = self.changes[key]  # type: ignore[assignment]  # None marks a delete, dropped below
        for key in sorted(merged):
            value = merged[key]
            if value is not None:
                yield key, value

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if key not in self.changes:
                bisect.insort(self._keys, key)
            self.changes[key] = value

    def close(self) -> None:
        return None


def route(topics: TopicNames, record: OutputRecord) -> str:
    if record.record in ("match", "observation"):
        return topics.ledger
    if record.record in ("review_proposal", "admission"):
        return topics.review
    return topics.dead_letters


def _scope_of(changes: Mapping[bytes, bytes | None]) -> bytes:
    # Every state key is ["<ns>","<scope_id>",...]; the changelog key names the scope for operators.
    for key in changes:
        parts = orjson.loads(key)
        if len(parts) > 1 and isinstance(parts[1], str):
            return str(parts[1]).encode()
    return b""


class JournalSource(Protocol):
    """Direct reads of the journal (``journal.JournalReader``), for entries the stream skipped."""

    async def log_start(self, partition: int) -> int: ...

    async def fetch(self, partition: int, start: int, stop: int) -> list[tuple[int, bytes]]: ...


def read_position(state: StateStore) -> int | None:
    raw = state.get(POSITION_KEY)
    return None if raw is None else int(raw)


@dataclass
class BatchResult:
    entries: int = 0
    records: int = 0
    change_sets: int = 0
    skipped: int = 0  # delivered again, already applied: not run
    filled: int = 0  # not delivered by the stream, read directly and run


class BatchProcessor:
    def __init__(
        self,
        *,
        topics: TopicNames,
        state: PartitionedState,
        sink: Sink,
        source: JournalSource,
        config: EngineConfig,
        metrics: Metrics | None = None,
    ) -> None:
        self.topics = topics
        self.state = state
        self.sink = sink
        self.source = source
        self.config = config
        self.metrics = metrics or Metrics()
        self._lock = asyncio.Lock()

    def position(self, partition: int) -> int | None:
        """The next journal offset this partition's state expects (None before the first entry)."""
        state = self.state.open_partition_state(partition)
        return None if state is None else read_position(state)

    async def process(self, entries: Sequence[Entry]) -> BatchResult:
        """Run a batch delivered by the stream (any partitions, offset order per partition)."""
        async with self._lock:
            return await self._process(entries)

    async def catch_up(self, partition: int, stop: int) -> BatchResult:
        """Read and run the journal directly up to ``stop`` (the entries the stream has not delivered)."""
        async with self._lock:
            start = read_position(self.state.partition_state(partition))
            if start is None:
                start = await self.source.log_start(partition)
            records = await self.source.fetch(partition, start, stop)
            if records:
                log.warning(
                    "partition %d: %d entries up to offset %d were not delivered by the stream; read directly",
                    partition, len(records), stop - 1,
                )
            result = await self._process([Entry(partition, offset, value) for offset, value in records])
            result.filled += len(records)
            self.metrics.filled += len(records)
            return result

    async def _plan(self, entries: Sequence[Entry], overlays: dict[int, Overlay]) -> tuple[list[Entry], BatchResult]:
        """Entries to run, in order: each partition continues exactly at its recorded position."""
        by_partition: dict[int, list[Entry]] = {}
        for entry in entries:
            by_partition.setdefault(entry.partition, []).append(entry)
        plan: list[Entry] = []
        result = BatchResult()
        for partition, delivered in by_partition.items():
            overlay = overlays[partition] = Overlay(self.state.partition_state(partition))
            expected = read_position(overlay)
            if expected is None:
                expected = await self.source.log_start(partition)
            for entry in sorted(delivered, key=lambda e: e.offset):
                if entry.offset < expected:
                    result.skipped += 1
                    continue
                if entry.offset > expected:
                    missing = await self.source.fetch(partition, expected, entry.offset)
                    log.warning(
                        "partition %d: the stream skipped offsets %d..%d (%d entries); read directly",
                        partition, expected, entry.offset - 1, len(missing),
                    )
                    result.filled += len(missing)
                    plan.extend(Entry(partition, offset, value) for offset, value in missing)
                plan.append(entry)
                expected = entry.offset + 1
            overlay.position = expected
        return plan, result

    async def _process(self, entries: Sequence[Entry]) -> BatchResult:
        started = time.perf_counter()
        overlays: dict[int, Overlay] = {}
        plan, result = await self._plan(entries, overlays)
        await self.sink.begin(sorted(overlays))
        try:
            return await self._run(plan, result, overlays, started)
        finally:
            self.sink.end()

    async def _run(
        self, plan: list[Entry], result: BatchResult, overlays: dict[int, Overlay], started: float
    ) -> BatchResult:
        result.entries = len(plan)
        change_sets: list[tuple[int, dict[bytes, bytes | None]]] = []
        deliveries: list[Awaitable[Delivered]] = []
        kinds: list[OutputRecord] = []

        for entry in plan:
            overlay = overlays[entry.partition]
            txn = Transaction(overlay)
            records = Engine(txn, self.config).process(entry.value)
            for index, record in enumerate(records):
                scope_id = record.scope_id
                key = scope_id.encode() if scope_id else None
                # Unkeyed dead letters stay beside their source partition (same partition counts).
                partition = None if key is not None else entry.partition
                headers = [(SOURCE_HEADER, f"{entry.partition}:{entry.offset}:{index}".encode())]
                value = serialize(record)[:-1]  # the oracle's ledger line without its newline
                topic = route(self.topics, record)
                deliveries.append(await self.sink.send(topic, key, value, partition, headers, entry.partition))
                kinds.append(record)
            if txn.pending:
                change_sets.append((entry.partition, dict(txn.pending)))
                txn.commit()  # into the batch overlay only

        # The journal position travels with the state: in the partition's last change set.
        next_offsets: dict[int, int] = {}
        for partition, overlay in overlays.items():
            if overlay.position is None or overlay.position == read_position(overlay.base):
                continue
            encoded = str(overlay.position).encode()
            next_offsets[partition] = overlay.position
            overlay.apply({POSITION_KEY: encoded})
            last = next((changes for p, changes in reversed(change_sets) if p == partition), None)
            if last is None:
                change_sets.append((partition, {POSITION_KEY: encoded}))
            else:
                last[POSITION_KEY] = encoded

        # (2) every output record is durable before any state that records it.
        await asyncio.gather(*deliveries)
        # (3) the change sets are durable in the changelog before the local database sees them.
        pending_changelog = [
            await self.sink.send(
                self.topics.changelog, _scope_of(changes), changeset.encode(changes), partition, [], partition
            )
            for partition, changes in change_sets
        ]
        delivered = await asyncio.gather(*pending_changelog)
        last_offset: dict[int, int] = {}
        for (partition, _), meta in zip(change_sets, delivered, strict=True):
            last_offset[partition] = max(meta.offset, last_offset.get(partition, -1))
        if next_offsets:
            await self.sink.commit(next_offsets)
        # (4) local state, atomically with the changelog offset recovery resumes from.
        for partition, overlay in overlays.items():
            if overlay.changes:
                self.state.apply_local(partition, overlay.changes, last_offset.get(partition))

        result.records = len(kinds)
        result.change_sets = len(change_sets)
        self._count(plan, kinds, overlays, result, time.perf_counter() - started)
        return result

    def _count(
        self,
        entries: Sequence[Entry],
        records: Sequence[OutputRecord],
        overlays: Mapping[int, Overlay],
        result: BatchResult,
        seconds: float,
    ) -> None:
        m = self.metrics
        m.entries += len(entries)
        m.batches += 1
        m.batch_seconds += seconds
        m.redelivered_skipped += result.skipped
        m.filled += result.filled
        for record in records:
            m.records[record.record] += 1
            if isinstance(record, DeadLetterRecord):
                m.dead_letters[record.error] += 1
                log.debug("dead letter %s at scope position %s", record.error, record.position)
        m.changelog_records += result.change_sets
        m.state_changes += sum(len(o.changes) for o in overlays.values())
        for partition, overlay in overlays.items():
            if overlay.position is not None:
                m.positions[partition] = overlay.position
        if entries:
            log.debug(
                "batch of %d entries (%s) durable in %.3fs: %d records",
                len(entries),
                ", ".join(f"p{p}" for p in sorted(overlays)),
                seconds,
                len(records),
            )
