"""The Faust app: one agent over the journal, one changelog-backed RocksDB table, web views.

The agent is a thin shell. It takes batches of raw journal records
(``take_events``), hands them to ``BatchProcessor`` (engine, outputs durable,
changelog durable, local state -- see ``processing``) and only then lets Faust
acknowledge them. Anything unexpected while a batch is in flight (an exception,
a cancellation) ends the process at once with exit code 70 and without
acknowledging the batch: Faust would otherwise acknowledge and commit the
batch's offsets on the way out, and a restart is the recovery path anyway.

``recurrence worker`` is the one way to start a worker: it checks the topics
and the web port and builds the app from the settings models. There is no
``faust -A`` entry point (it skipped those checks and diverged in behaviour).
"""

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Final, cast

import faust
from aiokafka import TopicPartition

from recurrence.processor.engine import EngineConfig
from recurrence.processor.exceptions import RecurrenceError
from recurrence.processor.stream.journal import JournalReader
from recurrence.processor.stream.metrics import LiveReadings, Metrics
from recurrence.processor.stream.probes import ProbeInputs, readiness, rebalances, restore_progress
from recurrence.processor.stream.processing import BatchProcessor
from recurrence.processor.stream.settings import TABLE_NAME, KafkaConnection, StreamSettings
from recurrence.processor.stream.tablestore import StateTable
from recurrence.processor.stream.types import Delivered, Entry, PartitionedState
from recurrence.processor.stream.views import ReadSurface, register

log = logging.getLogger("recurrence.stream")

EXIT_BATCH_ABORTED: Final = 70
AGENT_NAME: Final = "recurrence-engine"
REPORT_INTERVAL: Final = 15.0
CATCH_UP_INTERVAL: Final = 2.0
STALL_SECONDS: Final = 4.0


