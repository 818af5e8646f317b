"""The Faust app class the worker runs: ``faust.App`` with two exactly_once corrections.

Both concern a partition that changes owner under ``processing_guarantee=
"exactly_once"`` (a worker joins, dies, or wakes up from a pause); without
them such a worker crashed with ``ConsistencyError`` or reused a fenced
producer (robinhood/faust#658). Each class below says what it corrects and
why. They override private *methods* of faust-streaming (``OVERRIDDEN``,
checked by ``tests/test_faustcompat.py`` on every upgrade) and reach private
attributes only through ``faustcompat``.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Final

import faust
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from recurrence.processor.stream.faustcompat import thread_consumer, transaction_locks, transaction_producers

# (class, method) pairs overridden or called here; the test checks each still exists.
OVERRIDDEN: Final = (
    (faust.App, "_new_transport"),
    (faust_aiokafka.Consumer, "_new_consumer_thread"),
    (faust_aiokafka.AIOKafkaConsumerThread, "_highwaters"),
    (faust_aiokafka.AIOKafkaConsumerThread, "_ensure_consumer"),
    (faust_consumer.TransactionManager, "on_rebalance"),
)


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, with changelog high watermarks that are read, not remembered.

    Table recovery asks ``highwaters()`` for the end of each changelog
    partition it restores. Under exactly_once Faust answers with aiokafka's
    ``last_stable_offset(tp)``: the LSO the *last fetch* of that partition
    happened to return -- ``None`` (taken as -1) for a partition this consumer
    has not fetched since the assignment, and stale for one it fetched before
    another worker wrote to it. After a rebalance the recovery then compares
    the offset its local database recorded with -1 and stops the worker with
    ``ConsistencyError`` ("persisted offset ... is higher than the last
    offset"), or, worse, believes a stale end and skips change sets another
    owner committed meanwhile (robinhood/faust#658, faust-streaming#158).

    Here the answer is always a ListOffsets request, which on this
    read_committed consumer returns the partition's current last stable
    offset. It is final by the time recovery asks: Faust starts the new
    owner's transactional producers (``transactions.on_rebalance``) before
    the tables' recovery, and a producer's first ``begin_transaction`` waits
    for InitProducerId, which the coordinator answers only once the previous
    owner's open transaction under the same transactional id (a killed or
    paused worker's) is fenced and aborted -- its markers written, the LSO
    past it.
    """

    async def _highwaters(self, partitions: Sequence[Any]) -> Mapping[Any, int]:
        offsets: Mapping[Any, int] = await thread_consumer(self).end_offsets(list(partitions))
        return offsets


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _TransactionManager(faust_consumer.TransactionManager):
    """Faust's transaction manager, but every assignment starts each partition's producer afresh.

    Faust keeps a transactional producer per journal partition across
    rebalances and stops only those of partitions it computes as revoked --
    from its own record of the previous assignment, which misses partitions
    that stay assigned as standbys (seen: a worker that lost partition 1 to a
    joining worker kept its producer for it). When such a partition comes
    back, Faust calls ``begin_transaction`` on the old producer, which
    another owner has fenced meanwhile: no InitProducerId is sent, so the
    previous owner's open transaction is not aborted, and the first batch
    fails with ProducerFenced. A worker that was paused through a whole
    generation (a zombie) has the same stale producers.

    Here, before Faust starts the producers of an assignment, every existing
    one is stopped (under its lock, so Faust's timed commit is never cut in
    half), so each assigned partition gets a new producer whose
    InitProducerId fences any other holder of the transactional id and
    aborts its open transaction before recovery reads the changelog. A
    rebalance costs one InitProducerId per partition; stream_wait_empty has
    already let the batch in flight finish, and between batches no
    transaction holds records.
    """

    async def on_rebalance(self, assigned: Any, revoked: Any, newly_assigned: Any) -> None:
        producers = transaction_producers(self.producer)
        locks = transaction_locks(self.producer)
        for transactional_id in sorted(producers):
            lock = locks.get(transactional_id)
            if lock is None:
                stale = producers.pop(transactional_id, None)
            else:
                async with lock:
                    stale = producers.pop(transactional_id, None)
            if stale is not None:
                await stale.stop()
        await super().on_rebalance(assigned, revoked, newly_assigned)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    TransactionManager = _TransactionManager


class WorkerApp(faust.App):
    """``faust.App`` on the aiokafka transport, with the two exactly_once corrections above:
    changelog high watermarks read fresh, and fresh transactional producers on every assignment."""

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)
