"""The Faust app class the worker runs: ``faust.App`` with two exactly_once corrections and a batch consumer.

Both concern a partition that changes owner under ``processing_guarantee=
"exactly_once"`` (a worker joins, dies, or wakes up from a pause); without
them such a worker crashed with ``ConsistencyError`` or reused a fenced
producer (robinhood/faust#658). Each class below says what it corrects and
why. Every faust-streaming method they override or call beyond its public API
is declared in ``faustcompat.MEMBERS`` (checked by ``tests/stream/test_faustcompat.py``
on every upgrade), and private attributes are reached only through
``faustcompat``.

The consumer also hands each fetch of the agents' topics to its agent whole
(``fetches``) instead of record by record; see ``_Consumer``.
"""

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, Final

import faust
from aiokafka.errors import TransactionalIdAuthorizationFailed
from faust.tables import TableManager
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from ..clients.faustcompat import (
    buffered_partitions,
    new_transaction_producer,
    read_offsets,
    set_fetch_max_wait,
    shorten_recovery_wait,
    thread_consumer,
    transaction_locks,
    transaction_producers,
)
from .fetches import FetchChannel, Fetched
from .webserver import SurfaceWeb

#: How long a fetch may wait at the broker for data (Faust fixes 1500 ms; see ``_ConsumerThread``).
FETCH_MAX_WAIT_MS: Final = 100


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

    def _create_worker_consumer(self, transport: Any) -> Any:
        """Faust's consumer, but a fetch waits at most ``FETCH_MAX_WAIT_MS`` for data, not Faust's fixed 1.5 s.

        aiokafka leaves partitions with fetched records not yet taken out of the next fetch
        request, and has one request in flight per broker. With the journal's records
        waiting for the agent, the next request holds only partitions without new data --
        under exactly_once the repartition topic, whose open transactions a read_committed
        fetch cannot return -- so the broker held it for the whole wait, and the journal's
        next records with it: outputs 1-2 s late at half load (bench-kafka's latency runs).
        """
        consumer = super()._create_worker_consumer(transport)
        set_fetch_max_wait(consumer, FETCH_MAX_WAIT_MS)
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    """Faust's consumer, but a fetch of an agent's topic goes to the agent whole.

    Faust's ``_drain_messages`` turns every fetched record into a Message, runs
    the Conductor callback through ``wait_first`` (four futures) and lets the
    stream wrap it in an Event and ack it: ~120 µs of CPU per record here,
    more than the engine's cost per entry. Here each fetch's records of a
    topic with a ``FetchChannel`` (the journal, the repartition topic) are put
    on that channel as one item, tagged with the consumer generation; records
    of every other topic (the tables' changelogs, during recovery and for
    standbys) still take Faust's path, so Faust's Recovery is unchanged.

    Nothing of a batched topic is ever a Faust event, so Faust's acks and
    timed commits never see it: the agent commits the group offsets itself
    (``commit_journal``, after each batch is durable, under both guarantees),
    and ``wait_empty``, which
    Faust awaits before it revokes partitions and stops the transactional
    producers, waits for the agents' batches in flight.
    """

    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    @property
    def channels(self) -> dict[str, FetchChannel]:
        channels: dict[str, FetchChannel] = getattr(self.app, "fetch_channels", {})
        return channels

    async def commit_journal(self, topic: str, offsets: Mapping[int, int]) -> bool:
        """Commit the group offsets of a batched topic (only partitions still assigned are committed).

        Under exactly_once too, after each batch's transactions have committed, and outside them
        (``sink.FaustSink``): Faust's ``_commit_offsets`` would commit the transactional producers
        there, so the consumer's plain group commit is called instead. A commit from a worker that
        lost the partitions meanwhile is refused by the group coordinator (stale generation).
        """
        found = {self._new_topicpartition(topic, partition): offset for partition, offset in offsets.items()}
        if self.in_transaction:
            assigned = self.assignment()
            mine = {tp: offset for tp, offset in found.items() if tp in assigned}
            return bool(mine) and bool(await self._commit(mine))
        committed: bool = await self._commit_offsets(found)
        return committed

    async def wait_empty(self) -> None:
        for channel in self.channels.values():
            await channel.quiesce()
        await super().wait_empty()

    async def _drain_messages(self, fetcher: Any) -> None:  # as Faust's, minus the per-record path
        channels = self.channels
        callback = self.callback
        offsets_read = read_offsets(self)
        monitor = self.app.monitor
        try:
            while not (self.should_stop or fetcher.should_stop):
                records, active = await self._wait_next_records(1.0)
                # Faust's reason, kept: getmany can return at once for a long time, never yielding.
                await self.sleep(0)
                if records is None or self.should_stop:
                    continue
                if not self.flow_active:
                    # Fetched while a rebalance stopped the flow: seek back, as Faust's getmany does.
                    try:
                        await self.perform_seek()
                    except Exception as error:
                        self.log.warning("seek while the flow is stopped failed: %r", error)
                    continue
                generation = self.app.consumer_generation_id
                batches: dict[str, dict[int, Sequence[Any]]] = {}
                now = time.monotonic()
                for tp, fetched in records.items():
                    if not fetched or not (active is None or tp in active or tp in buffered_partitions(self)):
                        continue
                    monitor.track_tp_end_offset(tp, self.highwater(tp))
                    channel = channels.get(tp.topic)
                    if channel is not None:
                        batches.setdefault(tp.topic, {})[tp.partition] = fetched
                        offsets_read[tp] = fetched[-1].offset
                        monitor.stream_inbound_time[tp] = now  # Faust's idle-stream check reads it
                        continue
                    for record in fetched:
                        if not self.flow_active or self.app.consumer_generation_id != generation:
                            break
                        r_offset = offsets_read.get(tp)
                        if r_offset is None or record.offset >= r_offset:
                            await self.wait_first(callback(self._to_message(tp, record)), self.suspend_flow.wait())
                            offsets_read[tp] = record.offset
                for topic, by_partition in batches.items():
                    await self.wait_first(
                        channels[topic].put(Fetched(generation, by_partition)), self.suspend_flow.wait()
                    )
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            if isinstance(self.app, WorkerApp):
                self.app.on_refusal(exc)  # an ACL revoked: ends the process with its line (exit 2)
            self.log.exception("Drain messages raised: %r", exc)
            raise


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

    async def _start_transactions(self, tids: Iterable[str]) -> None:
        """Start each id's producer first, as Faust would, but stop on a refusal of the transactional id.

        Faust logs any failure to start a transactional producer as a warning and goes on without it;
        the first batch then failed with ``KeyError: '<id>'`` and a traceback. A principal without
        WRITE on the transactional ids (ACLs printed for at_least_once, a worker run under
        exactly_once) now ends the process with the refusal's line, naming the id and the acls command.
        """
        wanted = list(tids)
        producers, locks = transaction_producers(self.producer), transaction_locks(self.producer)
        for transactional_id in wanted:
            if transactional_id in producers:
                continue
            producer = new_transaction_producer(self.producer, transactional_id)
            try:
                await producer.start()
            except TransactionalIdAuthorizationFailed as refused:
                await producer.stop()
                app = self.app
                if isinstance(app, WorkerApp):
                    app.on_refusal(refused)  # ends the process with the line (exit 2)
                raise
            producers[transactional_id] = producer
            locks[transactional_id] = asyncio.Lock()
        await super()._start_transactions(wanted)


