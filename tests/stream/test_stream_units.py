"""Broker-less checks of the stream path's own pieces (fast: no broker, so ``make test-fast`` runs them).

The batch processor runs over in-memory partition stores and a recording
sink: its ledger equals the embedded runner's, and the durability order
(outputs acknowledged, then change sets, then local state) holds for every
batch.
"""

import asyncio
from collections import Counter
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from devkit.deployment import write_journal
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.partitioning import partition_for
from recurrence_ledger.processor.core.recordindex import dead_letter_counts, record_key
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.stream.batch import changeset
from recurrence_ledger.processor.stream.batch.processing import (
    PIPELINE_DEPTH,
    POSITION_KEY,
    BatchIO,
    BatchLimits,
    BatchProcessor,
)
from recurrence_ledger.processor.stream.batch.types import ID_HEADER, SOURCE_HEADER, ChangelogRecord, Entry, Outgoing
from recurrence_ledger.processor.stream.clients.dump import record_id
from recurrence_ledger.processor.stream.clients.topicsapply import _describe_drift
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.processor.stream.worker.sink import _Batches
from recurrence_ledger.processor.stream.worker.snapshots import MAX_AGE
from recurrence_ledger.processor.verify import compare
from recurrence_ledger.topics.definitions import JOURNAL_MAX_RECORD_BYTES, OUTPUT_MAX_RECORD_BYTES, topic_specs
from tests.support.batchfakes import TOPICS, Journal, Partitions, RecordingSink, engine_step, entries_of, journal_lines


def _processor(
    entries: list[Entry], transactional: bool = False, limits: BatchLimits | None = None
) -> tuple[BatchProcessor, RecordingSink, Partitions, Journal]:
    state = Partitions()
    sink = RecordingSink(state.log, transactional)
    journal = Journal(entries)
    processor = BatchProcessor(BatchIO(journal, state, sink), engine_step(), limits=limits or BatchLimits())
    return processor, sink, state, journal


def _run(
    lines: list[bytes], batch: int, transactional: bool = False, pipelined: bool = False
) -> tuple[RecordingSink, Partitions]:
    entries = entries_of(lines)
    processor, sink, state, _ = _processor(entries, transactional)
    asyncio.run(_drive(processor, entries, batch, pipelined))
    return sink, state


async def _drive(processor: BatchProcessor, entries: list[Entry], batch: int, pipelined: bool) -> None:
    """Batches one after another, as the worker's agent runs them (pipelined: at-least-once)."""
    tails = []
    for start in range(0, len(entries), batch):
        if pipelined:
            tails.append(await processor.process_pipelined(entries[start : start + batch]))
        else:
            await processor.process(entries[start : start + batch])
    for tail in tails:
        await tail


def _outputs_in_source_order(sink: RecordingSink) -> list[bytes]:
    tagged = []
    for topic in TOPICS.outputs():
        for _key, value, headers in sink.sent.get(topic, []):
            source = dict(headers)[SOURCE_HEADER].decode()
            tagged.append((tuple(int(x) for x in source.split(":")), value))
    return [value for _, value in sorted(tagged)]


def test_every_output_carries_its_record_id_header() -> None:
    # Downstream consumers deduplicate by the header alone; it must be the id the record itself implies.
    sink, _ = _run(journal_lines(400, seed=3), 50)
    kinds = set()
    for topic in TOPICS.outputs():
        for _key, value, headers in sink.sent.get(topic, []):
            header = dict(headers)[ID_HEADER].decode()
            assert header == record_id(value), value[:80]
            kinds.add(header.split(":", 1)[0])
    assert {"match", "observation", "dead_letter", "admission"} <= kinds


@pytest.mark.parametrize("transactional", [False, True], ids=["at_least_once", "exactly_once"])
@pytest.mark.parametrize("batch", [1, 37, 500])
def test_batch_processor_equals_the_embedded_runner(tmp_path: Path, batch: int, transactional: bool) -> None:
    lines = journal_lines(600, seed=batch)
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, lines)
    oracle = Oracle.run(journal, tmp_path)
    sink, _ = _run(lines, batch, transactional)
    assert compare(ledger=oracle.records, outputs=_outputs_in_source_order(sink)).equal


