"""One batch of journal entries through the engine, made durable in the only safe order.

For a batch of entries (any partitions, offset order per partition):

0. the first time a partition is processed after an assignment, check its
   restored state against the changelog (``restore_tail``);
1. per partition, continue exactly at the journal position recorded in the
   state (``POSITION_KEY``): entries below it are skipped (already applied),
   entries the stream did not hand over are read from the journal directly;
   the header (row layout and pinned settings, ``stateheader``) is checked or stamped;
2. run ``Engine.process`` on each raw entry in one ``Transaction`` per
   partition (nothing reaches the table yet) and hand every output record to
   the producer, in order, keyed by ``scope_id`` (a ``recurred`` observation
   also to the repartition topic, keyed by signature key); then, per
   partition, the statistics of every scope the batch changed;
3. wait until every output and statistics record is acknowledged by the
   broker (acks=all), one round trip for both;
4. write each partition's batch as ONE change set -- it also carries the new
   journal position -- and wait for those acknowledgements (under exactly_once,
   then commit the partition's Kafka transaction: outputs and change sets, the
   journal position with them, become visible together; there the change sets
   already left with the outputs in step 3, nothing being visible before the
   commit, and only the record index, which needs the outputs' offsets, is
   written here);
5. only then flush each transaction to the local partition database, together
   with the changelog offset recovery resumes from;
6. return, and the agent commits the group offsets in the background, under
   both guarantees (they only say where fetching resumes).

A crash at any point leaves the changelog (and the local database) at or
behind the outputs, so the entries run again: a batch whose change set never
reached the changelog runs again on the old state and re-emits byte-identical
records (same ids); a batch whose change set did reach it is skipped by the
recorded position and emits nothing. No record is lost; duplicates are
identical and deduplicated by id.

The same processor runs the patterns agent over the repartition topic: what
runs per record is a ``Step`` (``steps``), the engine by default; "journal"
above is then the step's source topic and the state the patterns table.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from ...core.recordindex import DEAD_LETTER_COUNTS, RECORD_INDEX, index_record
from ...core.records import Emitted
from ...core.state import row_cache
from ...core.stateheader import check_layout, check_pinned
from ...exceptions import TransactionStateError
from ...store.base import RowCache, StateStore, Transaction
from ..settings import BATCH_MAX_AT_LEAST_ONCE
from . import changeset
from .metrics import BatchCounts, Metrics
from .types import (
    ID_HEADER,
    SOURCE_HEADER,
    ChangelogSource,
    Delivered,
    Entry,
    JournalSource,
    Outgoing,
    PartitionedState,
    Sink,
    Step,
    StepRun,
)

log = logging.getLogger("recurrence.stream")

#: What to do when a partition's header is not this worker's (``stateheader``).
_REBUILD: Final = "keep the setting, or rebuild all derived state with a new --app-id (docs/kafka.md)"
#: Per-partition key (outside every engine namespace): the next journal offset the state expects.
POSITION_KEY: Final = b'["stream","next_offset"]'


#: Engine time after which a batch's outputs so far are sent, before the batch's last entry has run.
EARLY_FLUSH_SECONDS: Final = 0.01
#: Event loop turns given to the producers at each of those points. The engine holds the loop
#: otherwise, and a producer's requests advance one turn at a time: a response is read, then its
#: waiter wakes, then the next request is written. Under exactly_once each batch starts a chain
#: of them (AddPartitionsToTxn; AddOffsetsToTxn and TxnOffsetCommit before it, when measured: the
#: group offsets were then in the transaction); with one turn per point it was
#: still running when the engine finished, and the outputs and the commit waited for it (4 turns:
#: `outputs` 28-32 ms against 39-58 ms, `commit` 12-17 ms against 19-26 ms at 1,900 entries/s,
#: four interleaved pairs).
EARLY_FLUSH_YIELDS: Final = 4
#: Pipelined batches being made durable at once while the next batch's engine runs. With one, a
#: worker whose broker acknowledged slowly (two workers sharing 2 cores with it) waited ~15% of its
#: time for the batch before; a batch's change sets still wait for the batch before to be durable.
PIPELINE_DEPTH: Final = 2

#: Namespaces outside every scope: the record index, dead-letter counts and the worker's own position row.
_UNSCOPED: Final = frozenset({RECORD_INDEX, DEAD_LETTER_COUNTS, orjson.loads(POSITION_KEY)[0]})


async def _all(deliveries: Sequence[Awaitable[Delivered]]) -> list[Delivered]:
    """Await every delivery, in order. Not ``asyncio.gather``: that wraps each awaitable that is not a
    future in a task, while a sink's deliveries of one producer batch all wait on the batch's one future."""
    return [await delivery for delivery in deliveries]


def _scope_of(changes: Mapping[bytes, bytes | None]) -> bytes:
    # Engine keys are ["<ns>","<scope_id>",...]; the changelog key names the scope for operators.
    # Rows outside every scope (the record index, counters, the position) name none.
    for key in changes:
        parts = orjson.loads(key)
        if len(parts) > 1 and isinstance(parts[1], str) and parts[0] not in _UNSCOPED:
            return str(parts[1]).encode()
    return b""


class _Clock:
    """Seconds since the previous lap: where a batch's time goes (``Metrics.stage``)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        return seconds


