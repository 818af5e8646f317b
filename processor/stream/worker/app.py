"""The Faust app: the engine agent over the journal, the patterns agent, two changelog-backed tables, web views.

The patterns agent (issue 11.2) consumes the repartition topic the engine agent
writes ``recurred`` observations to, keyed by signature key, and keeps the
cross-scope pattern rows in its own table; both agents run ``BatchProcessor``
with their ``Step`` (``steps``), so they share the durability order.

The agent is a thin shell. It takes each fetch of raw journal records whole
(the worker's consumer hands it over without Faust's per-event path:
``fetches``, ``workerapp``), hands it to ``BatchProcessor`` (engine, outputs
durable, changelog durable, local state -- see ``processing``) and only then
commits the group offsets (in the background; under exactly_once they are in
the partition's transaction). Anything unexpected while a batch is in flight
(an exception, a cancellation) ends the process at once with exit code 70 and
without committing the batch, and a restart is the recovery path anyway.

``recurrence worker`` is the one way to start a worker: it checks the topics
and the web port and builds the app from the settings models. There is no
``faust -A`` entry point (it skipped those checks and diverged in behaviour).
"""

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast

import faust
from aiokafka.errors import MessageSizeTooLargeError

from ....topics.names import PATTERNS_TABLE_NAME, TABLE_NAME
from ...engineconfig import EngineConfig
from ...exceptions import RecurrenceError
from ...gcpolicy import FullCollections, freeze_startup_objects
from ...websecurity import handler_args
from ...webtoken import Access
from ..batch.metrics import LiveReadings, Metrics
from ..batch.probes import ProbeInputs, readiness, rebalances, restore_progress
from ..batch.processing import BatchProcessor
from ..batch.steps import PatternStep
from ..batch.types import Entry, PartitionedState
from ..clients.faustcompat import crashed
from ..settings import KafkaConnection, StreamSettings
from .cluster import Cluster
from .fetches import FetchChannel, Fetched
from .journal import PartitionReader
from .sink import FaustSink
from .snapshots import Snapshots, SnapshotTarget
from .snapshottopic import KafkaSnapshotLog
from .tablestore import StateTable
from .views import PatternTable, ReadSurface, register
from .workerapp import WorkerApp

log = logging.getLogger("recurrence.stream")