@pytest.mark.parametrize("batch", [1, 37, 500])
def test_pipelined_batches_equal_the_embedded_runner_and_rebuild_the_same_state(tmp_path: Path, batch: int) -> None:
    # Each batch's engine runs on the rows of the batch before it while that one is still being made
    # durable: the outputs, the changelog and the local state must be exactly the sequential ones.
    lines = journal_lines(600, seed=batch)
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, lines)
    oracle = Oracle.run(journal, tmp_path)
    sink, state = _run(lines, batch, pipelined=True)
    assert compare(ledger=oracle.records, outputs=_outputs_in_source_order(sink)).equal
    sequential, sequential_state = _run(lines, batch)
    assert sink.changelog == sequential.changelog
    for partition, store in state.stores.items():
        assert list(store.iterate_prefix(b"[")) == list(sequential_state.stores[partition].iterate_prefix(b"["))


class _OrderCheckingSink(RecordingSink):
    """Fails the durability order as it happens: a change set is sent only once every output of the
    entries it records (its partition, below its journal position) is acknowledged."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        super().__init__(log)
        self.outputs: list[tuple[tuple[int, int], asyncio.Future[Any]]] = []  # (source entry, its delivery)
        self.violations: list[str] = []

    async def send(self, record: Outgoing) -> Awaitable[Any]:
        topic, _, value, _, headers, source_partition = record
        source = dict(headers).get(SOURCE_HEADER)
        if topic == TOPICS.changelog:
            position = changeset.decode(value).get(POSITION_KEY)
            if position is not None:
                early = [
                    where
                    for where, delivery in self.outputs
                    if not delivery.done() and where[0] == source_partition and where[1] < int(position)
                ]
                if early:
                    self.violations.append(f"p{source_partition} change set before outputs of {sorted(early)[:3]}")
        delivery = await super().send(record)
        if source is not None:
            where = (int(source.split(b":")[0]), int(source.split(b":")[1]))
            self.outputs.append((where, cast(asyncio.Future[Any], delivery)))
        return delivery


def test_pipelined_batches_overlap_and_each_keeps_the_durability_order() -> None:
    entries = entries_of(journal_lines(300, seed=3))
    state = Partitions()
    sink = _OrderCheckingSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    overlapped = 0

    async def main() -> None:
        nonlocal overlapped
        tails: list[asyncio.Future[Any]] = []
        for start in range(0, len(entries), 50):
            if tails and not tails[-1].done():
                overlapped += 1  # this batch's engine runs while the one before is made durable
            tails.append(await processor.process_pipelined(entries[start : start + 50]))
        for tail in tails:
            await tail

    asyncio.run(main())
    assert overlapped >= 4, "the batches ran one after another"
    assert not sink.violations, sink.violations
    # Local state only after every change set sent so far is acknowledged: batches become durable in order.
    sent = acked = 0
    for event in state.log:
        sent += event == ("send", "changelog")
        acked += event == ("ack", "changelog")
        if event[0] == "local":
            assert acked == sent, "local state written before a change set was durable"
    assert state.log.count(("send", "changelog")) >= 6


class _GatedSink(RecordingSink):
    """Output acknowledgements wait for ``gate``: the broker is slow until the test opens it."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        super().__init__(log)
        self.gate = asyncio.Event()

    async def send(self, record: Outgoing) -> Awaitable[Any]:
        delivery = await super().send(record)
        if record.topic == TOPICS.changelog:
            return delivery

        async def acknowledged() -> Any:
            await self.gate.wait()
            return await delivery

        return asyncio.ensure_future(acknowledged())