def read_position(state: StateStore) -> int | None:
    raw = state.get(POSITION_KEY)
    return None if raw is None else int(raw)


@dataclass(frozen=True)
class _PartitionBatch:
    txn: Transaction
    run: StepRun
    recorded: int | None  # the journal position the state held when the batch began
    next_offset: int  # the position once this batch is durable


@dataclass
class _Flight:
    """A batch whose engine has run: what making it durable needs (``BatchProcessor._commit``)."""

    plan: list[Entry]
    result: "BatchResult"
    batches: dict[int, _PartitionBatch]
    changed: dict[int, _PartitionBatch]
    deliveries: list[Awaitable[Delivered]]
    emitted: list[tuple[int, str, Emitted]]  # (source partition, primary topic, record)
    copies: list[Awaitable[Delivered]]  # the same record on a further topic (the repartition)
    tables: list[Awaitable[Delivered]]
    ahead: dict[int, list[Awaitable[Delivered]]]  # exactly_once: change sets sent with the outputs
    started: float


@dataclass
class BatchResult(BatchCounts):
    """One batch's tally, plus what only a stream batch has (``BatchCounts``)."""


@dataclass(frozen=True)
class BatchLimits:
    """The sizes a batch processor keeps to (the worker's ``--batch-max`` and ``--changelog-record-bytes``)."""

    # Journal offsets one catch-up call reads and runs at most: a catch-up batch is capped like a fetched one.
    catch_up_max: int = BATCH_MAX_AT_LEAST_ONCE
    # Largest changelog record value; a larger change set is split into parts (``changeset``).
    changelog_record_bytes: int = changeset.RECORD_BYTES


@dataclass(frozen=True)
class BatchIO:
    """What a batch processor reads and writes: the consumed topic's records (``source``), its
    partitions' state, the sink of every record it sends, and (in a worker) the changelog a
    partition's restore is checked against."""

    source: JournalSource
    state: PartitionedState
    sink: Sink
    changelog: ChangelogSource | None = None