class WorkerTableManager(TableManager):
    """Faust's table manager, without the second it sleeps before it starts the tables.

    Faust sleeps 1 s first so that tables declared after the app starts (at a module's
    import, say) still make it into the subscription. The worker declares both of its
    tables while it is built, before the app starts (``build.state_table``), so that second
    was only added to every start: the subscription, and with it the assignment and
    /readyz, waited for it (a cold start to ready took 2.1 s on an empty topic, 1.0 s of it
    this sleep).
    """

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    TransactionManager = _TransactionManager


class WorkerApp(faust.App):
    """``faust.App`` on the aiokafka transport, with the two exactly_once corrections above:
    changelog high watermarks read fresh, and fresh transactional producers on every assignment."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        shorten_recovery_wait()  # exactly_once restarts: ~9 s of Faust's recovery timeout less
        #: Topics whose fetches go to their agent whole, by topic name (``_Consumer``).
        self.fetch_channels: dict[str, FetchChannel] = {}
        #: Handed what stopped the consumer; the service ends the process when it is a refusal
        #: (a group or topic ACL revoked), where Faust would crash with a traceback (exit 1).
        self.on_refusal: Callable[[BaseException], None] = lambda error: None

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)

    def _crash(self, reason: BaseException) -> None:
        """mode marks every service above a crashed one as crashed through this (the consumer thread's
        failed offset commit, the fetcher's failed fetch): a refusal -- an ACL revoked while the worker
        runs -- ends the process with its line and exit 2, where Faust would stop with exit 1."""
        self.on_refusal(reason)
        super()._crash(reason)

    @cached_property
    def web(self) -> SurfaceWeb:  # the read surface's routes only (``webserver``)
        return SurfaceWeb(self)

    async def commit_journal(self, topic: str, offsets: Mapping[int, int]) -> bool:
        """Commit the group offsets of a topic whose fetches go to its agent whole (at-least-once)."""
        consumer = self.consumer
        assert isinstance(consumer, _Consumer), "the worker app always runs on _Transport"
        return await consumer.commit_journal(topic, offsets)