def test_two_batches_are_made_durable_at_once_and_a_third_waits_for_the_first() -> None:
    assert PIPELINE_DEPTH == 2
    entries = entries_of(journal_lines(150, seed=4))
    state = Partitions()
    sink = _GatedSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    positions: dict[int, list[int]] = {}

    async def main() -> None:
        first = await processor.process_pipelined(entries[:50])
        # No wait: two may be in flight (a deeper wait would hang on the gate).
        second = await asyncio.wait_for(processor.process_pipelined(entries[50:100]), 10)
        third = asyncio.ensure_future(processor.process_pipelined(entries[100:]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not first.done() and not second.done()
        assert not third.done(), "a third batch was made durable while two were"
        assert ("send", "changelog") not in state.log, "a change set went out before its outputs were durable"
        sink.gate.set()
        await first
        await second
        await (await third)

    asyncio.run(main())
    for partition, values in sink.changelog.items():
        for value in values:
            position = changeset.decode(value).get(POSITION_KEY)
            if position is not None:
                positions.setdefault(partition, []).append(int(position))
    # Each partition's change sets went out batch after batch, in order, and all three batches wrote one.
    assert all(found == sorted(set(found)) for found in positions.values()), positions
    assert max(len(found) for found in positions.values()) == 3


def test_outputs_are_acknowledged_before_change_sets_and_change_sets_before_local_state() -> None:
    entries = entries_of(journal_lines(300, seed=3))
    processor, _sink, state, _ = _processor(entries)
    for start in range(0, len(entries), 50):
        state.log.clear()
        asyncio.run(processor.process(entries[start : start + 50]))
        log = list(state.log)
        output_acks = [i for i, e in enumerate(log) if e == ("ack", "output")]
        changelog_sends = [i for i, e in enumerate(log) if e == ("send", "changelog")]
        changelog_acks = [i for i, e in enumerate(log) if e == ("ack", "changelog")]
        (commit,) = [i for i, e in enumerate(log) if e[0] == "commit"]
        local = [i for i, e in enumerate(log) if e[0] == "local"]
        assert changelog_sends and local
        assert max(output_acks, default=-1) < min(changelog_sends), "change set sent before outputs were durable"
        assert max(changelog_acks) < commit < min(local), "local state written before the changelog was durable"


@pytest.mark.parametrize("transactional", [False, True], ids=["at_least_once", "exactly_once"])
def test_changelog_replay_rebuilds_the_same_state(transactional: bool) -> None:
    sink, state = _run(journal_lines(400, seed=5), 64, transactional)
    rebuilt: dict[int, MemoryStore] = {}
    for partition, values in sink.changelog.items():
        for value in values:
            rebuilt.setdefault(partition, MemoryStore()).apply(changeset.decode(value))
    for partition, store in state.stores.items():
        assert list(store.iterate_prefix(b"[")) == list(rebuilt[partition].iterate_prefix(b"["))


def test_redelivered_entries_are_skipped_by_position() -> None:
    entries = entries_of(journal_lines(200, seed=11))
    processor, sink, _, _ = _processor(entries)
    asyncio.run(processor.process(entries))
    sink.sent.clear()
    result = asyncio.run(processor.process(entries))
    assert result.skipped == len(entries) and result.entries == 0
    assert not sink.sent, "a redelivered entry produced output"


@pytest.mark.parametrize("bound", [None, 25])
def test_entries_the_stream_skipped_are_read_directly(tmp_path: Path, bound: int | None) -> None:
    lines = journal_lines(500, seed=13)
    journal_file = tmp_path / "journal.jsonl"
    write_journal(journal_file, lines)
    oracle = Oracle.run(journal_file, tmp_path)
    entries = entries_of(lines)
    processor, sink, _, journal = _processor(entries, limits=None if bound is None else BatchLimits(bound))
    delivered = [e for i, e in enumerate(entries) if i % 7 not in (3, 4)]  # the stream drops some
    tail = delivered[-40:]
    delivered = [e for e in delivered if e not in tail]  # and the tail is never delivered

    async def main() -> None:
        for start in range(0, len(delivered), 60):
            await processor.process(delivered[start : start + 60])
        for partition, values in journal.by_partition.items():
            while (processor.position(partition) or 0) < max(values) + 1:  # as the catch-up timer does, tick by tick
                result = await processor.catch_up(partition, max(values) + 1)
                assert bound is None or result.entries <= bound

    asyncio.run(main())
    assert journal.fetched, "gaps were not read from the journal"
    assert processor.metrics.filled == len(entries) - len(delivered)
    assert compare(ledger=oracle.records, outputs=_outputs_in_source_order(sink)).equal
    for partition, values in journal.by_partition.items():
        assert processor.position(partition) == max(values) + 1


@given(st.dictionaries(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=40)), max_size=30))
def test_change_set_round_trip(changes: dict[bytes, bytes | None]) -> None:
    encoded = changeset.encode(changes)
    assert changeset.is_changeset(encoded)
    assert changeset.decode(encoded) == changes
    with pytest.raises(changeset.ChangeSetError):
        changeset.decode(encoded + b"\x00")
    if changes:
        with pytest.raises(changeset.ChangeSetError):
            changeset.decode(encoded[:-1])