class BatchProcessor:
    def __init__(
        self, io: BatchIO, step: Step, *, metrics: Metrics | None = None, limits: BatchLimits = BatchLimits()
    ) -> None:
        """``step`` is what runs each entry: the engine (``EngineStep``) or the patterns agent's (``PatternStep``)."""
        self.limits = limits
        self.state = io.state
        self.sink = io.sink
        self.source = io.source
        self.changelog = io.changelog
        self._checked: set[int] = set()  # partitions whose restore was checked since the last assignment
        self.metrics = metrics or Metrics()
        self.step = step
        self._lock = asyncio.Lock()
        self._caches: dict[int, RowCache] = {}
        self._generations: dict[int, int] = {}
        # Pipelined batches (``process_pipelined``): the durability of the batches being made durable,
        # oldest first, and per partition the latest of their partition batches, whose staged rows
        # (and those of the batches before it) the next batch reads as committed.
        self._tails: deque[asyncio.Future[BatchResult]] = deque()
        self._in_flight: dict[int, _PartitionBatch] = {}

    def position(self, partition: int) -> int | None:
        """The next journal offset this partition's state expects (None before the first entry)."""
        state = self.state.open_partition_state(partition)
        return None if state is None else read_position(state)

    def assigned(self) -> None:
        """A new assignment: check every partition's restore again before its next batch."""
        self._checked.clear()

    async def restore_tail(self, partition: int) -> int:
        """Apply the committed change sets the partition's restored state lacks; how many there were.

        Faust's table recovery ends a partition's restore when its consumer
        *position* reaches the changelog's end, and under exactly_once it does so
        after a timeout without waiting for the records between (it cannot tell
        them from transaction markers): a change set fetched but not yet handed to
        the store was then silently missing, and the partition went on from an
        older journal position, re-emitting records a read_committed consumer had
        already seen. So before a partition's first batch after an assignment the
        state's last changelog offset is compared with the changelog's committed
        end, read now -- final by then, because the new owner's transactional
        producer has fenced the previous one -- and whatever lies between is read
        and applied (records at or below the state's offset are never applied again).
        """
        if self.changelog is None or partition in self._checked:
            return 0
        applied = self.state.changelog_offset(partition)
        end = await self.changelog.log_end(partition)
        start = 0 if applied is None else applied + 1
        records = await self.changelog.fetch_records(partition, start, end) if start < end else []
        repaired, now = 0, None
        if records:
            self.state.apply_changelog(partition, records)
            # The first parts of a change set whose last part was never written are not applied.
            now = self.state.changelog_offset(partition)
            repaired = sum(1 for offset, _, _ in records if now is not None and offset <= now)
        if repaired:
            log.warning(
                "partition %d: %d changelog records up to offset %s were missing after the restore; applied",
                partition,
                repaired,
                now,
            )
            self.metrics.restore_repaired += repaired
        self._checked.add(partition)
        return repaired

    async def process(self, entries: Sequence[Entry]) -> BatchResult:
        """Run a batch delivered by the stream (any partitions, offset order per partition); durable on return."""
        async with self._lock:
            await self._settled()
            return await self._process(entries)

    async def process_pipelined(self, entries: Sequence[Entry]) -> "asyncio.Future[BatchResult]":
        """Run a batch's engine now and make the batch durable in the background; the future says when.

        The engine of this batch runs while the batches before it (``PIPELINE_DEPTH``) are still
        being made durable (their outputs and change sets acknowledged, their local state
        written): a batch's time is mostly CPU in the engine and mostly waiting in the rest, and
        the worker's one thread would otherwise idle through every round trip. The durability
        order of each batch is unchanged (outputs, then change set, then local state), and
        batches become durable one after another, in order: a batch's change sets go out only
        once the batch before it is durable. This batch reads the rows of those before it as
        committed (``Transaction(after=...)``); should one fail, the worker exits and they all
        run again on restart, re-emitting the same records (at-least-once). Not under
        exactly_once, where a batch's records can only be sent once the transaction before
        them has committed.
        """
        if self.sink.transactional:
            raise TransactionStateError("pipelined batches are at-least-once only")
        async with self._lock:
            started = time.perf_counter()
            batches: dict[int, _PartitionBatch] = {}
            plan, result = await self._plan(entries, batches)
            self.metrics.stage["begin"].observe(time.perf_counter() - started)
            flight = await self._engine(plan, result, batches, started)
            await self._settled(keep=PIPELINE_DEPTH - 1)
            previous = self._tails[-1] if self._tails else None
            self._in_flight.update(flight.changed)
            tail = asyncio.ensure_future(self._commit(flight, previous))
            self._tails.append(tail)
            return tail

    async def _settled(self, keep: int = 0) -> None:
        """Wait until at most ``keep`` pipelined batches are still being made durable (oldest first;
        a failure is raised here too)."""
        tails = self._tails
        while len(tails) > keep:
            tail = tails[0]
            try:
                await asyncio.shield(tail)
            finally:
                if tails and tails[0] is tail and tail.done():
                    tails.popleft()

    async def catch_up(self, partition: int, stop: int) -> BatchResult:
        """Read and run the journal directly up to ``stop`` (the entries the stream has not delivered)."""
        async with self._lock:
            await self._settled()
            await self.restore_tail(partition)
            start = read_position(self.state.partition_state(partition))
            if start is None:
                start = await self.source.log_start(partition)
            # One bounded batch per call, like a delivered one: a stall of 700k entries read as one
            # batch made a 100 MB change set the broker refused (exit 70 on every restart). The
            # caller's next tick goes on from the new position.
            stop = min(stop, start + self.limits.catch_up_max)
            records = await self.source.fetch(partition, start, stop)
            if records:
                log.warning(
                    "partition %d: %d entries up to offset %d were not delivered by the stream; read directly",
                    partition,
                    len(records),
                    stop - 1,
                )
            # Through ``stop`` even when no record was found: on a topic written in transactions (the
            # repartition topic under exactly_once) the last offsets can be commit markers, which hold
            # no record; without this the position would stay below the high watermark and "stall".
            result = await self._process(
                [Entry(partition, offset, value) for offset, value in records], through={partition: stop}
            )
            result.filled += len(records)
            self.metrics.filled += len(records)
            return result

    def _transaction(self, partition: int, after: _PartitionBatch | None = None) -> Transaction:
        """A new batch transaction over the partition, sharing the partition's row cache, reading the
        rows of ``after`` (the partition's batch being made durable, if any) as committed."""
        cache = self._caches.get(partition)
        generation = self.state.generation(partition)
        if cache is None or self._generations.get(partition) != generation:
            # The partition was (re)assigned or restored: its store changed behind the cache.
            cache = self._caches[partition] = row_cache()
            self._generations[partition] = generation
            after = None  # (a rebalance waits for every batch in flight: never expected)
        return Transaction(
            self.state.partition_state(partition),
            cache,
            position_key=POSITION_KEY,
            after=None if after is None else after.txn,
        )

    def _pin_config(self, txn: Transaction, partition: int) -> None:
        """The header of the partition's state, as per embedded state (``stateheader``): its row layout
        and the settings derived state depends on; stamped through the batch, so the changelog has it."""
        where = f"the state of {self.step.source} partition {partition}"
        rows = check_layout(txn.get, where, _REBUILD)
        rows.update(check_pinned(txn.get, self.step.pinned(), where, _REBUILD))
        for row_key, value in rows.items():
            txn.put(row_key, value)

    async def _plan(
        self, entries: Sequence[Entry], batches: dict[int, _PartitionBatch], through: Mapping[int, int] | None = None
    ) -> tuple[list[Entry], BatchResult]:
        """Entries to run, in order: each partition continues exactly at its recorded position.

        ``through``: per partition, an offset up to which the source was read directly (every record
        below it is among ``entries``); the recorded position moves there even past the last record.
        """
        by_partition: dict[int, list[Entry]] = {partition: [] for partition in through or {}}
        for entry in entries:
            by_partition.setdefault(entry.partition, []).append(entry)
        plan: list[Entry] = []
        result = BatchResult()
        for partition, delivered in by_partition.items():
            await self.restore_tail(partition)
            earlier = self._in_flight.get(partition)
            txn = self._transaction(partition, earlier)
            self._pin_config(txn, partition)
            # Where the batch before leaves the partition, if this batch reads through it (the transaction
            # reads through none once that one is flushed, or after a restore): else the store's position.
            recorded = earlier.next_offset if earlier is not None and txn.earlier_rows() else txn.recorded_position()
            expected = recorded if recorded is not None else await self.source.log_start(partition)
            for entry in sorted(delivered, key=lambda e: e.offset):
                if entry.offset < expected:
                    result.skipped += 1
                    continue
                if entry.offset > expected:
                    missing = await self.source.fetch(partition, expected, entry.offset)
                    # No record in the gap: transaction markers (a topic written under exactly_once).
                    log.log(
                        logging.WARNING if missing else logging.DEBUG,
                        "partition %d: the stream skipped offsets %d..%d (%d entries); read directly",
                        partition,
                        expected,
                        entry.offset - 1,
                        len(missing),
                    )
                    result.filled += len(missing)
                    plan.extend(Entry(partition, offset, value) for offset, value in missing)
                plan.append(entry)
                expected = entry.offset + 1
            if through is not None and partition in through:
                expected = max(expected, through[partition])
            batches[partition] = _PartitionBatch(txn, self.step.begin(txn, partition), recorded, expected)
        return plan, result

    async def _process(self, entries: Sequence[Entry], through: Mapping[int, int] | None = None) -> BatchResult:
        started = time.perf_counter()
        batches: dict[int, _PartitionBatch] = {}
        plan, result = await self._plan(entries, batches, through)
        await self.sink.begin(sorted(batches))
        self.metrics.stage["begin"].observe(time.perf_counter() - started)
        try:
            return await self._commit(await self._engine(plan, result, batches, started))
        finally:
            self.sink.end()

    async def _engine(
        self, plan: list[Entry], result: BatchResult, batches: dict[int, _PartitionBatch], started: float
    ) -> _Flight:
        """Run the batch's entries and hand its outputs and statistics records to the sink."""
        clock = _Clock()
        result.entries = len(plan)
        deliveries: list[Awaitable[Delivered]] = []
        emitted: list[tuple[int, str, Emitted]] = []  # (source partition, primary topic, record)
        copies: list[Awaitable[Delivered]] = []  # the same record on a further topic (the repartition)
        source = self.step.source
        # Once per batch: the loop below runs per record.
        routes, append, send = self.step.routes, self.sink.append, self.sink.send
        # An Outgoing per output record, built as the tuple it is: calling the class runs the named tuple's
        # Python-level __new__, ~4,500 instructions an entry of the worker's batch path (bench/worker_icount.py).
        new_record = tuple.__new__
        add_delivery, add_emitted = deliveries.append, emitted.append
        early_flush = time.perf_counter() + EARLY_FLUSH_SECONDS

        for entry in plan:
            if time.perf_counter() >= early_flush:
                # Outputs leave while the rest of the batch runs (at-least-once, a reader sees them
                # once acknowledged); the batch's durability order is unchanged: everything is still
                # acknowledged before any change set. The yields let the producers write (EARLY_FLUSH_YIELDS).
                await self.sink.flush(early=True)
                for _ in range(EARLY_FLUSH_YIELDS):
                    await asyncio.sleep(0)
                early_flush = time.perf_counter() + EARLY_FLUSH_SECONDS
            source_partition, offset = entry.partition, entry.offset
            origin: dict[str, str | int] = {"topic": source, "partition": source_partition, "offset": offset}
            for index, record in enumerate(batches[source_partition].run.process(entry.value, origin)):
                headers = [
                    (SOURCE_HEADER, f"{source_partition}:{offset}:{index}".encode()),
                    (ID_HEADER, f"{record.record}:{record.record_id}".encode()),
                ]
                line = record.line
                for number, (topic, key) in enumerate(routes(record)):
                    # Unkeyed dead letters stay beside their source partition (same partition counts).
                    partition = None if key is not None else source_partition
                    outgoing = new_record(Outgoing, (topic, key, line, partition, headers, source_partition))
                    delivery = append(outgoing)
                    if delivery is None:
                        delivery = await send(outgoing)
                    if number == 0:
                        add_delivery(delivery)
                        add_emitted((source_partition, topic, record))
                    else:
                        copies.append(delivery)

        stage = self.metrics.stage
        stage["engine"].observe(clock.lap())
        # Table records (the statistics of every scope the batch changed) are outputs too: they go
        # out with the batch's last outputs, and one round trip acknowledges both.
        changed = {
            partition: batch
            for partition, batch in batches.items()
            if batch.next_offset != batch.recorded or batch.txn.staged
        }
        tables: list[Awaitable[Delivered]] = []
        for partition, batch in changed.items():
            for table in batch.run.finish(batch.txn.staged_keys()):
                tables.append(await self.sink.send(Outgoing(table.topic, table.key, table.value, None, [], partition)))
                result.table_records += 1
        stage["statistics"].observe(clock.lap())
        ahead: dict[int, list[Awaitable[Delivered]]] = {}
        if self.sink.transactional:
            # Under exactly_once nothing the batch writes is visible before its commit, so its change
            # sets need not wait for the outputs: they leave in the same round trip (and the producer
            # adds every partition to the transaction with one request instead of two). Only the
            # record index needs the outputs' offsets; it follows as a change set of its own.
            for partition, batch in changed.items():
                ahead[partition] = await self._send_change_set(partition, batch.txn.prepare(batch.next_offset), result)
        return _Flight(plan, result, batches, changed, deliveries, emitted, copies, tables, ahead, started)

    async def _commit(self, flight: _Flight, previous: "asyncio.Future[BatchResult] | None" = None) -> BatchResult:
        """Make a batch durable in the only safe order: outputs, then what records them, then local state
        (the same three steps as the embedded runner's ``coordinator.Run._commit``).

        ``previous``: the pipelined batch before, still being made durable; this batch's outputs are
        awaited beside it, its change sets only once it is durable (its failure is this one's).
        """
        plan, result, batches, changed = flight.plan, flight.result, flight.batches, flight.changed
        deliveries, emitted, copies, tables, ahead = (
            flight.deliveries,
            flight.emitted,
            flight.copies,
            flight.tables,
            flight.ahead,
        )
        clock = _Clock()
        stage = self.metrics.stage
        next_offsets = {partition: batch.next_offset for partition, batch in changed.items()}
        # One change set per partition per batch; the journal position travels inside it.
        transactional = self.sink.transactional
        # 1. Outputs: every output record is acknowledged by the broker before any state that records it.
        await self.sink.flush()
        acknowledged = await _all(deliveries)
        await _all(copies)
        await _all(tables)
        last = {partition: (await _all(parts))[-1] for partition, parts in ahead.items()}
        self.metrics.outputs_acked(plan)
        stage["outputs"].observe(clock.lap())
        # ``explain`` reads a record back from where the broker put it: index it in the state of the
        # source partition that produced it (the scope's partition, or the source's for an unkeyed one).
        indexes = {partition: self._index_transaction(partition) for partition in changed} if transactional else {}
        for (partition, topic, record), meta in zip(emitted, acknowledged, strict=True):
            txn = indexes[partition] if transactional else batches[partition].txn
            index_record(txn, record, orjson.dumps([topic, meta.partition, meta.offset]))
        if previous is not None:
            await asyncio.shield(previous)

        if transactional:
            change_sets = [(partition, txn.prepare()) for partition, txn in indexes.items() if txn.staged]
        else:
            change_sets = [(partition, batch.txn.prepare(batch.next_offset)) for partition, batch in changed.items()]
        # 2. What records them: the change sets (the journal position travels inside each) durable in the
        #    changelog, then the consumer offsets, before the local database sees them. A change set larger
        #    than one record goes out as consecutive parts (``changeset``); the local database records the
        #    offset of the last, the one that completes it.
        pending = [
            (partition, await self._send_change_set(partition, changes, result)) for partition, changes in change_sets
        ]
        await self.sink.flush()
        for partition, parts in pending:
            last[partition] = (await _all(parts))[-1]
        stage["changelog"].observe(clock.lap())
        if next_offsets:
            await self.sink.commit(sorted(next_offsets))
            stage["commit"].observe(clock.lap())
        # 3. Local state, atomically with the changelog offset recovery resumes from (a record index of its
        #    own is written just before: should the worker stop between the two, the recorded offset is the
        #    batch before's, and recovery applies both change sets again).
        for partition, batch in changed.items():
            record_index = indexes.get(partition)
            if record_index is not None and record_index.status == "prepared":
                record_index.flush()
            self.state.flush_local(partition, batch.txn, last[partition].offset)
        stage["local"].observe(clock.lap())

        for partition, batch in changed.items():
            if self._in_flight.get(partition) is batch:
                del self._in_flight[partition]  # durable: the next batch reads these rows from the store
        for _, _, record in emitted:
            result.record(record)
        result.change_sets = len(ahead) + len(change_sets)
        self._count(plan, result, next_offsets, time.perf_counter() - flight.started)
        return result

    async def _send_change_set(
        self, partition: int, changes: Mapping[bytes, bytes | None], result: BatchResult
    ) -> list[Awaitable[Delivered]]:
        values = changeset.encode_records(changes, self.limits.changelog_record_bytes)
        if len(values) > 1:
            result.change_set_parts += len(values)
        result.state_changes += len(changes)
        key = _scope_of(changes)
        changelog = self.step.changelog
        return [await self.sink.send(Outgoing(changelog, key, value, partition, [], partition)) for value in values]

    def _index_transaction(self, partition: int) -> Transaction:
        """The record index of a transactional batch, staged apart from the change set already sent."""
        return Transaction(self.state.partition_state(partition), self._caches[partition])

    def _count(
        self, entries: Sequence[Entry], result: BatchResult, next_offsets: Mapping[int, int], seconds: float
    ) -> None:
        m = self.metrics
        m.add(result)
        m.entries += len(entries)
        m.batches += 1
        m.batch_duration.observe(seconds)
        m.batch_entries.observe(len(entries))
        m.positions.update(next_offsets)
        if entries:
            log.debug(
                "batch of %d entries (%s) durable in %.3fs: %d records",
                len(entries),
                ", ".join(f"p{p}" for p in sorted(next_offsets)),
                seconds,
                sum(result.records.values()),
            )
