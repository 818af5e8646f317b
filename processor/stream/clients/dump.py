"""``recurrence ledger-dump``: the output topics back to JSONL, deduplicated, in journal order.

The reference consumer for downstream services. It reads the ledger, review
and dead-letter topics from the beginning up to the end offsets found at start
(``read_committed``, so aborted transactional writes never show), drops
duplicates by record id, and writes each record's value plus a newline -- the
same bytes the embedded runner writes to its ledger file.

Record ids: ``observation_id`` for observations, ``match_digest`` for matches,
and for review proposals, admissions and dead letters (which carry no id) the
digest of their canonical JSON. A crash of the worker can only re-emit a
record with the same id, so deduplicated output is exact.

Order: every record carries the ``recurrence-source`` header (journal
partition, journal offset, index in that entry's output); records are written
in that order, which is per-scope journal order (a scope lives on one journal
partition) and, within an entry, the engine's order (a match before the
observation that cites it). When duplicates exist the earliest source wins.

``--follow`` writes that ordered snapshot first and then every new distinct
record as it arrives (in arrival order; a scope's records on one topic keep
their order), until Ctrl-C or SIGTERM, like ``kcat -C``.

``--offset``, ``--partition`` and ``--format`` narrow and shape the read as
kcat's ``-o``, ``-p`` and ``-f`` do (``dumpformat``); deduplication and the
order above apply to the records read.
"""

import asyncio
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from ....topics.names import TopicNames
from ...core.tally import counted
from ...exceptions import SettingsError
from ...host.outputfile import Writable
from ...verify import record_id as derived_record_id
from ..batch.types import ID_HEADER, SOURCE_HEADER
from ..settings import KafkaConnection
from .brokers import bounded, committed_reader, require_topics, started
from .dumpformat import BEGINNING, Dumped, StartOffset, value_line
from .faustcompat import kafka_client

_NO_SOURCE = (sys.maxsize, sys.maxsize, sys.maxsize)
_POLL_MS: Final = 500

# ``--kinds``: the documented topic names, and the singular/plural and underscore spellings people type.
KIND_ALIASES: Final = {
    "ledger": ("ledger", "ledgers", "match", "matches", "observation", "observations"),
    "review": ("review", "reviews", "review_proposal", "review_proposals", "admission", "admissions"),
    "dead-letters": ("dead-letters", "dead-letter", "dead_letters", "dead_letter", "deadletters", "dlq"),
    # Not part of the ledger (the default kinds): the patterns agent's suggestions.
    "patterns": ("patterns", "pattern", "suggestions", "suggestion"),
}


def topics_for_kinds(names: TopicNames, kinds: str) -> list[str]:
    """The output topics named by ``--kinds`` (comma-separated), in the documented order."""
    lookup = {alias: kind for kind, aliases in KIND_ALIASES.items() for alias in aliases}
    chosen: set[str] = set()
    for raw in kinds.split(","):
        word = raw.strip().lower()
        if not word:
            continue
        if word not in lookup:
            raise SettingsError(f"unknown --kinds value {raw.strip()!r}: choose from {', '.join(KIND_ALIASES)}")
        chosen.add(lookup[word])
    if not chosen:
        raise SettingsError(f"--kinds names no topic: choose from {', '.join(KIND_ALIASES)}")
    by_kind = {
        "ledger": names.ledger,
        "review": names.review,
        "dead-letters": names.dead_letters,
        "patterns": names.patterns,
    }
    return [by_kind[kind] for kind in KIND_ALIASES if kind in chosen]


def record_id(value: bytes, headers: Sequence[tuple[str, bytes]] | None = None) -> str:
    """``<kind>:<id>``: the ``recurrence-id`` header when present, else derived from the record."""
    for name, raw in headers or ():
        if name == ID_HEADER:
            return raw.decode()
    return derived_record_id(value)


async def fetched_below(
    consumer: AIOKafkaConsumer, partitions: Collection[TopicPartition], ends: Mapping[TopicPartition, int]
) -> list[tuple[TopicPartition, Any]]:
    """One fetch from ``partitions``: its records below ``ends``, the end offsets a read found at its
    start (what lies past them belongs to a later read)."""
    batches: dict[TopicPartition, list[Any]] = await consumer.getmany(*partitions, timeout_ms=1000)
    return [(tp, message) for tp, messages in batches.items() for message in messages if message.offset < ends[tp]]