EXIT_BATCH_ABORTED: Final = 70
AGENT_NAME: Final = "recurrence-engine"
PATTERNS_AGENT_NAME: Final = "recurrence-patterns"
REPORT_INTERVAL: Final = 15.0
CATCH_UP_INTERVAL: Final = 2.0
STALL_SECONDS: Final = 4.0
RECORD_TOO_LARGE: Final = (
    "the broker refused a record of this batch as larger than its topic's max.message.bytes; a restart "
    "would meet it again: raise that topic's limit in place (kafka-configs.sh --alter --add-config "
    "max.message.bytes=..., see docs/kafka.md, Topics), or for a changelog lower --changelog-record-bytes, "
    "then restart"
)
PRODUCER_BATCH_BYTES: Final = 512 * 1024
SNAPSHOT_CHECK_INTERVAL: Final = 2.0
#: How long the patterns agent collects recurred observations into one batch (its batches are not
#: latency-bound). Under exactly_once it shares each partition's transactional producer with the
#: engine agent (the topics are co-partitioned, so Faust keeps one producer per partition for both),
#: and a batch holds that producer for its whole transaction: run for every few observations, its
#: batches kept the engine's next batch waiting 44 ms of a 200 ms cycle at half load.
PATTERNS_BATCH_WITHIN: Final = 1.0


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
        self.config = EngineConfig(review_threshold=settings.review_threshold, pattern_scopes=settings.pattern_scopes)
        names = settings.topics
        self.names = names
        self.canonical_url = settings.canonical_url
        self.app = WorkerApp(
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
            # One fetch is one batch (``fetches``): this caps the entries per batch.
            broker_max_poll_records=settings.batch_max,
            # The sink appends a batch's outputs to one producer batch per topic partition
            # (``sink``): large batches, under the broker's default 1 MB per record batch.
            producer_max_batch_size=PRODUCER_BATCH_BYTES,
            producer_max_request_size=4 * PRODUCER_BATCH_BYTES,
            web_enabled=True,
            web_bind=settings.web_host,
            web_host=settings.web_host,
            web_port=settings.web_port,
            canonical_url=self.canonical_url,
            # The request line's limit and the quiet protocol logger (websecurity), as on `recurrence serve`.
            web_application_options={"handler_args": handler_args()},
        )
        self.journal = self._raw_topic(names.journal)
        self.table = self._state_table(TABLE_NAME, "recurrence engine state (one change set per journal entry)")
        self.cluster = Cluster(self.app, names.journal, names.changelog, self.table.name)
        self.recurred = self._raw_topic(names.recurred)
        self.patterns_table = self._state_table(
            PATTERNS_TABLE_NAME, "cross-scope pattern rows by signature key (one change set per batch)"
        )
        self.patterns_cluster = Cluster(self.app, names.recurred, names.patterns_changelog, self.patterns_table.name)
        outputs = {name: self._raw_topic(name) for name in (*names.outputs(), names.statistics, names.patterns)}
        outputs[names.recurred] = self.recurred
        outputs[names.changelog] = self.table.changelog_topic
        outputs[names.patterns_changelog] = self.patterns_table.changelog_topic
        exactly_once = settings.processing_guarantee == "exactly_once"
        self.reader = PartitionReader(settings.kafka, names.journal)
        self.changelog_reader = PartitionReader(settings.kafka, names.changelog)
        self.processor = BatchProcessor(
            topics=names,
            state=self.state,
            source=self.reader,
            sink=FaustSink(self.app, outputs, names.journal, exactly_once),
            config=self.config,
            metrics=self.metrics,
            changelog=self.changelog_reader,
        )
        self.patterns_reader = PartitionReader(settings.kafka, names.recurred)
        self.patterns_changelog_reader = PartitionReader(settings.kafka, names.patterns_changelog)
        self.metrics.patterns = Metrics()
        self.patterns_processor = BatchProcessor(
            topics=names,
            state=cast(PartitionedState, self.patterns_table.data),
            source=self.patterns_reader,
            sink=FaustSink(self.app, outputs, names.recurred, exactly_once),
            config=self.config,
            metrics=self.metrics.patterns,
            step=PatternStep(names, settings.pattern_scopes),
            changelog=self.patterns_changelog_reader,
        )
        for processor in (self.processor, self.patterns_processor):
            processor.changelog_record_bytes = settings.worker.changelog_record_bytes
            processor.catch_up_max = settings.batch_max  # a catch-up batch is capped like a fetched one
        self._wire_snapshots(settings)
        self.app.on_partitions_assigned.connect(self._assigned)
        worker = settings.worker
        self.app.agent(self.journal, name=AGENT_NAME)(
            self._agent(self.processor, names.journal, worker.batch_within, worker.batch_min)
        )
        self.app.agent(self.recurred, name=PATTERNS_AGENT_NAME)(
            self._agent(self.patterns_processor, names.recurred, PATTERNS_BATCH_WITHIN, settings.batch_max)
        )
        self.app.timer(REPORT_INTERVAL)(self._report)
        self.app.timer(CATCH_UP_INTERVAL)(self._catch_up)
        self._collections: FullCollections | None = None  # from the start (``_freeze_startup_objects``)
        self.app.task(self._freeze_startup_objects)
        self.app.task(self._watch_loop)
        self.app.on_before_shutdown.connect(self._close_reader)
        self._progress: dict[int, tuple[int | None, float]] = {}
        self._patterns_progress: dict[int, tuple[int | None, float]] = {}
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
                pattern_table=PatternTable(
                    state=cast(PartitionedState, self.patterns_table.data),
                    ready_partitions=self.patterns_cluster.ready_partitions,
                    owners=self.patterns_cluster.owners,
                ),
                connection=settings.kafka,
            ),
            Access(settings.web_token()),
        )
        self._last_report = (time.monotonic(), 0)

    @property
    def state(self) -> PartitionedState:
        return cast(PartitionedState, self.table.data)

    # -- the agents -------------------------------------------------------------------
    def _agent(
        self, processor: BatchProcessor, topic: str, within: float, min_records: int
    ) -> Callable[[Any], Awaitable[None]]:
        # The agent owns the topic's partitions (Faust subscribes, assigns, recovers and starts the
        # transactional producers for it), but its records arrive as whole fetches (``fetches``).
        channel = FetchChannel(topic)
        self.app.fetch_channels[topic] = channel
        exactly_once = self.settings.processing_guarantee == "exactly_once"

        def durable(entries: list[Entry]) -> None:
            """The batch is durable: what follows it (never for a batch that is not)."""
            if not exactly_once:  # under exactly_once the offsets went into each partition's transaction
                offsets = {e.partition: e.offset + 1 for e in entries}
                channel.commit_soon(offsets, lambda o: self.app.commit_journal(topic, o))
            if self._collections is not None:
                self._collections.between_batches()

        async def settle(tail: Awaitable[object], entries: list[Entry]) -> None:
            """A pipelined batch, once its durability in the background has ended."""
            try:
                await tail
            except (asyncio.CancelledError, Exception) as error:  # every failure exits (``_failed``)
                self._failed(error, entries)
            else:
                durable(entries)
            finally:
                channel.done()

        settling_tasks: set[asyncio.Future[None]] = set()  # referenced until done (the loop holds tasks weakly)

        async def agent(stream: Any) -> None:
            while True:
                fetched = await channel.get(self.settings.batch_max, within, min_records)
                processor.metrics.stage["wait"].observe(channel.waited)
                settling = False
                try:
                    entries = self._entries(fetched, topic)
                    if not entries:
                        continue
                    try:
                        if exactly_once:
                            await processor.process(entries)
                        else:
                            # Made durable in the background while the next batch's engine runs; the
                            # channel stays busy until then, so a rebalance waits for it (``quiesce``).
                            tail = await processor.process_pipelined(entries)
                            settling_tasks.add(task := asyncio.ensure_future(settle(tail, entries)))
                            task.add_done_callback(settling_tasks.discard)
                            settling = True
                            continue
                    except (asyncio.CancelledError, Exception) as error:  # every failure exits (``_failed``)
                        self._failed(error, entries)
                    durable(entries)
                finally:
                    if not settling:
                        channel.done()

        return agent

    def _failed(self, error: BaseException, entries: list[Entry]) -> None:
        """A batch failed: exit without acknowledging it (never commit a batch that is not durable)."""
        if isinstance(error, asyncio.CancelledError):
            self._abort("cancelled while a batch was in flight", entries)
        elif isinstance(error, RecurrenceError):  # a refusal with an operator's message: one line, its exit code
            self._abort(str(error), entries, error.exit_code)
        elif isinstance(error, MessageSizeTooLargeError):  # the broker refused a record: the same on every restart
            self._abort(RECORD_TOO_LARGE, entries)
        else:
            log.critical("batch failed: %s", type(error).__name__, exc_info=error)
            self._abort(f"{type(error).__name__} while a batch was in flight", entries)

    def _entries(self, fetched: Fetched, topic: str) -> list[Entry]:
        """A fetch's records as entries, only of partitions this worker still owns in this generation."""
        if fetched.generation != self.app.consumer_generation_id:
            return []  # fetched before a rebalance; the new assignment seeks and the state's position decides
        assigned = {tp.partition for tp in self.app.consumer.assignment() if tp.topic == topic}
        return [
            Entry(partition, record.offset, record.value if record.value is not None else b"",
                  record.timestamp / 1000 if record.timestamp is not None else None)
            for partition, records in fetched.records.items() if partition in assigned
            for record in records
        ]

    def _raw_topic(self, name: str) -> Any:
        """A topic of raw bytes keys and values with the journal's partition count."""
        return self.app.topic(
            name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
            partitions=self.settings.partitions,
        )

    def _state_table(self, name: str, help_text: str) -> StateTable:
        """A changelog-backed table of change sets (see ``tablestore``), registered with the app."""
        table = StateTable(
            self.app, name=name, key_type=bytes, value_type=bytes, partitions=self.settings.partitions,
            beacon=self.app.tables.beacon, help=help_text,
        )
        self.app.tables.add(table)
        return table

    # -- snapshots (issue 8: restore bounded by state size; see ``snapshots``) -------------
    def _wire_snapshots(self, settings: StreamSettings) -> None:
        worker = settings.worker
        self.snapshots = Snapshots(KafkaSnapshotLog(settings.kafka, self.names.snapshots),
                                   worker.snapshot_interval, worker.snapshot_batches, self.metrics.snapshots)
        tables = (self.table, self.patterns_table)
        for table in tables:
            table.snapshots = self.snapshots  # the store loads a snapshot before recovery
        self.metrics.snapshots.replayed = lambda: sum(int(getattr(t.data, "replayed", 0)) for t in tables)
        self._snapshot_targets = [
            SnapshotTarget(lambda: self.table.data, self.cluster.ready_partitions),
            SnapshotTarget(lambda: self.patterns_table.data, self.patterns_cluster.ready_partitions),
        ]
        if self.snapshots.shipping:
            self.app.timer(SNAPSHOT_CHECK_INTERVAL)(self._ship_snapshots)

    async def _ship_snapshots(self) -> None:
        try:
            await self.snapshots.tick(self._snapshot_targets)
        except Exception as error:  # an optimisation only: a failed upload has no manifest; the next tick retries
            log.warning("shipping a snapshot failed: %s; retrying later", type(error).__name__, exc_info=error)

    async def _close_reader(self, app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        await self.snapshots.topic.close()
        await self.reader.close()
        await self.patterns_reader.close()
        await self.changelog_reader.close()
        await self.patterns_changelog_reader.close()

    async def _assigned(self, app: Any, /, *args: Any, **kwargs: Any) -> None:
        self.processor.assigned()
        self.patterns_processor.assigned()

    async def _catch_up(self) -> None:
        """Entries the stream has not delivered for a while although the topic has them: run them."""
        await self._catch_up_agent(self.cluster, self.processor, self._progress)
        await self._catch_up_agent(self.patterns_cluster, self.patterns_processor, self._patterns_progress)

    async def _catch_up_agent(
        self, cluster: Cluster, processor: BatchProcessor, progress_by_partition: dict[int, tuple[int | None, float]]
    ) -> None:
        ready = cluster.ready_partitions()
        now = time.monotonic()
        for tp in cluster.journal_partitions():
            if tp.partition not in ready:
                progress_by_partition.pop(tp.partition, None)
                continue
            highwater = cluster.highwater(tp)
            position = processor.position(tp.partition)
            progress, stuck = stalled(progress_by_partition.get(tp.partition), position, highwater, now, STALL_SECONDS)
            progress_by_partition[tp.partition] = progress
            if not stuck or highwater is None:
                continue
            sink = processor.sink
            if isinstance(sink, FaustSink) and not sink.can_send_for(tp.partition):
                # An assignment is being taken over and the partition's transactional producer is not
                # started yet (catching up then failed, and the worker exited 70): the next tick retries.
                log.info("partition %d: catching up waits for its transactional producer", tp.partition)
                continue
            try:
                # Counted as a batch in flight, from before its first await: a rebalance that begins
                # meanwhile waits for it before Faust stops the transactional producers it sends through.
                with self.app.fetch_channels[cluster.journal].running():
                    await processor.catch_up(tp.partition, highwater)
            except asyncio.CancelledError:
                self._abort("cancelled while catching up", [])
            except Exception as error:  # as for a batch: never go on after a half-done catch-up
                log.critical("catching up failed: %s", type(error).__name__, exc_info=error)
                self._abort(f"{type(error).__name__} while catching up", [])
            progress_by_partition[tp.partition] = (processor.position(tp.partition), time.monotonic())

    async def _freeze_startup_objects(self) -> None:
        """Keep the objects built at startup out of every later garbage collection.

        A full collection walks every tracked object; at startup that is ~100k of them (modules,
        Faust, aiokafka, pydantic), and the worker measured 50-600 ms per full collection
        (``recurrence_gc_pause_seconds``), one every few seconds while the heap grows: the
        event loop, and every batch's outputs, stand still meanwhile. Frozen objects are never
        scanned again (they are still freed by reference counting). Objects created later are
        collected young as before; full collections run between batches (``gcpolicy``).
        """
        self._collections = freeze_startup_objects()
        log.info("froze %d startup objects out of garbage collection", gc.get_freeze_count())

    async def _watch_loop(self) -> None:  # a method without arguments: Faust passes the app to one with any
        await self.metrics.watch_event_loop()

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
        return self.cluster.journal_partitions()

    def _ready_partitions(self) -> set[int]:
        return self.cluster.ready_partitions()

    def _owners(self) -> dict[str, set[int]]:
        return self.cluster.owners()

    def _positions(self) -> dict[int, int]:
        """Durable journal position per assigned partition (absent: nothing applied there yet)."""
        found: dict[int, int] = {}
        for tp in self._journal_tps():
            position = self.processor.position(tp.partition)
            if position is not None:
                found[tp.partition] = position
        self.metrics.positions.update(found)
        return found

    def _lag(self, positions: Mapping[int, int] | None = None) -> dict[int, int]:
        positions = self._positions() if positions is None else positions
        lag: dict[int, int] = {}
        for tp in self._journal_tps():
            highwater = self.cluster.highwater(tp)
            if highwater is None or highwater < 0:
                continue
            lag[tp.partition] = max(0, highwater - positions.get(tp.partition, 0))
        return lag

    def _probe(self) -> ProbeInputs:
        positions = self._positions()
        return ProbeInputs(
            agent_crashed=any(crashed(agent) for agent in self.app.agents.values()),
            rebalancing=bool(self.app.rebalancing),
            recovered=bool(cast(Any, self.app.tables).recovery.completed.is_set() and not self.app.in_recovery),
            partitions=sorted(tp.partition for tp in self._journal_tps()),
            ready_partitions=sorted(self._ready_partitions()),
            lag=self._lag(positions),
            max_lag=self.settings.worker.ready_max_lag,
            details={
                # Durable journal position per assigned partition: what progress checks poll (cheap,
                # unlike rendering /metrics).
                "positions": {str(p): n for p, n in sorted(positions.items())},
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


def stalled(
    progress: tuple[int | None, float] | None, position: int | None, highwater: int | None, now: float, seconds: float
) -> tuple[tuple[int | None, float], bool]:
    """The stall rule: entries exist beyond ``position`` and it has not moved for ``seconds``.

    ``progress`` is (the position last seen, since when); returns the new
    progress and whether the partition is stuck (then its entries are read
    directly from the journal).
    """
    if highwater is None or highwater <= (position or 0):
        return (position, now), False  # nothing waiting
    if progress is None or progress[0] != position:
        return (position, now), False  # it moved: start timing again
    return progress, now - progress[1] >= seconds


def create_app(settings: StreamSettings) -> Any:
    return RecurrenceService(settings).app