def test_topics_are_co_partitioned_and_only_statistics_and_snapshots_are_compacted() -> None:
    specs = topic_specs(StreamSettings(topic_prefix="p", partitions=6, replication=3, min_insync=2))
    assert {s.role for s in specs} == {
        "journal",
        "ledger",
        "review",
        "dead-letters",
        "changelog",
        "statistics",
        "repartition",
        "patterns",
        "patterns-changelog",
        "snapshots",
    }
    for spec in specs:
        assert spec.partitions == 6 and spec.replication == 3
        # Records written whole take the largest dead letter of a journal record; changelogs split theirs.
        records = {
            "journal": JOURNAL_MAX_RECORD_BYTES,
            "changelog": None,
            "patterns-changelog": None,
            "snapshots": 8 * 1024 * 1024,
        }.get(spec.role, OUTPUT_MAX_RECORD_BYTES)
        sized = {} if records is None else {"max.message.bytes": str(records)}
        if spec.role == "statistics":
            # A table topic: the last value per scope is its statistics.
            assert spec.config == {"cleanup.policy": "compact", "min.insync.replicas": "2", **sized}
        elif spec.role == "snapshots":
            # Superseded snapshots compacted away, unfinished uploads aged out (snapshots.MAX_AGE is 1 day).
            assert spec.config["cleanup.policy"] == "compact,delete"
            assert int(spec.config["retention.ms"]) > 2 * MAX_AGE * 1000
            assert spec.config["max.message.bytes"] == sized["max.message.bytes"]
        else:
            assert spec.config == {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "min.insync.replicas": "2",
                **sized,
            }
    # A dead letter's raw text is escaped in JSON: at most six bytes per journal byte, and some framing.
    assert OUTPUT_MAX_RECORD_BYTES > 6 * JOURNAL_MAX_RECORD_BYTES + 64 * 1024
    names = {s.name for s in specs}
    assert {
        "p-state-changelog",
        "p.statistics",
        "p.patterns",
        "p-recurred-repartition",
        "p-patterns-changelog",
        "p-snapshots",
    } <= names


def test_a_larger_record_limit_is_drift_on_the_journal_only() -> None:
    specs = {s.role: s for s in topic_specs(StreamSettings(topic_prefix="p"))}

    def drift(role: str, limit: int) -> list[str]:
        spec = specs[role]
        configs = {**spec.config, "max.message.bytes": str(limit)}
        return _describe_drift(spec, spec.partitions, spec.replication, configs)

    # An output topic may take larger records than defined (a match past 8 MiB needs that), not smaller ones.
    assert drift("ledger", OUTPUT_MAX_RECORD_BYTES) == drift("ledger", 64 * 1024 * 1024) == []
    assert drift("ledger", OUTPUT_MAX_RECORD_BYTES - 1) == [
        f"max.message.bytes={OUTPUT_MAX_RECORD_BYTES - 1}, the definition says at least {OUTPUT_MAX_RECORD_BYTES} "
        "(safe to change in place: kafka-configs.sh --alter --entity-type topics --entity-name p.ledger "
        f"--add-config max.message.bytes={OUTPUT_MAX_RECORD_BYTES})"
    ]
    # The journal's limit is exact: a larger one admits entries whose dead letters the outputs refuse.
    assert drift("journal", JOURNAL_MAX_RECORD_BYTES) == []
    assert drift("journal", 2 * JOURNAL_MAX_RECORD_BYTES) == [
        f"max.message.bytes={2 * JOURNAL_MAX_RECORD_BYTES}, the definition says {JOURNAL_MAX_RECORD_BYTES} "
        "(safe to change in place: kafka-configs.sh --alter --entity-type topics --entity-name p.journal "
        f"--add-config max.message.bytes={JOURNAL_MAX_RECORD_BYTES})"
    ]
    # The changelogs split their records and define no limit; other configs stay exact.
    assert "max.message.bytes" not in specs["changelog"].config
    spec = specs["ledger"]
    assert _describe_drift(spec, spec.partitions, spec.replication, {**spec.config, "retention.ms": "1000"}) == [
        "retention.ms=1000, the definition says -1"
    ]


