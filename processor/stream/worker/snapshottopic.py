"""The snapshots topic over aiokafka: ``snapshots.SnapshotLog`` for a running worker.

Snapshots are not part of any batch's transaction -- they copy state that is
already durable (committed, under exactly_once) -- so they go through a plain
producer of their own (acks=all), never Faust's, and are read with the same
direct partition reader as the journal gaps.
"""

import asyncio
from collections.abc import Awaitable
from typing import Any

from aiokafka import AIOKafkaProducer

from ..batch.types import ChangelogRecord
from ..settings import KafkaConnection
from .journal import PartitionReader
from .snapshots import MAX_RECORD_BYTES


class KafkaSnapshotLog:
    def __init__(self, connection: KafkaConnection, topic: str) -> None:
        self._connection = connection
        self._topic = topic
        self._reader = PartitionReader(connection, topic, fetch_max_wait_ms=20)
        self._producer: Any = None

    async def _ensure_producer(self) -> Any:
        if self._producer is None:
            producer = AIOKafkaProducer(
                **self._connection.aiokafka_kwargs(), acks="all", max_request_size=MAX_RECORD_BYTES, linger_ms=5
            )
            await producer.start()
            self._producer = producer
        return self._producer

    async def send(self, key: bytes, value: bytes | None, partition: int) -> Awaitable[int]:
        producer = await self._ensure_producer()
        delivery = await producer.send(self._topic, value=value, key=key, partition=partition)

        async def offset() -> int:
            return int((await delivery).offset)

        return asyncio.ensure_future(offset())

    async def log_start(self, partition: int) -> int:
        return await self._reader.log_start(partition)

    async def log_end(self, partition: int) -> int:
        return await self._reader.log_end(partition)

    async def fetch_records(self, partition: int, start: int, stop: int) -> list[ChangelogRecord]:
        return await self._reader.fetch_records(partition, start, stop)

    async def close(self) -> None:
        await self._reader.close()
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
