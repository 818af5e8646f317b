"""The dead-letters topic, read once and then only what it grew by: a worker's ``/dead-letters/{code}``.

A worker lists a code's dead letters from ``<prefix>.dead-letters`` (any worker: no owner to ask).
Reading the whole topic on every request grows with the topic; the feed, kept by the worker's web
view, remembers where it stopped in each partition and reads on from there. What it keeps is bounded:
per code the first ``MAX_LISTED`` distinct records in journal order (the order ``ledger-dump`` writes,
by the record's source), and nothing else; how many a code has is the state's count (``/dead-letters``).
A duplicate (a batch written again under at_least_once) carries the same source and id, so it is
either one of those kept or past them, and is never listed twice.
"""

import asyncio
import bisect
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiokafka import TopicPartition

from ..settings import KafkaConnection
from .brokers import bounded, committed_reader, require_topics, started
from .dump import _NO_SOURCE, _source, fetched_below, record_id
from .faustcompat import kafka_client

Order = tuple[int, ...]


class DeadLetterFeed:
    """Per code, the first ``keep`` dead letters of the topic, updated from where the last read stopped."""

    def __init__(self, connection: KafkaConnection, topic: str, keep: int, shown: Callable[[Any], Any]) -> None:
        self.connection, self.topic, self.keep, self.shown = connection, topic, keep, shown
        self.positions: dict[int, int] = {}  # partition -> the next offset to read
        self.kept: dict[str, list[tuple[Order, str, Any]]] = {}  # code -> (order, id, shown record), sorted
        self.read_records = 0  # records read over the feed's life (each once: what the bound is about)
        self._lock = asyncio.Lock()

    def _fold(self, order: Order, ident: str, record: Mapping[str, Any]) -> None:
        rows = self.kept.setdefault(str(record.get("error")), [])
        if len(rows) >= self.keep and order >= rows[-1][0]:
            return
        if any(kept_id == ident for _, kept_id, _ in rows):
            return
        bisect.insort(rows, (order, ident, self.shown(record)), key=lambda row: row[0])
        del rows[self.keep :]

    async def update(self) -> None:
        """Read what the topic holds past the last read, up to its end offsets now (``read_committed``)."""
        async with self._lock, started(self.connection, committed_reader(self.connection)) as consumer:
            counts = await require_topics(self.connection, kafka_client(consumer), [self.topic])
            tps = [TopicPartition(self.topic, p) for p in range(counts[self.topic])]
            ends: dict[TopicPartition, int] = await bounded(self.connection, consumer.end_offsets(tps))
            remaining = [tp for tp in tps if self.positions.get(tp.partition, 0) < ends[tp]]
            if not remaining:
                return
            consumer.assign(remaining)
            for tp in remaining:
                consumer.seek(tp, self.positions.get(tp.partition, 0))
            while remaining:
                for tp, message in await fetched_below(consumer, remaining, ends):
                    self.read_records += 1
                    order = (*(_source(message.headers) or _NO_SOURCE), tp.partition, message.offset)
                    self._fold(order, record_id(message.value, message.headers), orjson.loads(message.value))
                for tp in remaining:
                    self.positions[tp.partition] = min(ends[tp], await consumer.position(tp))
                remaining = [tp for tp in remaining if self.positions[tp.partition] < ends[tp]]

    def listed(self, code: str) -> list[Any]:
        return [shown for _, _, shown in self.kept.get(code, [])]
