"""The running worker: the engine agent over the journal, the patterns agent, catching up, probes and reports.

The patterns agent (issue 11.2) consumes the repartition topic the engine agent
writes ``recurred`` observations to, keyed by signature key, and keeps the
cross-scope pattern rows in its own table; both agents run ``BatchProcessor``
with their ``Step`` (``steps``), so they share the durability order. Each is
a ``Lane``; ``build.build_worker`` assembles the lanes and this service from
the settings.

The agent is a thin shell. It takes each fetch of raw journal records whole
(the worker's consumer hands it over without Faust's per-event path:
``fetches``, ``workerapp``), hands it to ``BatchProcessor`` (engine, outputs
durable, changelog durable, local state -- see ``processing``) and only then
commits the group offsets (in the background, under exactly_once once the
batch's transactions have committed: the journal position in each partition's
state, committed with the outputs, decides what runs; see ``sink``). Anything
unexpected while a batch is in flight
(an exception, a cancellation) ends the process at once with exit code 70 and
without committing the batch, and a restart is the recovery path anyway.

``recurrence worker`` is the one way to start a worker: it checks the topics
and the web port and builds the worker from the settings models
(``build.build_worker``). ``faust -A`` finds no app here, only a line saying
so (``faustentry``): the entry point it once had skipped those checks and
diverged in behaviour.
"""

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, cast

from aiokafka.errors import MessageSizeTooLargeError

from ...exceptions import EXIT_BATCH_ABORTED, RecurrenceError
from ...host.gcpolicy import FullCollections, freeze_startup_objects
from ..batch.metrics import Metrics
from ..batch.probes import ProbeInputs, readiness
from ..batch.processing import BatchProcessor
from ..batch.types import Entry, PartitionedState
from ..clients.diagnosis import NotAuthorizedError, authorization
from ..clients.faustcompat import crashed
from ..faustentry import NOT_A_FAUST_APP
from ..settings import KafkaConnection
from .cluster import Cluster
from .fetches import FetchChannel, Fetched
from .journal import PartitionReader
from .sink import FaustSink
from .snapshots import Snapshots, SnapshotTarget
from .tablestore import StateTable
from .workerapp import WorkerApp

log = logging.getLogger("recurrence.stream")

REPORT_INTERVAL: Final = 15.0
CATCH_UP_INTERVAL: Final = 2.0
STALL_SECONDS: Final = 4.0
RECORD_TOO_LARGE: Final = (
    "the broker refused a record of this batch as larger than its topic's max.message.bytes; a restart "
    "would meet it again: raise that topic's limit in place (kafka-configs.sh --alter --add-config "
    "max.message.bytes=..., see docs/kafka.md, Topics), or for a changelog lower --changelog-record-bytes, "
    "then restart"
)
SNAPSHOT_CHECK_INTERVAL: Final = 2.0
#: How often a starting worker checks whether it is ready, to say once where its page is.
READY_POLL_INTERVAL: Final = 1.0


@dataclass
class Lane:
    """One agent's share of the worker: the engine over the journal, or the patterns agent over the
    repartition topic.

    The topic it consumes (``source`` by name), its state table, what it sees of the group, the
    batch processor that runs its fetches, how long a batch below ``min_records`` waits for more,
    and the direct readers behind catching up and the restore check (closed at shutdown).
    """

    agent: str
    source: str
    topic: Any
    table: StateTable
    cluster: Cluster
    processor: BatchProcessor
    readers: tuple[PartitionReader, ...]
    within: float
    min_records: int
    #: Per partition: the position last seen and since when (the stall rule, ``stalled``).
    progress: dict[int, tuple[int | None, float]] = field(default_factory=dict)

    def state(self) -> PartitionedState:
        """The table's store (``tablestore``): the partitioned state, and what snapshots read."""
        return cast(PartitionedState, self.table.data)


@dataclass(frozen=True)
class ServiceOptions:
    """What the running worker reads of its settings."""

    app_id: str
    url: str  # where other workers reach this one (``StreamSettings.canonical_url``)
    processing_guarantee: str
    batch_max: int
    ready_max_lag: int
    #: Whose refusals the worker reports (``diagnosis.NotAuthorizedError``); None: not said.
    connection: KafkaConnection | None = None

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly_once"


