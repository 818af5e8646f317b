"""The worker assembled from its settings: ``build_worker`` hands each piece only what it needs.

The Faust app (``worker_app``: Faust's group membership, assignment, table
recovery, standbys and web server, configured from the settings), the two
lanes (``build_lanes``: the engine over the journal and the patterns agent
over the repartition topic, each a topic, a state table, a view of the group
and a batch processor with its sink and direct readers), the snapshots, and
the read surface; then ``RecurrenceService`` (``app``) runs them. The calls on
the Faust app come in the order Faust registers topics, tables, timers, tasks
and agents, and starts them in.
"""

from dataclasses import dataclass
from typing import Any, Final, cast

import faust

from ....topics.names import PATTERNS_TABLE_NAME, TABLE_NAME
from ...core.engineconfig import EngineConfig
from ...web.websecurity import handler_args
from ...web.webtoken import Access
from ..batch.metrics import LiveReadings, Metrics
from ..batch.probes import readiness, rebalances, restore_progress
from ..batch.processing import BatchIO, BatchLimits, BatchProcessor
from ..batch.steps import EngineStep, PatternStep
from ..batch.types import PartitionedState, Step
from ..settings import KafkaConnection, StreamSettings
from .app import Lane, RecurrenceService, ServiceOptions
from .cluster import Cluster
from .journal import PartitionReader
from .sink import FaustSink
from .snapshots import Snapshots
from .snapshottopic import KafkaSnapshotLog
from .tablestore import StateTable
from .views import PatternTable, ReadSurface, register
from .workerapp import WorkerApp, WorkerTableManager

AGENT_NAME: Final = "recurrence-engine"
PATTERNS_AGENT_NAME: Final = "recurrence-patterns"
PRODUCER_BATCH_BYTES: Final = 512 * 1024
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


def worker_app(settings: StreamSettings) -> WorkerApp:
    """The Faust app of one worker: Faust's group membership, assignment, table recovery, standbys, web server."""
    return WorkerApp(
        settings.layout.group_id,
        broker=settings.kafka.faust_broker(),
        broker_credentials=faust_credentials(settings.kafka),
        store="rocksdb://",
        datadir=str(settings.worker.datadir),
        processing_guarantee=settings.worker.processing_guarantee,
        topic_partitions=settings.layout.partitions,
        topic_replication_factor=settings.layout.replication,
        # Topics are code (``recurrence topics apply``); Faust must never create one
        # with its own defaults (a compacted changelog, a 1-partition journal).
        topic_allow_declare=False,
        topic_disable_leader=True,
        table_standby_replicas=settings.worker.standby_replicas,
        consumer_auto_offset_reset="earliest",
        consumer_group_instance_id=settings.worker.instance_id,
        broker_session_timeout=settings.worker.session_timeout,
        broker_heartbeat_interval=max(0.5, settings.worker.session_timeout / 5),
        producer_acks=-1,
        stream_wait_empty=True,
        # One fetch is one batch (``fetches``): this caps the entries per batch.
        broker_max_poll_records=settings.batch_entries,
        # The sink appends a batch's outputs to one producer batch per topic partition
        # (``sink``): large batches, under the broker's default 1 MB per record batch.
        producer_max_batch_size=PRODUCER_BATCH_BYTES,
        producer_max_request_size=4 * PRODUCER_BATCH_BYTES,
        web_enabled=True,
        web_bind=settings.worker.web_host,
        web_host=settings.worker.web_host,
        web_port=settings.worker.web_port,
        canonical_url=settings.canonical_url,
        # The request line's limit and the quiet protocol logger (websecurity), as on `recurrence serve`.
        web_application_options={"handler_args": handler_args()},
        TableManager=WorkerTableManager,
    )


def raw_topic(app: WorkerApp, name: str, partitions: int) -> Any:
    """A topic of raw bytes keys and values with the journal's partition count."""
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )


def state_table(app: WorkerApp, name: str, help_text: str, partitions: int) -> StateTable:
    """A changelog-backed table of change sets (see ``tablestore``), registered with the app."""
    table = StateTable(
        app,
        name=name,
        key_type=bytes,
        value_type=bytes,
        partitions=partitions,
        beacon=app.tables.beacon,
        help=help_text,
    )
    app.tables.add(table)
    return table