def test_partition_for_matches_the_java_default_partitioner() -> None:
    # Values from Kafka's Utils.murmur2 (org.apache.kafka.common.utils.Utils), 4 partitions.
    from aiokafka.partitioner import DefaultPartitioner

    partitioner = DefaultPartitioner()
    for scope in ("team-a", "rfc-minimum", "scope-007", "ü"):
        assert partition_for(scope, 4) == partitioner(scope.encode(), [0, 1, 2, 3], [0, 1, 2, 3])


@pytest.mark.parametrize("transactional", [False, True], ids=["at_least_once", "exactly_once"])
def test_every_output_is_indexed_where_the_broker_put_it(transactional: bool) -> None:
    # ``/explain`` reads a record back by the index row its batch wrote: [topic, partition, offset].
    sink, state = _run(journal_lines(400, seed=7), 64, transactional)
    codes: Counter[str] = Counter()
    for topic in TOPICS.outputs():
        for offset, (key, value, headers) in enumerate(sink.sent.get(topic, [])):
            source = int(dict(headers)[SOURCE_HEADER].decode().split(":")[0])
            written = source if key is None else partition_for(key.decode(), 4)
            ident = record_id(value).split(":", 1)[1]
            assert state.stores[source].get(record_key(ident)) == orjson.dumps([topic, written, offset])
            if topic == TOPICS.dead_letters:
                codes[orjson.loads(value)["error"]] += 1
    counted: Counter[str] = Counter()
    for store in state.stores.values():
        counted.update(dead_letter_counts(Transaction(store)))
    assert counted == codes and sum(codes.values()) > 0


class RestoringPartitions(Partitions):
    """Partitions that know which changelog offset they hold, as the table's stores do."""

    def __init__(self) -> None:
        super().__init__()
        self.offsets: dict[int, int] = {}

    def changelog_offset(self, partition: int) -> int | None:
        return self.offsets.get(partition)

    def apply_changelog(self, partition: int, records: Sequence[ChangelogRecord]) -> None:
        for offset, _key, value in records:
            if offset <= self.offsets.get(partition, -1):
                continue
            assert value is not None
            self.partition_state(partition).apply(changeset.decode(value))
            self.offsets[partition] = offset


class Changelog:
    """``ChangelogSource`` over change sets recorded per partition (offset = index)."""

    def __init__(self, change_sets: Mapping[int, list[bytes]]) -> None:
        self.records = {p: [(i, b"scope", v) for i, v in enumerate(values)] for p, values in change_sets.items()}

    async def log_end(self, partition: int) -> int:
        return len(self.records.get(partition, []))

    async def fetch_records(self, partition: int, start: int, stop: int) -> list[ChangelogRecord]:
        return [r for r in self.records.get(partition, []) if start <= r[0] < stop]


@pytest.mark.parametrize("transactional", [False, True], ids=["at_least_once", "exactly_once"])
def test_a_restore_that_missed_committed_change_sets_is_completed_before_the_first_batch(transactional: bool) -> None:
    # Faust's exactly_once recovery can end with a fetched change set not applied. The processor
    # reads the rest back from the changelog before the partition's first batch after an
    # assignment, so nothing committed is run (and emitted) a second time.
    entries = entries_of(journal_lines(400, seed=7))
    done, rest = entries[:250], entries[250:]
    first, first_sink, _, _ = _processor(entries, transactional)
    for start in range(0, len(done), 50):
        asyncio.run(first.process(done[start : start + 50]))
    state = RestoringPartitions()
    for partition, values in first_sink.changelog.items():
        state.apply_changelog(partition, [(0, b"scope", values[0])])  # the restore stopped after one
    sink = RecordingSink(state.log, transactional)
    changelog = Changelog(first_sink.changelog)
    second = BatchProcessor(BatchIO(Journal(entries), state, sink, changelog), engine_step())
    second.assigned()
    for start in range(0, len(entries), 50):  # the stream hands everything over again
        asyncio.run(second.process(entries[start : start + 50]))

    missing = sum(len(values) - 1 for values in changelog.records.values())
    assert missing > 0 and second.metrics.restore_repaired == missing
    whole, whole_sink, _, _ = _processor(entries, transactional)
    for start in range(0, len(entries), 50):
        asyncio.run(whole.process(entries[start : start + 50]))
    # Every record once: what the first owner emitted plus what the second did is the whole run.
    assert sorted(_tagged(first_sink) + _tagged(sink)) == sorted(_tagged(whole_sink))
    assert rest