def _source(headers: Sequence[tuple[str, bytes]] | None) -> tuple[int, int, int] | None:
    for name, raw in headers or ():
        if name == SOURCE_HEADER:
            try:
                partition, offset, index = (int(part) for part in raw.decode().split(":"))
            except ValueError:
                return None
            return (partition, offset, index)
    return None


@dataclass
class DumpSummary:
    raw_records: int = 0
    distinct: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        return self.raw_records - self.distinct

    def line(self) -> str:
        topics = ", ".join(f"{t}={n:,}" for t, n in sorted(self.by_topic.items()))
        return (
            f"recurrence ledger-dump: {counted(self.distinct, 'distinct record')} from {self.raw_records:,} read "
            f"({counted(self.duplicates, 'duplicate')} dropped) in {self.seconds:.2f}s{'; ' + topics if topics else ''}"
        )


class OutputReader:
    """Reads output topics from ``start`` (the beginning by default), deduplicating by record id."""

    def __init__(
        self,
        connection: KafkaConnection,
        topics: Sequence[str],
        dedupe: bool = True,
        start: StartOffset = BEGINNING,
        partition: int | None = None,
    ) -> None:
        self.connection = connection
        self.topics = list(topics)
        self.dedupe = dedupe
        self.start = start
        self.partition = partition
        self.summary = DumpSummary()
        self._rank = {topic: i for i, topic in enumerate(self.topics)}
        self._seen: set[str] = set()

    async def _assign(self, consumer: AIOKafkaConsumer) -> list[TopicPartition]:
        counts = await require_topics(self.connection, kafka_client(consumer), self.topics)
        if self.partition is None:
            tps = [TopicPartition(topic, p) for topic in self.topics for p in range(counts[topic])]
        else:
            lacking = [topic for topic in self.topics if self.partition >= counts[topic]]
            if lacking:
                raise SettingsError(
                    f"--partition {self.partition}: {', '.join(f'{t} has {counts[t]}' for t in lacking)} partitions "
                    f"(numbered from 0)"
                )
            tps = [TopicPartition(topic, self.partition) for topic in self.topics]
        consumer.assign(tps)
        if self.start == BEGINNING:
            await bounded(self.connection, consumer.seek_to_beginning(*tps))
            return tps
        firsts: dict[TopicPartition, int] = await bounded(self.connection, consumer.beginning_offsets(tps))
        ends: dict[TopicPartition, int] = await bounded(self.connection, consumer.end_offsets(tps))
        for tp in tps:
            consumer.seek(tp, self.start.resolve(firsts[tp], ends[tp]))
        return tps

    def _keep(self, tp: TopicPartition, message: Any) -> tuple[tuple[int, ...], str, Dumped]:
        self.summary.raw_records += 1
        self.summary.by_topic[tp.topic] = self.summary.by_topic.get(tp.topic, 0) + 1
        order = (*(_source(message.headers) or _NO_SOURCE), self._rank[tp.topic], tp.partition, message.offset)
        dumped = Dumped(
            tp.topic,
            tp.partition,
            message.offset,
            message.key,
            message.value,
            message.timestamp,
            tuple(message.headers or ()),
        )
        return order, record_id(message.value, message.headers), dumped

    async def _snapshot(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> list[tuple[str, Dumped]]:
        ends: dict[TopicPartition, int] = await bounded(self.connection, consumer.end_offsets(tps))
        best: dict[str, tuple[tuple[int, ...], Dumped]] = {}
        kept: list[tuple[tuple[int, ...], Dumped]] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        for tp in list(remaining):
            if await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
        while remaining:
            for tp, message in await fetched_below(consumer, remaining, ends):
                order, ident, dumped = self._keep(tp, message)
                seen = best.get(ident)
                if not self.dedupe:
                    kept.append((order, dumped))
                elif seen is None or order < seen[0]:
                    best[ident] = (order, dumped)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
            # Past the end offsets found at start: the rest belongs to --follow.
            for tp in tps:
                if tp not in remaining and await consumer.position(tp) > ends[tp]:
                    consumer.seek(tp, ends[tp])
        if self.dedupe:
            records = sorted(((order, ident, dumped) for ident, (order, dumped) in best.items()), key=lambda i: i[0])
            self._seen.update(ident for _, ident, _ in records)
            return [(ident, dumped) for _, ident, dumped in records]
        return [("", dumped) for _, dumped in sorted(kept, key=lambda item: item[0])]

    async def read(self) -> list[bytes]:
        """Every distinct record up to the end offsets found at start, in source order."""
        return [dumped.value for dumped in await self.read_dumped()]

    async def read_dumped(self) -> list[Dumped]:
        """``read``, each record with its topic, partition, offset, key, timestamp and headers."""
        began = time.monotonic()
        async with started(self.connection, committed_reader(self.connection)) as consumer:
            tps = await self._assign(consumer)
            records = await self._snapshot(consumer, tps)
        self.summary.distinct = len(records)
        self.summary.seconds = time.monotonic() - began
        return [dumped for _, dumped in records]

    async def follow(self, out: Writable, stop: asyncio.Event, render: Callable[[Dumped], bytes] = value_line) -> None:
        """The snapshot, then every new distinct record as it arrives, until ``stop`` is set."""
        began = time.monotonic()
        async with started(self.connection, committed_reader(self.connection)) as consumer:
            tps = await self._assign(consumer)
            for _, dumped in await self._snapshot(consumer, tps):
                out.write(render(dumped))
            self.summary.distinct = len(self._seen) if self.dedupe else self.summary.raw_records
            out.flush()
            while not stop.is_set():
                poll = asyncio.ensure_future(consumer.getmany(*tps, timeout_ms=_POLL_MS))
                stopped = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if poll not in done:
                    poll.cancel()
                    break
                stopped.cancel()
                for tp, messages in poll.result().items():
                    for message in messages:
                        _, ident, dumped = self._keep(tp, message)
                        if self.dedupe and ident in self._seen:
                            continue
                        self._seen.add(ident)
                        self.summary.distinct += 1
                        out.write(render(dumped))
                out.flush()
        self.summary.seconds = time.monotonic() - began


async def read_records(
    connection: KafkaConnection, topics: Sequence[str], dedupe: bool = True
) -> tuple[list[bytes], DumpSummary]:
    """All distinct output records up to the current end offsets, in source order."""
    reader = OutputReader(connection, topics, dedupe)
    records = await reader.read()
    return records, reader.summary


async def dump(connection: KafkaConnection, topics: Sequence[str], out: Writable, dedupe: bool = True) -> DumpSummary:
    records, summary = await read_records(connection, topics, dedupe)
    for value in records:
        out.write(value + b"\n")
    out.flush()
    return summary


async def read_table(connection: KafkaConnection, topic: str) -> dict[bytes, bytes]:
    """A table topic (``<prefix>.statistics``) read from the beginning: the last value per key.

    Up to the end offsets found at start, ``read_committed``; keyless records and
    tombstones (none are written) are ignored and dropped.
    """
    table: dict[bytes, bytes] = {}
    async with started(connection, committed_reader(connection)) as consumer:
        counts = await require_topics(connection, kafka_client(consumer), [topic])
        tps = [TopicPartition(topic, p) for p in range(counts[topic])]
        consumer.assign(tps)
        await bounded(connection, consumer.seek_to_beginning(*tps))
        ends: dict[TopicPartition, int] = await bounded(connection, consumer.end_offsets(tps))
        remaining = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
        while remaining:
            batches: dict[TopicPartition, list[Any]] = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, messages in batches.items():
                for message in messages:
                    if message.offset >= ends[tp] or message.key is None:
                        continue
                    if message.value is None:
                        table.pop(message.key, None)
                    else:
                        table[message.key] = message.value
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    return table


async def read_statistics(connection: KafkaConnection, topic: str) -> list[Any]:
    """The statistics topic as ``recurrence stats`` and ``GET /statistics`` print it: a list by scope_id."""
    table = await read_table(connection, topic)
    return [orjson.loads(table[key]) for key in sorted(table)]
