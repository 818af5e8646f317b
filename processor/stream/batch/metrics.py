"""Worker metrics and their Prometheus exposition (``GET /metrics``), through prometheus_client.

``Metrics`` keeps the counts the batch processor updates (plain integers, so
the hot path pays an addition, not a lock) and the two histograms; a custom
collector turns the counts and the live readings (lag, journal positions,
restore progress, rebalances) into metric families at scrape time. Each worker
has its own registry (never the global one), with process and platform
metrics. Labels only ever hold partitions, record kinds and dead-letter codes:
never scope content, Experience or Outcome text.
"""

import asyncio
import gc
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ...core.deadletters import CODES
from ...core.tally import Tally

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
# Journal timestamp -> outputs acknowledged: milliseconds when live, minutes or more for a backfill.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
BATCH_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# Entries per batch: a few when the load is light, up to --batch-max when behind.
BATCH_SIZE_BUCKETS: Final = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000)
# Where a batch's time goes (``processing``) and how long the event loop was held up: milliseconds.
STAGE_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
#: How often the event loop watch wakes up (``Metrics.watch_event_loop``).
LOOP_WATCH_INTERVAL: Final = 0.05
#: The stages of one batch, in order (``recurrence_batch_stage_seconds{stage}``).
STAGES: Final = ("wait", "begin", "engine", "statistics", "outputs", "changelog", "commit", "local")


class Timestamped(Protocol):
    @property
    def timestamp(self) -> float | None: ...


@dataclass(frozen=True)
class RestoreProgress:
    """Changelog restore per active partition: the offset restored to and the high watermark."""

    offsets: Mapping[int, int]
    highwaters: Mapping[int, int]
    standby_remaining: int = 0

    @property
    def remaining(self) -> int:
        return sum(max(0, hw - self.offsets.get(p, 0)) for p, hw in self.highwaters.items())


@dataclass
class LiveReadings:
    """What only the running app knows, read at scrape time."""

    lag: Callable[[], Mapping[int, int]] = dict
    restore: Callable[[], RestoreProgress] = lambda: RestoreProgress({}, {})
    rebalances: Callable[[], int] = lambda: 0
    ready: Callable[[], bool] = lambda: False


@dataclass
class SnapshotCounts:
    """Partition snapshots (``snapshots``): shipped by this worker, and loaded instead of a full replay."""

    shipped: int = 0
    shipped_bytes: int = 0
    restored: int = 0
    restored_rows: int = 0
    replayed: Callable[[], int] = lambda: 0  # changelog records applied by recovery and standbys


@dataclass
class BatchCounts(Tally):
    """What a stream batch counts beyond the ``Tally``: one batch's (``BatchResult``) and, added up batch by
    batch, a worker's (``Metrics``), under the same names."""

    change_sets: int = 0  # changelog records of change sets
    change_set_parts: int = 0  # changelog records of change sets split because they outgrew one record
    state_changes: int = 0  # keys written or deleted by the batch's change sets
    skipped: int = 0  # delivered again, already applied: not run
    filled: int = 0  # not delivered by the stream, read directly and run
    table_records: int = 0  # statistics-topic records (one per changed scope per batch)

    def add(self, other: "BatchCounts") -> None:
        """Add another's records, dead letters and counts (not its entries: a batch knows its own)."""
        self.records.update(other.records)
        self.dead_letters.update(other.dead_letters)
        for name in _BATCH_COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


_BATCH_COUNTS: Final = ("change_sets", "change_set_parts", "state_changes", "skipped", "filled", "table_records")