def _tagged(sink: RecordingSink) -> list[tuple[str, bytes]]:
    return [(dict(h)[SOURCE_HEADER].decode(), v) for t in TOPICS.outputs() for _k, v, h in sink.sent.get(t, [])]


class _FlushRecordingSink(RecordingSink):
    """Also records flushes, and tells statistics records from other outputs."""

    async def send(self, record: Outgoing) -> Awaitable[Any]:
        topic, key, value, _, headers, source_partition = record
        if topic != TOPICS.statistics:
            return await super().send(record)
        self.log.append(("send", "statistics"))
        self.sent.setdefault(topic, []).append((key, value, headers))

        async def acknowledged() -> Any:
            await asyncio.sleep(0)
            self.log.append(("ack", "statistics"))
            return SimpleNamespace(partition=source_partition, offset=0)

        return asyncio.ensure_future(acknowledged())

    async def flush(self, early: bool = False) -> None:
        self.log.append(("flush", early))


def _positions(log: list[tuple[str, Any]], event: tuple[str, Any]) -> list[int]:
    return [i for i, e in enumerate(log) if e == event]


def test_outputs_leave_during_a_batch_and_are_durable_before_its_change_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recurrence_ledger.processor.stream.batch import processing

    monkeypatch.setattr(processing, "EARLY_FLUSH_SECONDS", 0.0)  # an early flush before every entry
    lines = journal_lines(300, seed=17)
    journal_file = tmp_path / "journal.jsonl"
    write_journal(journal_file, lines)
    entries = entries_of(lines)
    state = Partitions()
    sink = _FlushRecordingSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    early = 0
    for start in range(0, len(entries), 60):
        state.log.clear()
        asyncio.run(processor.process(entries[start : start + 60]))
        log = list(state.log)
        early += len(_positions(log, ("flush", True)))
        assert max(_positions(log, ("ack", "output")), default=-1) < min(_positions(log, ("send", "changelog")))
    assert early >= len(entries) - 5
    assert compare(ledger=Oracle.run(journal_file, tmp_path).records, outputs=_outputs_in_source_order(sink)).equal


class _ChainSink(RecordingSink):
    """At ``begin``, starts background work that needs one event loop turn per step, like a
    producer's coordinator requests (each response read, then its waiter woken, then the next
    request written); records how far it got at each early flush."""

    STEPS = 3

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        super().__init__(log, transactional=True)
        self.steps = 0
        self.at_flush: list[int] = []

    async def begin(self, partitions: Sequence[int]) -> None:
        await super().begin(partitions)
        self.steps = 0
        loop = asyncio.get_running_loop()

        def step() -> None:
            self.steps += 1
            if self.steps < self.STEPS:
                loop.call_soon(step)

        loop.call_soon(step)

    async def flush(self, early: bool = False) -> None:
        if early:
            self.at_flush.append(self.steps)


def test_each_early_flush_point_gives_the_producers_several_loop_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine holds the event loop between flush points; a chain of coordinator requests begun
    # with the batch must not need one flush point per step (it was still running at the batch's end).
    from recurrence_ledger.processor.stream.batch import processing

    monkeypatch.setattr(processing, "EARLY_FLUSH_SECONDS", 0.0)  # a flush point before every entry
    entries = entries_of(journal_lines(40, seed=29))
    state = Partitions()
    sink = _ChainSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    asyncio.run(processor.process(entries))
    # The first flush point comes before the first entry: by the second, the whole chain has run.
    assert sink.at_flush[:2] == [0, _ChainSink.STEPS]


