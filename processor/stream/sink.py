"""The worker's ``Sink``: output and changelog records through Faust's producers.

See ``FaustSink`` for why exactly_once needs its own handling of Faust's
transactional producers (reached through ``faustcompat``).
"""

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from recurrence.processor.exceptions import TransactionStateError
from recurrence.processor.stream.faustcompat import transaction_lock, transaction_producer
from recurrence.processor.stream.types import Delivered


class FaustSink:
    """``processing.Sink`` over the app's producer.

    at_least_once: ``Topic.send(force=True)`` sends now (not when the offset
    commits) and the returned future resolves on the broker's acknowledgement.

    exactly_once: Faust keeps one transactional producer per journal partition
    (transactional id ``<app id>-<topic group>-<partition>``). Faust's own
    ``send`` picks the producer by the *destination* partition, which for an
    output topic is not the entry's partition (or not a partition Faust knows),
    so the record would bypass the transaction. This sink sends every record of
    an entry through the producer of the entry's journal partition, holds that
    producer's lock for the whole batch (so Faust's timed commit cannot split
    it), and ``commit`` ends each batch with ``send_offsets_to_transaction`` +
    ``commit_transaction`` on that producer, before the local state is written.
    Local state is therefore never ahead of the committed changelog, and
    read_committed consumers see each output once.
    """

    def __init__(self, app: Any, topics: Mapping[str, Any], source: str, exactly_once: bool) -> None:
        # ``source``: the topic the agent consumes (the journal, or the patterns agent's repartition topic).
        self._app = app
        self._topics = topics
        self._journal = source
        self._exactly_once = exactly_once
        self._held: list[Any] = []

    def _transactional_id(self, partition: int) -> str:
        group = self._app.assignor.group_for_topic(self._journal)
        return f"{self._app.conf.id}-{group}-{partition}"

    def _producer(self, partition: int) -> Any:
        producer = transaction_producer(self._app, self._transactional_id(partition))
        if producer is None:
            raise TransactionStateError(f"no transactional producer for journal partition {partition}")
        return producer

    async def begin(self, partitions: Sequence[int]) -> None:
        # Faust commits every transaction on its own timer too; holding its per-producer
        # locks for the whole batch keeps that commit from landing mid-batch (it would make
        # some outputs visible without the change sets that record them).
        if not self._exactly_once:
            return
        for partition in sorted(set(partitions)):
            lock = transaction_lock(self._app, self._transactional_id(partition))
            await lock.acquire()
            self._held.append(lock)

    def end(self) -> None:
        while self._held:
            self._held.pop().release()

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        headers: list[tuple[str, bytes]],
        source_partition: int,
    ) -> Awaitable[Delivered]:
        if not self._exactly_once:
            future: Awaitable[Delivered] = await self._app.producer.send(
                topic, key, value, partition, None, headers or None
            )
            return future
        sent: Awaitable[Delivered] = await self._producer(source_partition).send(
            topic, value, key=key, partition=partition, headers=headers or None
        )
        return sent

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        if not self._exactly_once:
            return
        for partition, offset in sorted(next_offsets.items()):
            producer = self._producer(partition)
            offsets = {TopicPartition(self._journal, partition): offset}
            await producer.send_offsets_to_transaction(offsets, self._app.conf.id)
            await producer.commit_transaction()
            await producer.begin_transaction()
