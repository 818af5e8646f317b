"""Broker-less checks of the worker's statistics table topic and its patterns agent (issue 11.2, 11.3).

The journal agent's batch processor runs over in-memory partitions with a
recording sink; its repartition records then feed the patterns agent's batch
processor, with duplicates and redeliveries mixed in. The embedded runner is
the oracle for both: the last statistics value per scope equals ``recurrence
stats``, and the pattern suggestions and rows equal ``recurrence patterns`` (the rows as
the worker's ``/patterns`` merges its partitions).
"""

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.deployment import write_journal
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.partitioning import partition_for
from recurrence_ledger.processor.core.patterns import listing, suggestion
from recurrence_ledger.processor.embedded.runner import ReplayOptions, replay
from recurrence_ledger.processor.embedded.statedir import MemoryState
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.stream.batch.metrics import Metrics
from recurrence_ledger.processor.stream.batch.processing import BatchIO, BatchProcessor
from recurrence_ledger.processor.stream.batch.steps import PatternStep
from recurrence_ledger.processor.stream.batch.types import ID_HEADER, Entry
from recurrence_ledger.processor.stream.worker.views import NotReadyError, PatternTable, ReadSurface
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.schemas.constants import DEFAULT_PATTERN_SCOPES
from tests.support.batchfakes import TOPICS, Journal, Partitions, RecordingSink, engine_step, entries_of

PARTITIONS = 4


def _engine_run(lines: list[bytes], batch: int) -> tuple[RecordingSink, list[int]]:
    """The journal agent over the lines; the sink and the number of statistics records per batch."""
    entries = entries_of(lines, PARTITIONS)
    state = Partitions()
    sink = RecordingSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    per_batch: list[int] = []

    async def main() -> None:
        for start in range(0, len(entries), batch):
            before = len(sink.sent.get(TOPICS.statistics, []))
            chunk = entries[start : start + batch]
            await processor.process(chunk)
            written = sink.sent.get(TOPICS.statistics, [])[before:]
            keys = [key for key, _, _ in written]
            assert len(keys) == len(set(keys)), "a scope's statistics were written twice in one batch"
            per_batch.append(len(keys))

    asyncio.run(main())
    return sink, per_batch


def _last_values(sink: RecordingSink, topic: str) -> dict[bytes, Any]:
    table: dict[bytes, Any] = {}
    for key, value, _ in sink.sent.get(topic, []):
        assert key is not None
        table[key] = orjson.loads(value)
    return table


@pytest.fixture(scope="module")
def multi_scope(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[bytes], Oracle]:
    # The journal the issue names: `recurrence generate --entries 3000 --scopes 10 --seed 8`.
    lines = list(generate(JournalSpec(entries=3000, scopes=10, seed=8)))
    workdir = tmp_path_factory.mktemp("multi-scope")
    journal = workdir / "journal.jsonl"
    write_journal(journal, lines)
    return lines, Oracle.run(journal, workdir)


def test_statistics_topic_holds_what_recurrence_stats_prints(multi_scope: tuple[list[bytes], Oracle]) -> None:
    lines, oracle = multi_scope
    sink, per_batch = _engine_run(lines, batch=211)
    table = _last_values(sink, TOPICS.statistics)
    assert [table[key] for key in sorted(table)] == oracle.statistics()
    for key, value in table.items():
        assert key.decode() == value["scope_id"]
    # One record per changed scope per batch, never one per entry.
    assert sum(per_batch) == len(sink.sent[TOPICS.statistics]) < len(lines) / 10
    assert max(per_batch) <= 10


def test_a_batch_that_changes_no_scope_writes_no_statistics() -> None:
    garbage = [b"not json", b"{}", b'{"type": "nope"}']
    sink, per_batch = _engine_run(garbage, batch=10)
    assert per_batch == [0] and TOPICS.statistics not in sink.sent
    assert sink.sent[TOPICS.dead_letters]


def _repartitioned(sink: RecordingSink) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    records = sink.sent.get(TOPICS.recurred, [])
    for key, value, _ in records:
        observation = orjson.loads(value)
        assert observation["record"] == "observation" and observation["event"] == "recurred"
        assert key == observation["signature_key"].encode()
    assert len(records) == sum(
        1 for _, value, _ in sink.sent[TOPICS.ledger] if orjson.loads(value).get("event") == "recurred"
    )
    return [(key, value, headers) for key, value, headers in records if key is not None]