def test_statistics_go_out_with_the_last_outputs_and_are_durable_before_the_change_sets() -> None:
    entries = entries_of(journal_lines(300, seed=19))
    state = Partitions()
    sink = _FlushRecordingSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    asyncio.run(processor.process(entries))
    log = state.log
    statistics_sends = _positions(log, ("send", "statistics"))
    changelog_sends = _positions(log, ("send", "changelog"))
    assert statistics_sends and changelog_sends
    # Two round trips per batch: the outputs with the statistics, then the change sets.
    flushes = _positions(log, ("flush", False))
    assert len(flushes) == 2
    assert max(statistics_sends) < flushes[0] < min(changelog_sends) < flushes[1]
    # Both kinds of output are acknowledged before any change set (their offsets are indexed in it).
    assert max(_positions(log, ("ack", "output")) + _positions(log, ("ack", "statistics"))) < min(changelog_sends)


def test_a_transactional_batch_sends_its_change_sets_with_its_outputs_and_its_record_index_after_them() -> None:
    # Under exactly_once nothing is visible before the commit: the change sets need not wait for the
    # outputs, only the record index (it holds their offsets) does; the commit follows every
    # acknowledgement, and the local state the commit.
    entries = entries_of(journal_lines(300, seed=23))
    state = Partitions()
    sink = _FlushRecordingSink(state.log, transactional=True)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    for start in range(0, len(entries), 60):
        state.log.clear()
        changelog_before = {partition: len(values) for partition, values in sink.changelog.items()}
        asyncio.run(processor.process(entries[start : start + 60]))
        log = list(state.log)
        flushes = _positions(log, ("flush", False))
        changelog_sends = _positions(log, ("send", "changelog"))
        assert len(flushes) == 2
        main = [i for i in changelog_sends if i < flushes[0]]
        index = [i for i in changelog_sends if flushes[0] < i < flushes[1]]
        assert main and index and len(main) + len(index) == len(changelog_sends)
        assert max(_positions(log, ("ack", "output"))) < min(index), "record index sent before the outputs' offsets"
        (commit,) = [i for i, e in enumerate(log) if e[0] == "commit"]
        local = [i for i, e in enumerate(log) if e[0] == "local"]
        assert max(_positions(log, ("ack", "changelog"))) < commit < min(local)
        for partition, values in sink.changelog.items():
            new = [changeset.decode(v) for v in values[changelog_before.get(partition, 0) :]]
            if len(new) == 2:  # the batch's change set, then its record index (the only rows in the second)
                assert all(key.startswith((b'["rid",', b'["dlc",')) for key in new[1])
                assert not any(key.startswith((b'["rid",', b'["dlc",')) for key in new[0])


class _Builder:
    """An aiokafka ``BatchBuilder`` as ``_Batches`` uses it: records counted, None once ``room`` is full."""

    def __init__(self, room: int | None = None) -> None:
        self.records, self.room = 0, room

    def append(self, **_: Any) -> Any:
        if self.records == self.room:
            return None
        self.records += 1
        return SimpleNamespace(offset=self.records - 1)

    def close(self) -> None:
        pass


def test_an_early_flush_waits_while_the_previous_send_is_unacknowledged() -> None:
    class Producer:
        def __init__(self) -> None:
            self.sent: list[tuple[int, asyncio.Future[Any]]] = []

        def create_batch(self) -> _Builder:
            return _Builder()

        async def send_batch(self, builder: _Builder, topic: str, partition: int) -> asyncio.Future[Any]:
            self.sent.append((builder.records, asyncio.get_running_loop().create_future()))
            return self.sent[-1][1]

    async def run() -> list[int]:
        producer, batches = Producer(), _Batches()
        first = await batches.send(producer, Outgoing("t", b"k", b"v", 0, [], 0))
        await batches.flush(early=True)  # nothing in flight: sent
        second = await batches.send(producer, Outgoing("t", b"k", b"v", 0, [], 0))
        await batches.flush(early=True)  # the first is unacknowledged: kept
        sent_while_waiting = len(producer.sent)
        producer.sent[0][1].set_result(SimpleNamespace(offset=10))
        await batches.flush(early=True)  # acknowledged now: the second goes
        third = await batches.send(producer, Outgoing("t", b"k", b"v", 0, [], 0))
        await batches.flush()  # a batch's last flush sends even with the second unacknowledged
        producer.sent[1][1].set_result(SimpleNamespace(offset=11))
        producer.sent[2][1].set_result(SimpleNamespace(offset=12))
        return [
            sent_while_waiting,
            len(producer.sent),
            (await first).offset,
            (await second).offset,
            (await third).offset,
        ]

    assert asyncio.run(run()) == [1, 3, 10, 11, 12]