def build_worker(settings: StreamSettings) -> RecurrenceService:
    """The worker for one set of settings, assembled (see the module's docstring)."""
    worker = settings.worker
    config = EngineConfig(
        review_threshold=settings.worker.review_threshold, pattern_scopes=settings.worker.pattern_scopes
    )
    metrics = Metrics().with_process_metrics()
    app = worker_app(settings)
    engine, patterns = build_lanes(app, settings, config, metrics)
    # Snapshots (issue 8: restore bounded by state size; see ``snapshots``).
    snapshots = Snapshots(
        KafkaSnapshotLog(settings.kafka, settings.topics.snapshots),
        worker.snapshot_interval,
        worker.snapshot_batches,
        metrics.snapshots,
    )
    tables = (engine.table, patterns.table)
    for table in tables:
        table.snapshots = snapshots  # the store loads a snapshot before recovery
    metrics.snapshots.replayed = lambda: sum(int(getattr(t.data, "replayed", 0)) for t in tables)
    service = RecurrenceService(
        app,
        engine,
        patterns,
        snapshots,
        metrics,
        ServiceOptions(
            settings.layout.group_id,
            settings.canonical_url,
            settings.worker.processing_guarantee,
            settings.batch_entries,
            worker.ready_max_lag,
            settings.kafka,
        ),
    )
    metrics.live = LiveReadings(
        lag=service.lag,
        restore=lambda: restore_progress(app, settings.topics.changelog),
        rebalances=lambda: rebalances(app),
        ready=lambda: readiness(service.probe()).ok,
    )
    service.start_on(app)
    register(
        app,
        ReadSurface(
            state=engine.state(),
            config=config,
            metrics=metrics,
            partitions=settings.layout.partitions,
            my_url=settings.canonical_url,
            ready_partitions=engine.cluster.ready_partitions,
            owners=engine.cluster.owners,
            lag=service.lag,
            probe=service.probe,
            pattern_table=PatternTable(
                state=patterns.state(),
                ready_partitions=patterns.cluster.ready_partitions,
                owners=patterns.cluster.owners,
            ),
            connection=settings.kafka,
            dead_letters_topic=settings.topics.dead_letters,
        ),
        Access(settings.web_token()),
    )
    return service


def build_lanes(app: WorkerApp, settings: StreamSettings, config: EngineConfig, metrics: Metrics) -> tuple[Lane, Lane]:
    """The engine's lane over the journal and the patterns agent's over the repartition topic: their
    topics and tables, and every output topic their sinks write to."""
    names = settings.topics
    partitions = settings.layout.partitions
    journal = raw_topic(app, names.journal, partitions)
    table = state_table(app, TABLE_NAME, "recurrence engine state (one change set per journal entry)", partitions)
    cluster = Cluster(app, names.journal, names.changelog, table.name)
    recurred = raw_topic(app, names.recurred, partitions)
    patterns_table = state_table(
        app, PATTERNS_TABLE_NAME, "cross-scope pattern rows by signature key (one change set per batch)", partitions
    )
    patterns_cluster = Cluster(app, names.recurred, names.patterns_changelog, patterns_table.name)
    sinks = SinkFactory(app, settings.worker.processing_guarantee == "exactly_once")
    engine_processor, engine_readers = batch_processor(settings, sinks, EngineStep(names, config), table, metrics)
    metrics.patterns = Metrics()
    patterns_step = PatternStep(names, settings.worker.pattern_scopes)
    patterns_processor, patterns_readers = batch_processor(
        settings, sinks, patterns_step, patterns_table, metrics.patterns
    )
    worker = settings.worker
    return (
        Lane(
            AGENT_NAME,
            names.journal,
            journal,
            table,
            cluster,
            engine_processor,
            engine_readers,
            worker.batch_within,
            worker.batch_min,
        ),
        Lane(
            PATTERNS_AGENT_NAME,
            names.recurred,
            recurred,
            patterns_table,
            patterns_cluster,
            patterns_processor,
            patterns_readers,
            PATTERNS_BATCH_WITHIN,
            settings.batch_entries,
        ),
    )


@dataclass(frozen=True)
class SinkFactory:
    """A ``FaustSink`` per consumed topic, over the app's producers (outputs are sent by topic name)."""

    app: WorkerApp
    exactly_once: bool

    def __call__(self, source: str) -> FaustSink:
        return FaustSink(self.app, source, self.exactly_once)


def batch_processor(
    settings: StreamSettings, sinks: SinkFactory, step: Step, table: StateTable, metrics: Metrics
) -> tuple[BatchProcessor, tuple[PartitionReader, PartitionReader]]:
    """The batch processor of ``step``'s consumed topic, and its direct readers of that topic and of its changelog."""
    source = step.source
    readers = PartitionReader(settings.kafka, source), PartitionReader(settings.kafka, step.changelog)
    processor = BatchProcessor(
        BatchIO(readers[0], cast(PartitionedState, table.data), sinks(source), readers[1]),
        step,
        metrics=metrics,
        limits=BatchLimits(settings.batch_entries, settings.worker.changelog_record_bytes),
    )
    return processor, readers
