"""Direct reads of a topic by partition: the journal, for the entries Faust's stream did not
deliver, and the state changelog, to check a partition's restore against it (``processing``).

The stream path keeps its own journal position per partition in the engine
state (see ``processing``). When the next entry Faust hands over is past that
position, the entries in between are read here -- a plain aiokafka consumer
without a group, ``read_committed``, assigned to one partition at a time -- and
processed first. Observed with faust-streaming 0.15.3: right after a restart,
around the seek to the committed offsets, the stream skipped a few entries per
partition and the commit moved past them (docs/worker.md, "What the worker takes from Faust").
"""

import asyncio
from typing import Any

from aiokafka import TopicPartition

from ..batch.types import ChangelogRecord
from ..clients.brokers import committed_reader
from ..settings import KafkaConnection

FETCH_TIMEOUT = 60.0
FETCH_POLL_MS = 50


class PartitionReader:
    def __init__(self, connection: KafkaConnection, topic: str, fetch_max_wait_ms: int = FETCH_POLL_MS) -> None:
        self._connection = connection
        self._topic = topic
        # A broker answers one connection's requests in order: the next read (or an offsets request)
        # waits behind a fetch that is long-polling for more data, so a read pauses its partition once
        # it has what it wanted, and a fetch in flight then waits at most this long. With 500 ms and
        # the partition left fetching, each range the patterns agent read (under exactly_once only the
        # transaction markers between its batches) took 0.5-1 s: up to 4 s a batch, one per partition.
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def _ensure(self) -> Any:
        if self._consumer is None:
            consumer = committed_reader(self._connection, fetch_max_wait_ms=self._fetch_max_wait_ms)
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def log_start(self, partition: int) -> int:
        async with self._lock:
            consumer = await self._ensure()
            tp = TopicPartition(self._topic, partition)
            offsets = await consumer.beginning_offsets([tp])
            return int(offsets[tp])

    async def log_end(self, partition: int) -> int:
        async with self._lock:
            consumer = await self._ensure()
            tp = TopicPartition(self._topic, partition)
            offsets = await consumer.end_offsets([tp])
            return int(offsets[tp])

    async def fetch(self, partition: int, start: int, stop: int) -> list[tuple[int, bytes]]:
        """Values of the records with ``start <= offset < stop`` (transaction markers leave no record)."""
        return [
            (offset, value if value is not None else b"")
            for offset, _, value in await self.fetch_records(partition, start, stop)
        ]

    async def fetch_records(self, partition: int, start: int, stop: int) -> list[ChangelogRecord]:
        """(offset, key, value) of the records with ``start <= offset < stop``."""
        if stop <= start:
            return []
        async with self._lock:
            consumer = await self._ensure()
            tp = TopicPartition(self._topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
            records: list[ChangelogRecord] = []
            deadline = asyncio.get_running_loop().time() + FETCH_TIMEOUT
            while await consumer.position(tp) < stop:
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(f"journal partition {partition}: offsets {start}..{stop - 1} not readable")
                # A short wait: a range holding only an aborted transaction and its marker (what a
                # killed exactly_once worker leaves at the end of its changelog) returns no record
                # at all, and a 2 s wait here held each partition's first batch after a restart for
                # the whole 2 s (8 partitions in a row: most of a 22 s recovery). The position has
                # moved past the marker once the fetch is answered, which the loop checks.
                batches = await consumer.getmany(tp, timeout_ms=FETCH_POLL_MS)
                for message in batches.get(tp, []):
                    if start <= message.offset < stop:
                        records.append((message.offset, message.key, message.value))
            consumer.pause(tp)  # no fetching past ``stop`` until the next read assigns a partition again
            return records

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