def test_a_keyed_records_partition_is_the_default_partitioners_and_its_memo_is_bounded() -> None:
    class Producer:
        asked = 0

        async def partitions_for(self, topic: str) -> set[int]:
            Producer.asked += 1
            return {0, 1, 2, 3, 4, 5}

    async def run() -> list[int]:
        batches, producer = _Batches(remembered_keys=50), Producer()
        keys = [f"scope-{n}".encode() for n in range(120)]
        chosen = [await batches.partition_for(producer, "t", key) for key in keys + keys]
        assert len(batches._chosen) <= 50
        return chosen

    from aiokafka.partitioner import DefaultPartitioner

    partitioner = DefaultPartitioner()
    keys = [f"scope-{n}".encode() for n in range(120)]
    want = [partitioner(key, list(range(6)), list(range(6))) for key in keys + keys]
    assert asyncio.run(run()) == want  # remembered, forgotten at the bound, computed again: always the same
    assert Producer.asked == 1  # the partition count is asked once per topic


def test_append_takes_a_record_without_a_coroutine_only_where_send_would_append_it() -> None:
    class Producer:
        def __init__(self) -> None:
            self.sent: list[tuple[int, int, asyncio.Future[Any]]] = []  # (partition, records, acknowledgement)

        def create_batch(self) -> _Builder:
            return _Builder(room=2)

        async def partitions_for(self, topic: str) -> set[int]:
            return {0, 1, 2, 3}

        async def send_batch(self, builder: _Builder, topic: str, partition: int) -> asyncio.Future[Any]:
            self.sent.append((partition, builder.records, asyncio.get_running_loop().create_future()))
            return self.sent[-1][2]

    async def run() -> None:
        producer, batches = Producer(), _Batches()
        at_0, keyed_record = Outgoing("t", None, b"v", 0, [], 0), Outgoing("t", b"scope-1", b"v", None, [], 0)
        assert batches.append(producer, at_0) is None  # no batch open for partition 0
        first = await batches.send(producer, at_0)  # opens it
        second = batches.append(producer, at_0)
        assert second is not None  # room in the open batch: taken at once
        assert batches.append(producer, at_0) is None  # full: only send sends it and opens one
        third = await batches.send(producer, at_0)
        assert [(p, n) for p, n, _ in producer.sent] == [(0, 2)]
        assert batches.append(producer, keyed_record) is None  # the key's partition is unknown
        keyed = await batches.send(producer, keyed_record)
        again = batches.append(producer, keyed_record)
        assert again is not None  # known now, and its batch has room
        await batches.flush()
        for n, (_, _, acknowledged) in enumerate(producer.sent):
            acknowledged.set_result(SimpleNamespace(offset=100 * n))
        partition = await batches.partition_for(producer, "t", b"scope-1")
        assert [((await d).partition, (await d).offset) for d in (first, second, third, keyed, again)] == [
            (0, 0),
            (0, 1),
            (0, 100),
            (partition, 200),
            (partition, 201),
        ]

    asyncio.run(run())


def test_a_batch_adds_every_count_it_carries_to_the_workers_metrics_under_the_same_name() -> None:
    from dataclasses import fields

    from recurrence_ledger.processor.stream.batch.metrics import BatchCounts, Metrics
    from recurrence_ledger.processor.stream.batch.processing import BatchResult

    counted = [f.name for f in fields(BatchCounts) if f.name not in ("entries", "records", "dead_letters")]
    batch = BatchResult()
    for index, name in enumerate(counted):
        setattr(batch, name, index + 2)
    batch.records["match"] = 3
    metrics = Metrics()
    metrics.add(batch)
    metrics.add(batch)
    assert {name: getattr(metrics, name) for name in counted} == {name: 2 * (i + 2) for i, name in enumerate(counted)}
    assert metrics.records["match"] == 6 and metrics.entries == 0
