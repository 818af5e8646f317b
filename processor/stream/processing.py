"""One batch of journal entries through the engine, made durable in the only safe order.

For a batch of entries (in offset order per partition):

1. run ``Engine.process`` on each raw entry over a per-partition overlay of the
   table state (nothing reaches the table yet) and hand every output record to
   the producer, in order, keyed by ``scope_id``;
2. wait until every output record is acknowledged by the broker (acks=all);
3. write each entry's change set as one changelog record and wait for those
   acknowledgements (under exactly_once, then commit the partition's Kafka
   transaction: outputs, change sets and journal offsets become visible together);
4. only then write the change sets to the local partition database, together
   with the changelog offset recovery resumes from;
5. return, and the agent acknowledges the entries (Faust commits the journal
   offsets later).

A crash at any point leaves the changelog (and the local database) at or
behind the outputs, and the journal offset behind both, so the entries are
delivered again: entries whose change set never reached the changelog run
again on the old state and re-emit byte-identical records (same ids); entries
whose change set did reach it are recognised by the engine as already applied
(its last-position bookkeeping lives in the same change set) and emit nothing.
No record is lost; duplicates are identical and deduplicated by id.
"""

import asyncio
import bisect
import logging
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import orjson

from processor.embedded import serialize
from processor.engine import Engine, EngineConfig
from processor.store import StateStore, Transaction
from processor.stream import changeset
from processor.stream.metrics import Metrics
from processor.stream.settings import TopicNames
from processor.stream.tablestore import PartitionedState
from schemas.records import DeadLetterRecord, OutputRecord

log = logging.getLogger("recurrence.stream")

#: Header on every output record: "<journal partition>:<journal offset>:<index in the entry's output>".
SOURCE_HEADER: Final = "recurrence-source"


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


@dataclass
class BatchResult:
    entries: int = 0
    records: int = 0
    change_sets: int = 0


class BatchProcessor:
    def __init__(
        self,
        *,
        topics: TopicNames,
        state: PartitionedState,
        sink: Sink,
        config: EngineConfig,
        metrics: Metrics | None = None,
    ) -> None:
        self.topics = topics
        self.state = state
        self.sink = sink
        self.config = config
        self.metrics = metrics or Metrics()

    async def process(self, entries: Sequence[Entry]) -> BatchResult:
        started = time.perf_counter()
        result = BatchResult(entries=len(entries))
        overlays: dict[int, Overlay] = {}
        change_sets: list[tuple[int, dict[bytes, bytes | None]]] = []
        deliveries: list[Awaitable[Delivered]] = []
        kinds: list[OutputRecord] = []

        for entry in entries:
            overlay = overlays.get(entry.partition)
            if overlay is None:
                overlay = overlays[entry.partition] = Overlay(self.state.partition_state(entry.partition))
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
        next_offsets: dict[int, int] = {}
        for entry in entries:
            next_offsets[entry.partition] = max(entry.offset + 1, next_offsets.get(entry.partition, 0))
        await self.sink.commit(next_offsets)
        # (4) local state, atomically with the changelog offset recovery resumes from.
        for partition, overlay in overlays.items():
            if overlay.changes:
                self.state.apply_local(partition, overlay.changes, last_offset.get(partition))

        result.records = len(kinds)
        result.change_sets = len(change_sets)
        self._count(entries, kinds, overlays, len(change_sets), time.perf_counter() - started)
        return result

    def _count(
        self,
        entries: Sequence[Entry],
        records: Sequence[OutputRecord],
        overlays: Mapping[int, Overlay],
        change_sets: int,
        seconds: float,
    ) -> None:
        m = self.metrics
        m.entries += len(entries)
        m.batches += 1
        m.batch_seconds += seconds
        for record in records:
            m.records[record.record] += 1
            if isinstance(record, DeadLetterRecord):
                m.dead_letters[record.error] += 1
                log.debug("dead letter %s at scope position %s", record.error, record.position)
        m.changelog_records += change_sets
        m.state_changes += sum(len(o.changes) for o in overlays.values())
        for entry in entries:
            m.processed_offsets[entry.partition] = max(entry.offset, m.processed_offsets.get(entry.partition, -1))
        if entries:
            log.debug(
                "batch of %d entries (%s) durable in %.3fs: %d records",
                len(entries),
                ", ".join(f"p{p}" for p in sorted(overlays)),
                seconds,
                len(records),
            )
