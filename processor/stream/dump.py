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
"""

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from recurrence.processor.stream.settings import KafkaConnection
from recurrence.processor.stream.types import SOURCE_HEADER
from recurrence.schemas.canonical import digest

_NO_SOURCE = (sys.maxsize, sys.maxsize, sys.maxsize)


def record_id(value: bytes) -> str:
    record = orjson.loads(value)
    kind = record.get("record") if isinstance(record, dict) else None
    if kind == "observation":
        return f"observation:{record['observation_id']}"
    if kind == "match":
        return f"match:{record['match_digest']}"
    if kind == "dead_letter":
        return f"dead_letter:{record['dead_letter_id']}"
    return f"{kind}:{digest(record)}"


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
        topics = ", ".join(f"{t}={n}" for t, n in sorted(self.by_topic.items()))
        return (
            f"recurrence ledger-dump: {self.distinct} distinct records from {self.raw_records} read "
            f"({self.duplicates} duplicates dropped) in {self.seconds:.2f}s; {topics}"
        )


async def read_records(
    connection: KafkaConnection, topics: Sequence[str], dedupe: bool = True
) -> tuple[list[bytes], DumpSummary]:
    """All distinct output records up to the current end offsets, in source order."""
    started = time.monotonic()
    summary = DumpSummary()
    consumer = AIOKafkaConsumer(
        **connection.aiokafka_kwargs(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    best: dict[str, tuple[tuple[int, ...], bytes]] = {}
    kept: list[tuple[tuple[int, ...], bytes]] = []
    try:
        tps: list[TopicPartition] = []
        for topic in topics:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                raise LookupError(f"topic {topic} does not exist")
            tps.extend(TopicPartition(topic, p) for p in sorted(partitions))
        rank = {topic: i for i, topic in enumerate(topics)}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        remaining = {tp for tp in tps if ends[tp] > 0}
        for tp in tps:
            if tp in remaining and await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
        while remaining:
            batches: dict[TopicPartition, list[Any]] = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, messages in batches.items():
                for message in messages:
                    if message.offset >= ends[tp]:
                        continue
                    summary.raw_records += 1
                    summary.by_topic[tp.topic] = summary.by_topic.get(tp.topic, 0) + 1
                    value: bytes = message.value
                    source = _source(message.headers)
                    order = (*(source or _NO_SOURCE), rank[tp.topic], tp.partition, message.offset)
                    if not dedupe:
                        kept.append((order, value))
                        continue
                    ident = record_id(value)
                    seen = best.get(ident)
                    if seen is None or order < seen[0]:
                        best[ident] = (order, value)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    records = sorted(best.values() if dedupe else kept, key=lambda item: item[0])
    summary.distinct = len(records)
    summary.seconds = time.monotonic() - started
    return [value for _, value in records], summary


async def dump(connection: KafkaConnection, topics: Sequence[str], out: IO[bytes], dedupe: bool = True) -> DumpSummary:
    records, summary = await read_records(connection, topics, dedupe)
    for value in records:
        out.write(value)
        out.write(b"\n")
    out.flush()
    return summary
