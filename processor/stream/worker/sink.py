"""The worker's ``Sink``: output and changelog records through Faust's producers, in batches.

See ``FaustSink`` for why exactly_once needs its own handling of Faust's
transactional producers (reached through ``faustcompat``), and ``_Batches``
for why records are appended to batches instead of sent one by one.
"""

import asyncio
from collections.abc import Awaitable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokafka.partitioner import DefaultPartitioner

from ...exceptions import TransactionStateError
from ..batch.types import Delivered, Outgoing
from ..clients.faustcompat import plain_producer, transaction_failure, transaction_lock, transaction_producer


class _Written(NamedTuple):  # one per output record: a named tuple is built at a fraction of a frozen dataclass's cost
    partition: int
    offset: int


@dataclass
class _Open:
    """A batch being filled for one (producer, topic, partition), and the one future all its records share."""

    producer: Any
    topic: str
    partition: int
    builder: Any
    # Resolves with the broker's metadata for the whole batch (its base offset), or its error.
    acknowledged: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def failed_transaction(producer: Any, error: BaseException) -> BaseException | None:
    """What failed the producer's transaction when ``error`` only echoes it -- a record refused as
    InvalidTxnState, a send refused as "not in transaction" or by aiokafka's own assertion, as the
    timing goes: a partition or an offset commit the broker refused, e.g. an ACL revoked while the
    worker runs. None when the transaction has not failed (then ``error`` is the story)."""
    cause = transaction_failure(producer)
    return None if cause is None or cause is error else cause