def faust_credentials(connection: KafkaConnection) -> Any:
    """``broker_credentials`` for faust.App, or None for PLAINTEXT."""
    context = connection.ssl_context()
    if connection.uses_sasl:
        return faust.SASLCredentials(
            username=connection.sasl_username,
            password=connection.password(),
            mechanism=connection.sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


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

    def __init__(self, app: Any, topics: Mapping[str, Any], journal: str, exactly_once: bool) -> None:
        self._app = app
        self._topics = topics
        self._journal = journal
        self._exactly_once = exactly_once
        self._held: list[Any] = []

    def _transactional_id(self, partition: int) -> str:
        group = self._app.assignor.group_for_topic(self._journal)
        return f"{self._app.conf.id}-{group}-{partition}"

    def _producer(self, partition: int) -> Any:
        producer = self._app.producer._transaction_producers.get(self._transactional_id(partition))
        if producer is None:
            raise RuntimeError(f"no transactional producer for journal partition {partition}")
        return producer

    async def begin(self, partitions: Sequence[int]) -> None:
        # Faust commits every transaction on its own timer too; holding its per-producer
        # locks for the whole batch keeps that commit from landing mid-batch (it would make
        # some outputs visible without the change sets that record them).
        if not self._exactly_once:
            return
        locks = self._app.producer._trn_locks
        for partition in sorted(set(partitions)):
            lock = locks[self._transactional_id(partition)]
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


class RecurrenceService:
    """Builds and wires the Faust app for one set of settings."""

    def __init__(self, settings: StreamSettings) -> None:
        self.settings = settings
        self.metrics = Metrics(live=LiveReadings(
            lag=self._lag,
            restore=lambda: restore_progress(self.app, self.names.changelog),
            rebalances=lambda: rebalances(self.app),
            ready=lambda: readiness(self._probe()).ok,
        )).with_process_metrics()
        self.config = EngineConfig(review_threshold=settings.review_threshold)
        names = settings.topics
        self.names = names
        self.canonical_url = settings.canonical_url
        self.app = faust.App(
            settings.group_id,
            broker=settings.kafka.faust_broker(),
            broker_credentials=faust_credentials(settings.kafka),
            store="rocksdb://",
            datadir=str(settings.datadir),
            processing_guarantee=settings.processing_guarantee,
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication,
            # Topics are code (``recurrence topics apply``); Faust must never create one
            # with its own defaults (a compacted changelog, a 1-partition journal).
            topic_allow_declare=False,
            topic_disable_leader=True,
            table_standby_replicas=settings.standby_replicas,
            consumer_auto_offset_reset="earliest",
            consumer_group_instance_id=settings.instance_id,
            broker_session_timeout=settings.session_timeout,
            broker_heartbeat_interval=max(0.5, settings.session_timeout / 5),
            producer_acks=-1,
            stream_wait_empty=True,
            web_enabled=True,
            web_bind=settings.web_host,
            web_host=settings.web_host,
            web_port=settings.web_port,
            canonical_url=self.canonical_url,
        )
        self.journal = self.app.topic(
            names.journal,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )
        self.table = StateTable(
            self.app,
            name=TABLE_NAME,
            key_type=bytes,
            value_type=bytes,
            partitions=settings.partitions,
            beacon=self.app.tables.beacon,
            help="recurrence engine state (one change set per journal entry)",
        )
        self.app.tables.add(self.table)
        outputs = {
            name: self.app.topic(
                name,
                key_type=bytes,
                value_type=bytes,
                key_serializer="raw",
                value_serializer="raw",
                partitions=settings.partitions,
            )
            for name in names.outputs()
        }
        outputs[names.changelog] = self.table.changelog_topic
        self.reader = JournalReader(settings.kafka, names.journal)
        self.processor = BatchProcessor(
            topics=names,
            state=self.state,
            source=self.reader,
            sink=FaustSink(self.app, outputs, names.journal, settings.processing_guarantee == "exactly_once"),
            config=self.config,
            metrics=self.metrics,
        )
        self.app.agent(self.journal, name=AGENT_NAME)(self._agent)
        self.app.timer(REPORT_INTERVAL)(self._report)
        self.app.timer(CATCH_UP_INTERVAL)(self._catch_up)
        self.app.on_before_shutdown.connect(self._close_reader)
        self._progress: dict[int, tuple[int | None, float]] = {}
        register(
            self.app,
            ReadSurface(
                state=self.state,
                config=self.config,
                metrics=self.metrics,
                partitions=settings.partitions,
                my_url=self.canonical_url,
                ready_partitions=self._ready_partitions,
                owners=self._owners,
                lag=self._lag,
                probe=self._probe,
            ),
        )
        self._last_report = (time.monotonic(), 0)

    @property
    def state(self) -> PartitionedState:
        return cast(PartitionedState, self.table.data)

    # -- the agent --------------------------------------------------------------------
    async def _agent(self, stream: Any) -> None:
        settings = self.settings
        async for events in stream.take_events(settings.batch_max, within=settings.batch_within):
            entries = [
                Entry(e.message.partition, e.message.offset, e.message.value if e.message.value is not None else b"",
                      e.message.timestamp)
                for e in events
            ]
            try:
                await self.processor.process(entries)
            except asyncio.CancelledError:
                self._abort("cancelled while a batch was in flight", entries)
            except RecurrenceError as error:  # a refusal with an operator's message: one line, its exit code
                self._abort(str(error), entries, error.exit_code)
            except Exception as error:  # any failure: never acknowledge a batch that is not durable
                log.critical("batch failed: %s", type(error).__name__, exc_info=error)
                self._abort(f"{type(error).__name__} while a batch was in flight", entries)

    async def _close_reader(self, app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        await self.reader.close()

    async def _catch_up(self) -> None:
        """Entries the stream has not delivered for a while although the journal has them: run them."""
        ready = self._ready_partitions()
        now = time.monotonic()
        for tp in self._journal_tps():
            if tp.partition not in ready:
                self._progress.pop(tp.partition, None)
                continue
            try:
                highwater = self.app.consumer.highwater(tp)
            except Exception:
                continue
            position = self.processor.position(tp.partition)
            if highwater is None or highwater <= (position or 0):
                self._progress[tp.partition] = (position, now)
                continue
            seen, since = self._progress.setdefault(tp.partition, (position, now))
            if seen != position:
                self._progress[tp.partition] = (position, now)
                continue
            if now - since < STALL_SECONDS:
                continue
            try:
                await self.processor.catch_up(tp.partition, highwater)
            except asyncio.CancelledError:
                self._abort("cancelled while catching up", [])
            except Exception as error:
                log.critical("catching up failed: %s", type(error).__name__, exc_info=error)
                self._abort(f"{type(error).__name__} while catching up", [])
            self._progress[tp.partition] = (self.processor.position(tp.partition), time.monotonic())

    def _abort(self, why: str, entries: list[Entry], code: int = EXIT_BATCH_ABORTED) -> None:
        first = {e.partition: e.offset for e in reversed(entries)}
        log.critical(
            "%s; exiting without acknowledging %d entries (first offsets %s); a restart resumes from them",
            why,
            len(entries),
            ", ".join(f"p{p}@{o}" for p, o in sorted(first.items())),
        )
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)

    # -- read surface helpers -------------------------------------------------------------
    def _journal_tps(self) -> set[Any]:
        try:
            actives = self.app.assignor.assigned_actives()
        except Exception:  # not assigned yet
            return set()
        return {tp for tp in actives if tp.topic == self.names.journal}

    def _ready_partitions(self) -> set[int]:
        if self.app.rebalancing or self.app.in_recovery:
            return set()
        if not cast(Any, self.app.tables).recovery.completed.is_set():
            return set()
        return {tp.partition for tp in self._journal_tps()}

    def _owners(self) -> dict[str, set[int]]:
        owners: dict[str, set[int]] = {}
        try:
            metadata = self.app.router.table_metadata(self.table.name)
        except Exception:
            return owners
        for url, topics in metadata.items():
            partitions = topics.get(self.names.changelog, [])
            if partitions:
                owners[str(url)] = set(partitions)
        return owners

    def _lag(self) -> dict[int, int]:
        consumer = self.app.consumer
        lag: dict[int, int] = {}
        for tp in self._journal_tps():
            try:
                highwater = consumer.highwater(tp)
            except Exception:
                continue
            if highwater is None or highwater < 0:
                continue
            position = self.processor.position(tp.partition)
            if position is None:  # nothing applied yet on this partition
                position = 0
            else:
                self.metrics.positions[tp.partition] = position
            lag[tp.partition] = max(0, highwater - position)
        return lag

    def _probe(self) -> ProbeInputs:
        agent = next(iter(self.app.agents.values()), None)
        crashed_event = getattr(agent, "_crashed", None)
        return ProbeInputs(
            agent_crashed=bool(crashed_event is not None and crashed_event.is_set()),
            rebalancing=bool(self.app.rebalancing),
            recovered=bool(cast(Any, self.app.tables).recovery.completed.is_set() and not self.app.in_recovery),
            partitions=sorted(tp.partition for tp in self._journal_tps()),
            ready_partitions=sorted(self._ready_partitions()),
            lag=self._lag(),
            max_lag=self.settings.worker.ready_max_lag,
            details={
                "app_id": self.settings.group_id,
                "url": self.canonical_url,
                "entries_processed": self.metrics.entries,
                "processing_guarantee": self.settings.processing_guarantee,
            },
        )

    async def _report(self) -> None:
        then, entries_then = self._last_report
        now = time.monotonic()
        done = self.metrics.entries - entries_then
        self._last_report = (now, self.metrics.entries)
        if done == 0 and entries_then > 0:
            return
        lag = self._lag()
        log.info(
            "processed %d entries (%.0f/s), total %d; records %s; dead letters %s; lag %d on partitions %s",
            done,
            done / max(now - then, 1e-9),
            self.metrics.entries,
            dict(sorted(self.metrics.records.items())),
            dict(sorted(self.metrics.dead_letters.items())),
            sum(lag.values()),
            sorted(lag),
        )


def create_app(settings: StreamSettings) -> Any:
    return RecurrenceService(settings).app