def _patterns_run(
    records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]], min_scopes: int, seed: int
) -> tuple[RecordingSink, Partitions]:
    """The patterns agent over the repartition records, with at-least-once copies and redeliveries."""
    rng = random.Random(seed)
    # The journal agent re-emits some observations after a "crash": the copies are new records later on.
    stream = list(records) + [records[i] for i in sorted(rng.sample(range(len(records)), len(records) // 5))]
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    entries: list[Entry] = []
    for key, value, _ in stream:
        partition = partition_for(key.decode(), PARTITIONS)
        entries.append(Entry(partition, offsets[partition], value))
        offsets[partition] += 1
    state = Partitions()
    sink = RecordingSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), PatternStep(TOPICS, min_scopes))

    async def main() -> None:
        at = 0
        while at < len(entries):
            size = rng.randint(1, 40)
            await processor.process(entries[at : at + size])
            if rng.random() < 0.3:  # the stream delivers a batch again: skipped by position
                await processor.process(entries[max(0, at - 5) : at + size])
            at += size

    asyncio.run(main())
    return sink, state


def _surface(patterns: Partitions, min_scopes: int, ready: set[int]) -> ReadSurface:
    """The worker's read surface over the patterns table's partitions (one worker owning all of them)."""
    owned = set(range(PARTITIONS))
    return ReadSurface(
        state=Partitions(),
        config=EngineConfig(pattern_scopes=min_scopes),
        metrics=Metrics(),
        partitions=PARTITIONS,
        my_url="http://w1",
        ready_partitions=lambda: owned,
        owners=lambda: {"http://w1": owned},
        lag=dict,
        probe=lambda: pytest.fail("not read"),
        pattern_table=PatternTable(state=patterns, ready_partitions=lambda: ready, owners=lambda: {"http://w1": owned}),
    )


@pytest.mark.parametrize("min_scopes", [3, 2])
def test_patterns_agent_equals_the_embedded_tracker(
    multi_scope: tuple[list[bytes], Oracle], min_scopes: int, tmp_path: Path
) -> None:
    lines, oracle = multi_scope
    journal_sink, _ = _engine_run(lines, batch=500)
    expected = _oracle_rows(lines, min_scopes, tmp_path)
    if min_scopes == DEFAULT_PATTERN_SCOPES:
        assert expected == listing(Transaction(oracle.store), min_scopes, suggested_only=False)
        assert len([row for row in expected if row["suggested"]]) == 8  # as the closing note says

    sink, state = _patterns_run(_repartitioned(journal_sink), min_scopes, seed=min_scopes)
    sent = sink.sent.get(TOPICS.patterns, [])
    lines_sent = [value for _, value, _ in sent]
    assert len(lines_sent) == len(set(lines_sent)), "a suggestion was emitted twice"
    want = {suggestion(row["signature_key"], min_scopes).line for row in expected if row["suggested"]}
    assert set(lines_sent) == want
    for key, value, headers in sent:
        record = orjson.loads(value)
        assert key == record["signature_key"].encode()
        assert dict(headers)[ID_HEADER] == f"pattern:{record['pattern_id']}".encode()
    # The rows, recurrence counts included: every copy and redelivery changed nothing. They are what the
    # worker's /patterns lists: each partition's listing, merged in listing's order.
    assert len(state.stores) == PARTITIONS, "every partition holds keys: the merge is exercised"
    surface = _surface(state, min_scopes, ready=set(range(PARTITIONS)))
    assert surface.local_patterns(range(PARTITIONS)) == expected
    # A partition that is not ready here makes the answer a refusal, never a shorter list.
    with pytest.raises(NotReadyError, match="patterns partition 2"):
        _surface(state, min_scopes, ready={0, 1, 3}).local_patterns(range(PARTITIONS))


def _oracle_rows(lines: list[bytes], min_scopes: int, workdir: Path) -> list[dict[str, Any]]:
    """``recurrence patterns --all --json`` of an embedded replay with ``--pattern-scopes``."""
    state = MemoryState()
    journal = workdir / "journal.jsonl"
    write_journal(journal, lines)
    replay(str(journal), state, workdir / "ledger.jsonl", ReplayOptions(EngineConfig(pattern_scopes=min_scopes)))
    return listing(Transaction(state.view()), min_scopes, suggested_only=False)


def test_a_foreign_record_on_the_repartition_topic_is_skipped() -> None:
    state = Partitions()
    sink = RecordingSink(state.log)
    entries = [Entry(0, 0, b"not json"), Entry(0, 1, b'{"record": "match"}'), Entry(0, 2, b'{"record": "observation"}')]
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), PatternStep(TOPICS, 3))
    asyncio.run(processor.process(entries))
    assert TOPICS.patterns not in sink.sent
    assert processor.position(0) == 3  # consumed, not retried forever


def test_catching_up_moves_past_offsets_that_hold_no_record() -> None:
    # Under exactly_once the repartition topic ends with commit markers: offsets without a record.
    lines = list(generate(JournalSpec(entries=40, scopes=1, seed=2)))
    entries = [Entry(0, offset * 2, line) for offset, line in enumerate(lines)]  # every other offset a marker
    state = Partitions()
    processor = BatchProcessor(BatchIO(Journal(entries), state, RecordingSink(state.log)), engine_step())
    asyncio.run(processor.process(entries[:10]))
    assert processor.position(0) == 19
    asyncio.run(processor.catch_up(0, 2 * len(lines) + 3))
    assert processor.position(0) == 2 * len(lines) + 3
    assert processor.metrics.filled == len(lines) - 10