class _Pending:
    """One record's delivery: awaiting it waits for its batch, then gives its partition and offset.

    A record's offset is its batch's base offset plus its index in the batch, so the records of a
    batch share one future instead of one each (an asyncio future and its callback per record were
    6-8% of a saturated worker's main thread).
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Open, index: int) -> None:
        self._batch = batch
        self._index = index

    def __await__(self) -> Generator[Any, None, Delivered]:
        try:
            metadata = yield from self._batch.acknowledged.__await__()
        except Exception as failed:
            cause = failed_transaction(self._batch.producer, failed)
            if cause is None:
                raise
            raise cause from failed
        return _Written(self._batch.partition, metadata.offset + self._index)


class _Batches:
    """Records appended to aiokafka ``BatchBuilder``s per (producer, topic, partition), sent by ``flush``.

    aiokafka's per-record ``send`` costs ~25-30 µs of CPU (a future and a
    message object per record, Python-side encoding); a ``BatchBuilder``
    encodes in C and the whole batch has one delivery future (~3 µs per
    record; docs/worker.md, "What the worker takes from Faust"). Each record's delivery
    (``_Pending``) waits on that one future and then gives its partition and
    offset (the batch's base offset plus the record's index in it), which the
    record index for ``explain`` needs. A keyed record's partition is computed as the producer
    would (the default partitioner over the topic's partitions).
    """

    def __init__(self, remembered_keys: int = 100_000) -> None:
        self._open: dict[tuple[int, str, int], _Open] = {}
        self._sent: list[asyncio.Future[Any]] = []  # the delivery futures of the last flush's batches
        self._partitions: dict[str, list[int]] = {}
        self._partitioner = DefaultPartitioner()
        # (topic, key) -> partition. aiokafka's murmur2 is pure Python (~2% of a saturated worker),
        # while the keys repeat: scopes, signature keys. Bounded: cleared when it reaches the limit.
        self._chosen: dict[tuple[str, bytes], int] = {}
        self._remembered_keys = remembered_keys

    async def send(self, producer: Any, record: Outgoing) -> Awaitable[Delivered]:
        """Append a record to the batch for its partition (a keyed record's, when its ``partition`` is None).

        The common case -- a key whose partition is known, a batch with room -- is ``append``, which
        the worker's per-record loop calls first, without a coroutine; this is the rest.
        """
        topic, key, _, partition, _, _ = record
        if partition is None:
            if key is None:
                raise ValueError(f"a record for {topic} needs a key or a partition")
            partition = await self.partition_for(producer, topic, key)
            record = record._replace(partition=partition)
        found = self.append(producer, record)
        if found is not None:
            return found
        return await self._append(producer, record, partition)

    def append(self, producer: Any, record: Outgoing) -> Awaitable[Delivered] | None:
        """``send``'s common case without a coroutine: a batch with room, for a known partition (or a
        key whose partition was computed before); None when only ``send`` can take the record."""
        topic, key, value, partition, headers, _ = record  # one unpacking: this runs per output record
        if partition is None:
            partition = self._chosen.get((topic, key)) if key is not None else None
            if partition is None:
                return None
        slot = self._open.get((id(producer), topic, partition))
        if slot is None:
            return None
        meta = slot.builder.append(timestamp=None, key=key, value=value, headers=headers)
        return None if meta is None else _Pending(slot, meta.offset)

    async def partition_for(self, producer: Any, topic: str, key: bytes) -> int:
        chosen = self._chosen.get((topic, key))
        if chosen is not None:
            return chosen
        partitions = self._partitions.get(topic)
        if partitions is None:  # fixed for the worker's life: ``topics apply`` refuses a changed count
            partitions = self._partitions[topic] = sorted(await producer.partitions_for(topic))
        chosen = int(self._partitioner(key, partitions, partitions))
        if len(self._chosen) >= self._remembered_keys:
            self._chosen.clear()
        self._chosen[(topic, key)] = chosen
        return chosen

    async def _append(self, producer: Any, record: Outgoing, partition: int) -> Awaitable[Delivered]:
        """``send`` when the partition has no open batch, or its batch is full (sent, and another opened)."""
        topic, key, value, _, headers, _ = record
        slot_key = (id(producer), topic, partition)
        full = self._open.pop(slot_key, None)
        if full is not None:
            await self._send(full)
        slot = self._open[slot_key] = _Open(producer, topic, partition, producer.create_batch())
        meta = slot.builder.append(timestamp=None, key=key, value=value, headers=headers)
        if meta is None:
            raise ValueError(f"a record of {len(value)} bytes does not fit in an empty batch for {topic}")
        return _Pending(slot, meta.offset)

    async def flush(self, early: bool = False) -> None:
        """Send every batch being filled (their records' futures resolve on the broker's acknowledgement).

        ``early``: only if every batch sent before is acknowledged. aiokafka holds one request per
        broker in flight and queues one batch per partition: a batch sent behind an
        unacknowledged one waits in ``send_batch`` for a round trip, and an early flush must never
        hold up the engine (the records stay in their batches until the next flush).
        """
        if early and not all(sent.done() for sent in self._sent):
            return
        open_slots, self._open = self._open, {}
        self._sent = [sent for sent in self._sent if not sent.done()]
        for slot in open_slots.values():
            await self._send(slot)

    async def _send(self, slot: _Open) -> None:
        slot.builder.close()
        acknowledged = slot.acknowledged
        try:
            sent = await slot.producer.send_batch(slot.builder, slot.topic, partition=slot.partition)
        except Exception as error:
            if not acknowledged.done():
                acknowledged.set_exception(error)
            cause = failed_transaction(slot.producer, error)
            if cause is None:
                raise
            raise cause from error
        self._sent.append(sent)

        def resolve(batch: asyncio.Future[Any]) -> None:
            if acknowledged.done():
                return
            if batch.cancelled():
                acknowledged.cancel()
            elif (error := batch.exception()) is not None:
                acknowledged.set_exception(error)
            else:
                acknowledged.set_result(batch.result())

        sent.add_done_callback(resolve)

    def abandon(self) -> None:
        """A failed batch: drop what was never sent (the batch's process ends; nothing waits on them)."""
        for slot in self._open.values():
            slot.acknowledged.cancel()
        self._open.clear()


class FaustSink:
    """``processing.Sink`` over the app's producers.

    at_least_once: records go through the AIOKafkaProducer of Faust's
    Producer, appended to batches (``_Batches``) and sent by ``flush``; each
    record's future resolves on the broker's acknowledgement (acks=all).

    exactly_once: Faust keeps one transactional producer per journal partition
    (transactional id ``<app id>-<topic group>-<partition>``). Faust's own
    ``send`` picks the producer by the *destination* partition, which for an
    output topic is not the entry's partition (or not a partition Faust knows),
    so the record would bypass the transaction. This sink sends every record of
    an entry through the producer of the entry's journal partition, holds that
    producer's lock for the whole batch (so Faust's timed commit cannot split
    it), and ``commit`` ends each batch with ``commit_transaction`` on that
    producer, before the local state is written. Local state is therefore never
    ahead of the committed changelog, and read_committed consumers see each
    output once.

    The journal offsets are not in the transaction: what says where a partition
    continues is the journal position inside its change set, committed with the
    outputs (``processing``), and the agent commits the group offsets after the
    transaction, as under at-least-once (``app``). In the transaction they were
    two more coordinator round trips per batch (AddOffsetsToTxn, TxnOffsetCommit),
    and a producer runs its coordinator requests one at a time: the partitions'
    AddPartitionsToTxn and the EndTxn queued behind them (a batch's cycle 93-95 ms
    at 2,800 entries/s; without them 32-35 ms).
    """

    def __init__(self, app: Any, source: str, exactly_once: bool) -> None:
        # ``source``: the topic the agent consumes (the journal, or the patterns agent's repartition topic).
        self._app = app
        self._journal = source
        self._exactly_once = exactly_once
        self._held: list[asyncio.Lock] = []  # the producers' locks the batch in flight holds
        self._batches = _Batches()
        # exactly_once: journal partition -> its transactional producer, for the batch in flight (``end``
        # forgets them; a rebalance, which replaces producers, waits for the batch). Looked up per record,
        # it cost ~1,300 instructions an entry (the transactional id built again each time).
        self._senders: dict[int, Any] = {}

    @property
    def transactional(self) -> bool:
        return self._exactly_once

    def _transactional_id(self, partition: int) -> str:
        group = self._app.assignor.group_for_topic(self._journal)
        return f"{self._app.conf.id}-{group}-{partition}"

    def can_send_for(self, partition: int) -> bool:
        """Whether records of this journal partition can be sent now: under exactly_once its
        transactional producer exists (Faust starts them while a new assignment is taken over)."""
        return not self._exactly_once or transaction_producer(self._app, self._transactional_id(partition)) is not None

    def _producer(self, partition: int) -> Any:
        producer = transaction_producer(self._app, self._transactional_id(partition))
        if producer is None:
            raise TransactionStateError(f"no transactional producer for journal partition {partition}")
        return producer

    def _sender(self, source_partition: int) -> Any:
        """The producer a record of this journal partition goes through (its transaction's, under exactly_once)."""
        if not self._exactly_once:
            return plain_producer(self._app)
        producer = self._senders.get(source_partition)
        if producer is None:
            producer = self._senders[source_partition] = self._producer(source_partition)
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
        self._senders.clear()
        self._batches.abandon()  # nothing is left after a successful batch; after a failure, drop it
        while self._held:
            self._held.pop().release()

    async def send(self, record: Outgoing) -> Awaitable[Delivered]:
        return await self._batches.send(self._sender(record.source_partition), record)

    def append(self, record: Outgoing) -> Awaitable[Delivered] | None:
        return self._batches.append(self._sender(record.source_partition), record)

    async def flush(self, early: bool = False) -> None:
        await self._batches.flush(early)

    async def commit(self, partitions: Sequence[int]) -> None:
        if not self._exactly_once:
            return
        # Each partition has its own transactional producer and coordinator state, so the
        # partitions commit side by side: one EndTxn round trip, not one after another.
        await asyncio.gather(*(self._commit(partition) for partition in partitions))

    async def _commit(self, partition: int) -> None:
        producer = self._producer(partition)
        await producer.commit_transaction()
        await producer.begin_transaction()