class RecurrenceService:
    """The running worker: its two agents, catching up, snapshots, probes and reports (see ``build_worker``)."""

    def __init__(
        self,
        app: WorkerApp,
        engine: Lane,
        patterns: Lane,
        snapshots: Snapshots,
        metrics: Metrics,
        options: ServiceOptions,
    ) -> None:
        self.app = app
        self.engine = engine
        self.patterns = patterns
        self.snapshots = snapshots
        self.metrics = metrics
        self.options = options
        self._snapshot_targets = [
            SnapshotTarget(lane.state, lane.cluster.ready_partitions) for lane in (engine, patterns)
        ]
        self._collections: FullCollections | None = None  # from the start (``freeze_startup_objects``)
        self._last_report = (time.monotonic(), 0)

    def start_on(self, app: WorkerApp) -> None:
        """Register the agents, timers, tasks and signal receivers with the app (Faust starts them in this order)."""
        if self.snapshots.shipping:
            app.timer(SNAPSHOT_CHECK_INTERVAL)(self.ship_snapshots)
        app.on_partitions_assigned.connect(self.assigned)
        app.on_refusal = self.consumer_refused
        for lane in (self.engine, self.patterns):
            app.agent(lane.topic, name=lane.agent)(self.agent(lane))
        app.timer(REPORT_INTERVAL)(self.report)
        app.timer(CATCH_UP_INTERVAL)(self.catch_up)
        app.task(self.freeze_startup_objects)
        app.task(self.watch_loop)
        app.task(self.announce_ready)
        app.on_before_shutdown.connect(self.close_readers)

    # -- the agents -------------------------------------------------------------------
    def agent(self, lane: Lane) -> Callable[[Any], Awaitable[None]]:
        """The agent of one lane, to register with ``app.agent``."""
        # The agent owns the topic's partitions (Faust subscribes, assigns, recovers and starts the
        # transactional producers for it), but its records arrive as whole fetches (``fetches``).
        processor, topic, within, min_records = lane.processor, lane.source, lane.within, lane.min_records
        channel = FetchChannel(topic)
        self.app.fetch_channels[topic] = channel
        exactly_once = self.options.exactly_once

        def durable(entries: list[Entry]) -> None:
            """The batch is durable (exactly_once: its transactions committed): what follows it (never for a
            batch that is not). The group offsets only say where fetching resumes; the journal position in
            each partition's state decides what runs, so they are committed in the background."""
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

        # The patterns agent gathers observations for up to a second (``build.PATTERNS_BATCH_WITHIN``), but not
        # once the engine agent has nothing left to run: the end of a backlog's last observations then
        # waited out that second (0.7 s after the journal's last entry, exactly_once).
        until = None if lane is self.engine else self.app.fetch_channels[self.engine.source].drained

        async def agent(stream: Any) -> None:
            while True:
                fetched = await channel.get(self.options.batch_max, within, min_records, until)
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
        elif (refused := self._refused(error)) is not None:  # an ACL gone: a restart is refused the same way
            self._abort(refused.line(), entries, refused.exit_code, "once the ACL is granted again")
        elif isinstance(error, MessageSizeTooLargeError):  # the broker refused a record: the same on every restart
            self._abort(RECORD_TOO_LARGE, entries)
        else:
            log.critical("batch failed: %s", type(error).__name__, exc_info=error)
            self._abort(f"{type(error).__name__} while a batch was in flight", entries)

    def consumer_refused(self, error: BaseException) -> None:
        """The consumer was refused (the group's or a topic's READ revoked): exit 2 with the line."""
        refused = self._refused(error, "READ")
        if refused is not None:
            self._abort(refused.line(), [], refused.exit_code, "once the ACL is granted again")

    def _refused(self, error: BaseException, operation: str = "WRITE") -> NotAuthorizedError | None:
        """An authorization error (an ACL revoked while the worker runs) as the worker's refusal line."""
        if self.options.connection is None:
            return None
        refused = authorization(self.options.connection, error, operation)
        if refused is None:
            return None
        # The transactional ids are in the worker's set only under exactly_once: say so in the command.
        flags = " --processing-guarantee exactly_once" if refused.resource == "transactional id" else ""
        return refused.for_role("worker", flags)

    def _entries(self, fetched: Fetched, topic: str) -> list[Entry]:
        """A fetch's records as entries, only of partitions this worker still owns in this generation."""
        if fetched.generation != self.app.consumer_generation_id:
            return []  # fetched before a rebalance; the new assignment seeks and the state's position decides
        assigned = {tp.partition for tp in self.app.consumer.assignment() if tp.topic == topic}
        return [
            Entry(
                partition,
                record.offset,
                record.value if record.value is not None else b"",
                record.timestamp / 1000 if record.timestamp is not None else None,
            )
            for partition, records in fetched.records.items()
            if partition in assigned
            for record in records
        ]

    # -- snapshots (issue 8: restore bounded by state size; see ``snapshots``) -------------
    async def ship_snapshots(self) -> None:
        try:
            await self.snapshots.tick(self._snapshot_targets)
        except Exception as error:  # an optimisation only: a failed upload has no manifest; the next tick retries
            log.warning("shipping a snapshot failed: %s; retrying later", type(error).__name__, exc_info=error)

    async def close_readers(self, app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        await self.snapshots.topic.close()
        await self.engine.readers[0].close()
        await self.patterns.readers[0].close()
        await self.engine.readers[1].close()
        await self.patterns.readers[1].close()

    async def assigned(self, app: Any, /, *args: Any, **kwargs: Any) -> None:
        self.engine.processor.assigned()
        self.patterns.processor.assigned()

    async def catch_up(self) -> None:
        """Entries the stream has not delivered for a while although the topic has them: run them."""
        await self._catch_up_lane(self.engine)
        await self._catch_up_lane(self.patterns)

    async def _catch_up_lane(self, lane: Lane) -> None:
        cluster, processor, progress_by_partition = lane.cluster, lane.processor, lane.progress
        now = time.monotonic()
        for tp in cluster.journal_partitions():
            # Asked again for each partition, with no await from here to ``running()``: a rebalance
            # that began while an earlier partition caught up (its quiesce waited for that one) has
            # set ``rebalancing`` and may be stopping the transactional producers; a catch-up begun
            # now would not be waited for, and its producer would vanish under it (exit 70).
            if tp.partition not in cluster.ready_partitions():
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
            channel = self.app.fetch_channels[cluster.journal]
            try:
                # Counted as a batch in flight, from before its first await: a rebalance that begins
                # meanwhile waits for it before Faust stops the transactional producers it sends through.
                with channel.running():
                    await processor.catch_up(tp.partition, highwater)
            except asyncio.CancelledError:
                self._abort("cancelled while catching up", [])
            except Exception as error:  # as for a batch: never go on after a half-done catch-up
                log.critical("catching up failed: %s", type(error).__name__, exc_info=error)
                self._abort(f"{type(error).__name__} while catching up", [])
            position = processor.position(tp.partition)
            progress_by_partition[tp.partition] = (position, time.monotonic())
            if position is not None:
                # As after a batch: the group offset follows the position, past what the catch-up read --
                # on a topic written in transactions, the commit markers after its last record, which the
                # stream never hands over (without this the group showed a lag of 1 per partition there).
                channel.commit_soon({tp.partition: position}, partial(self.app.commit_journal, cluster.journal))

    async def freeze_startup_objects(self) -> None:
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

    async def watch_loop(self) -> None:  # a method without arguments: Faust passes the app to one with any
        await self.metrics.watch_event_loop()

    async def announce_ready(self) -> None:
        """Once the worker first answers /ready with 200, say where its page is: one line, no data."""
        while not readiness(self.probe()).ok:
            await asyncio.sleep(READY_POLL_INTERVAL)
        log.info("ready: the statistics page is at %s/ui", self.options.url)

    def _abort(self, why: str, entries: list[Entry], code: int = EXIT_BATCH_ABORTED, when: str = "") -> None:
        if entries:
            first = {e.partition: e.offset for e in reversed(entries)}
            where = ", ".join(f"p{p}@{o}" for p, o in sorted(first.items()))
            stop = f"exiting without acknowledging {len(entries)} entries (first offsets {where}); a restart resumes "
            stop += "from them"
        else:
            stop = "exiting; a restart resumes where the worker stopped"
        log.critical("%s; %s%s", why, stop, f" {when}" if when else "")
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)

    # -- probes and readings -------------------------------------------------------------
    def _journal_tps(self) -> set[Any]:
        return self.engine.cluster.journal_partitions()

    def _positions(self) -> dict[int, int]:
        """Durable journal position per assigned partition (absent: nothing applied there yet)."""
        found: dict[int, int] = {}
        for tp in self._journal_tps():
            position = self.engine.processor.position(tp.partition)
            if position is not None:
                found[tp.partition] = position
        self.metrics.positions.update(found)
        return found

    def lag(self, positions: Mapping[int, int] | None = None) -> dict[int, int]:
        positions = self._positions() if positions is None else positions
        lag: dict[int, int] = {}
        for tp in self._journal_tps():
            highwater = self.engine.cluster.highwater(tp)
            if highwater is None or highwater < 0:
                continue
            lag[tp.partition] = max(0, highwater - positions.get(tp.partition, 0))
        return lag

    def probe(self) -> ProbeInputs:
        positions = self._positions()
        return ProbeInputs(
            agent_crashed=any(crashed(agent) for agent in self.app.agents.values()),
            rebalancing=bool(self.app.rebalancing),
            recovered=bool(cast(Any, self.app.tables).recovery.completed.is_set() and not self.app.in_recovery),
            partitions=sorted(tp.partition for tp in self._journal_tps()),
            ready_partitions=sorted(self.engine.cluster.ready_partitions()),
            lag=self.lag(positions),
            max_lag=self.options.ready_max_lag,
            details={
                # Durable journal position per assigned partition: what progress checks poll (cheap,
                # unlike rendering /metrics).
                "positions": {str(p): n for p, n in sorted(positions.items())},
                "app_id": self.options.app_id,
                "url": self.options.url,
                "entries_processed": self.metrics.entries,
                "processing_guarantee": self.options.processing_guarantee,
            },
        )

    async def report(self) -> None:
        then, entries_then = self._last_report
        now = time.monotonic()
        done = self.metrics.entries - entries_then
        self._last_report = (now, self.metrics.entries)
        if done == 0 and entries_then > 0:
            return
        lag = self.lag()
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


#: What ``faust -A recurrence_ledger.processor.stream.worker.app worker`` loads: one line naming ``recurrence worker``.
app: Final = NOT_A_FAUST_APP