@dataclass
class Metrics(BatchCounts):
    batches: int = 0
    restore_repaired: int = 0  # change sets a restore had missed, read back from the changelog
    # journal partition -> next journal offset recorded in the state (durable)
    positions: dict[int, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))
    live: LiveReadings = field(default_factory=LiveReadings)
    # The patterns agent's own tally (its entries are repartitioned observations, not journal entries).
    patterns: "Metrics | None" = None
    snapshots: SnapshotCounts = field(default_factory=SnapshotCounts)

    def __post_init__(self) -> None:
        self.latency = BatchHistogram(
            "recurrence_entry_to_output_seconds",
            "From the journal record's timestamp to its batch's output records acknowledged by the broker.",
            LATENCY_BUCKETS,
        )
        self.registry.register(self.latency)
        self.batch_duration = Histogram(
            "recurrence_batch_duration_seconds",
            "One batch from planning to local state written (outputs, changelog and state durable).",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_entries = Histogram(
            "recurrence_batch_entries",
            "Entries per batch (fetches merged up to --batch-max; one below --batch-min waits --batch-within "
            "for more).",
            buckets=BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        stages = Histogram(
            "recurrence_batch_stage_seconds",
            "One batch's time by stage: wait (collecting fetches), begin (planned; under exactly_once the "
            "partitions' transaction locks taken), engine, statistics (computed and sent), "
            "outputs (the last sent; outputs and statistics acknowledged), changelog (sent, acknowledged), commit "
            "(exactly_once transactions), local (state written).",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.stage = {name: stages.labels(name) for name in STAGES}
        self.loop_lag = Histogram(
            "recurrence_event_loop_lag_seconds",
            "How late the worker's event loop woke a short periodic sleep: time it was held by something else "
            "(a batch, a snapshot chunk, a garbage collection).",
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.gc_pause = Histogram(
            "recurrence_gc_pause_seconds",
            "Python garbage collections by generation: how long each held the worker (the GIL and the loop).",
            ["generation"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_WorkerCollector(self))

    def outputs_acked(self, entries: Sequence[Timestamped]) -> None:
        """Every output of these entries is acknowledged: observe each entry's latency once."""
        now = time.time()
        self.latency.observe_all(
            max(0.0, now - timestamp)
            for entry in entries
            if (timestamp := entry.timestamp) is not None and timestamp > 0
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def with_process_metrics(self) -> "Metrics":
        """Add process_* and python_* metrics and the GC pause histogram (a worker's registry; tests build
        many without them)."""
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        pauses = [self.gc_pause.labels(str(generation)) for generation in range(3)]
        started = [0.0]

        def timed(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses[min(2, info.get("generation", 0))].observe(time.perf_counter() - started[0])

        gc.callbacks.append(timed)
        return self

    async def watch_event_loop(self, interval: float = LOOP_WATCH_INTERVAL) -> None:
        """Sleep ``interval`` again and again and observe how late each wake-up was (``loop_lag``)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, loop.time() - due))


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _snapshot_counters(s: SnapshotCounts) -> Iterator[Metric]:
    yield _counter(
        "recurrence_snapshots_shipped", "Partition snapshots this worker shipped (manifest written).", s.shipped
    )
    yield _counter("recurrence_snapshot_shipped_bytes", "Compressed bytes of the snapshots shipped.", s.shipped_bytes)
    yield _counter(
        "recurrence_snapshots_restored",
        "Partition snapshots loaded for a partition with no local state (before the changelog tail).",
        s.restored,
    )
    yield _counter("recurrence_snapshot_restored_rows", "State rows loaded from snapshots.", s.restored_rows)
    yield _counter(
        "recurrence_changelog_replayed_records",
        "Changelog records applied by recovery and standby replicas (the tail after a snapshot, or all).",
        s.replayed(),
    )


class BatchHistogram(Collector):
    """A histogram observed a batch of values at a time, on the event loop only (no lock).

    prometheus_client's ``Histogram.observe`` takes a lock and walks the bucket bounds for
    every value: for the entry-to-output latency, one per journal entry, that was ~2 us an entry
    (1.4% of a saturated worker's main thread). Here a batch's values are bucketed with a
    bisection into plain integers; the exposition (``collect``) is the same histogram family.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = list(buckets)
        self._counts = [0] * (len(self._bounds) + 1)  # the last: above every bound (+Inf)
        self._sum = 0.0

    def observe_all(self, values: Iterable[float]) -> None:
        bounds, counts, total = self._bounds, self._counts, 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1  # the first bound >= value: Prometheus's "le"
            total += value
        self._sum += total

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation)
        cumulative = list(accumulate(self._counts))
        edges = [*(str(float(bound)) for bound in self._bounds), "+Inf"]  # as prometheus_client spells them
        family.add_metric([], buckets=list(zip(edges, cumulative, strict=True)), sum_value=self._sum)
        yield family


class _WorkerCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def describe(self) -> list[Metric]:
        return []  # families depend on live readings; prometheus_client then collects to describe

    def collect(self) -> Iterator[Metric]:
        m = self._m
        yield _counter("recurrence_entries_processed", "Journal entries run through the engine.", m.entries)
        records = CounterMetricFamily(
            "recurrence_records_emitted", "Output records produced, by record kind.", labels=["kind"]
        )
        for kind in ("match", "observation", "review_proposal", "admission", "dead_letter"):
            records.add_metric([kind], m.records.get(kind, 0))
        yield records
        letters = CounterMetricFamily(
            "recurrence_dead_letters", "Dead letters produced, by error code.", labels=["code"]
        )
        # Every stable code from the start (0 until one is written): a rate or an alert on the series
        # then works before the first dead letter, not only after it.
        for code in sorted(set(CODES) | set(m.dead_letters)):
            letters.add_metric([code], m.dead_letters.get(code, 0))
        yield letters
        yield _counter("recurrence_batches", "Batches made durable.", m.batches)
        yield _counter("recurrence_changelog_records", "Change-set records written to the changelog.", m.change_sets)
        yield _counter(
            "recurrence_changelog_split_records",
            "Changelog records that are parts of a change set larger than one record.",
            m.change_set_parts,
        )
        yield _counter("recurrence_state_changes", "State keys written or deleted.", m.state_changes)
        yield _counter(
            "recurrence_redelivered_skipped",
            "Entries delivered again by the stream after they were applied (not run again).",
            m.skipped,
        )
        yield _counter(
            "recurrence_stream_gaps_filled",
            "Entries the stream did not deliver, read directly from the journal and run.",
            m.filled,
        )
        yield _counter(
            "recurrence_statistics_records",
            "Statistics-topic records written: one per scope a batch changed.",
            m.table_records,
        )
        if m.patterns is not None:
            yield _counter(
                "recurrence_pattern_observations",
                "Recurred observations the patterns agent ran (repartition topic).",
                m.patterns.entries,
            )
            yield _counter(
                "recurrence_pattern_suggestions",
                "Pattern suggestions written to the patterns topic.",
                m.patterns.records.get("pattern", 0),
            )
        repaired = m.restore_repaired + (m.patterns.restore_repaired if m.patterns is not None else 0)
        yield _counter(
            "recurrence_restore_repaired_change_sets",
            "Committed change sets missing from a partition's restored state, read back and applied.",
            repaired,
        )
        yield _counter(
            "recurrence_rebalances", "Consumer group rebalances this worker took part in.", m.live.rebalances()
        )
        yield from _snapshot_counters(m.snapshots)
        yield from self._gauges()

    def _gauges(self) -> Iterator[Metric]:
        m = self._m
        lag = m.live.lag()
        positions = GaugeMetricFamily(
            "recurrence_journal_position",
            "Next journal offset recorded in the state, by partition.",
            labels=["partition"],
        )
        for partition, offset in sorted(m.positions.items()):
            positions.add_metric([str(partition)], offset)
        yield positions
        lags = GaugeMetricFamily(
            "recurrence_consumer_lag",
            "Journal entries not yet processed on this worker's partitions (high watermark - journal position).",
            labels=["partition"],
        )
        for partition, n in sorted(lag.items()):
            lags.add_metric([str(partition)], n)
        yield lags
        restore = m.live.restore()
        restored = GaugeMetricFamily(
            "recurrence_restore_offset",
            "Changelog offset the partition's local state is restored to.",
            labels=["partition"],
        )
        target = GaugeMetricFamily(
            "recurrence_restore_highwater", "Changelog high watermark the partition restores to.", labels=["partition"]
        )
        for partition, highwater in sorted(restore.highwaters.items()):
            restored.add_metric([str(partition)], restore.offsets.get(partition, 0))
            target.add_metric([str(partition)], highwater)
        yield restored
        yield target
        remaining = GaugeMetricFamily(
            "recurrence_restore_remaining_records", "Changelog records still to restore, by role.", labels=["role"]
        )
        remaining.add_metric(["active"], restore.remaining)
        remaining.add_metric(["standby"], restore.standby_remaining)
        yield remaining
        yield GaugeMetricFamily("recurrence_ready", "1 when /readyz answers 200.", value=1 if m.live.ready() else 0)
        yield GaugeMetricFamily(
            "recurrence_uptime_seconds", "Seconds since the worker started.", value=time.monotonic() - m.started
        )
