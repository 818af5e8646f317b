"""Incremental per-scope statistics (``scopesummary``) equal the scan (``scope_statistics``), always.

Batches run as the worker runs them: one ``Transaction`` per batch, prepared,
then the statistics of every changed scope from the cache, then flushed. The
journals are the synthetic ones and a small "world" drawn by hypothesis that
reaches what the synthetic ones do not: Handoff heads replaced by higher
revisions (and lower ones arriving late), citations of Experience revisions
that arrive later, failure-free revisions, selections that close a gap. On top,
batches that fail after their statistics were computed (never flushed, run
again), restores of an earlier copy of the state, restarts (an empty cache)
and capacities small enough to evict.
"""

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recurrence_ledger.processor.core.engine import Engine
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.scopesummary import ScopeRows, StatisticsCache, changed_rows
from recurrence_ledger.processor.core.state import State, StoredArtifact, row_cache
from recurrence_ledger.processor.core.statistics import scope_statistics, validated
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.schemas.constants import EXPERIENCE_FAMILY, HANDOFF_FAMILY
from recurrence_ledger.schemas.statistics import ScopeStatistics
from tests.support.builders import Journal, check, claim, failure_block
from tests.support.strategies import journal_specs

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = EngineConfig(review_threshold=2, top_revisions=3)  # small, so streaks cross and top cuts

CUES = ("cue alpha", "cue beta")
CONDITIONS = ("condition alpha", "condition beta")


class Worker:
    """One partition's batches over a store, with the statistics cache the worker step keeps."""

    def __init__(self, capacity: int) -> None:
        self.store = MemoryStore()
        self.cache = row_cache()
        self.summaries = StatisticsCache(CONFIG.review_threshold, CONFIG.top_revisions, capacity)
        self.checked = 0
        self.updated = 0  # summaries brought forward, over restarts

    def restart(self) -> None:
        """A new worker process: nothing cached."""
        self.updated += self.summaries.updated
        self.summaries = StatisticsCache(CONFIG.review_threshold, CONFIG.top_revisions, self.summaries.capacity)

    def batch(self, lines: list[bytes], fail: bool = False) -> None:
        txn = Transaction(self.store, self.cache)
        engine = Engine(txn, CONFIG, track_statistics_rows=True)
        for number, line in enumerate(lines):
            engine.process(line, {"line": number})
        changes = txn.prepare()
        changed = changed_rows(engine.state, changes)
        assert as_sets(changed) == as_sets(rows_by_key(changes))
        for scope_id, rows in sorted(changed.items()):
            got = self.summaries.statistics(engine.state, 0, scope_id, rows)
            assert as_model(got) == oracle(engine.state, scope_id), scope_id
            # the bytes the worker writes: the model's own dump, key order included
            assert got is None or orjson.dumps(got) == orjson.dumps(oracle_json(engine.state, scope_id))
            self.checked += 1
        if not fail:
            txn.flush()

    def restore(self, snapshot: MemoryStore) -> None:
        """The store replaced by an earlier copy (a restore); the row cache goes, as on a new generation."""
        self.store = snapshot
        self.cache = row_cache()

    def copy(self) -> MemoryStore:
        copy = MemoryStore()
        copy.apply(dict(self.store.iterate_prefix(b"")))
        return copy


def rows_by_key(changes: dict[bytes, bytes | None]) -> dict[str, ScopeRows]:
    """The oracle of ``changed_rows``: every key the batch staged, parsed."""
    scopes: dict[str, ScopeRows] = {}
    for raw_key in changes:
        parts = orjson.loads(raw_key)
        if not isinstance(parts, list) or len(parts) < 2 or parts[0] not in ("scope", "grp", "head", "art"):
            continue
        rows = scopes.setdefault(parts[1], ScopeRows())
        if parts[0] == "grp":
            rows.groups.append(((parts[2], parts[3], parts[4]), parts[5]))
        elif parts[0] == "head" and parts[2] == HANDOFF_FAMILY:
            rows.handoff_heads.append(parts[3])
        elif parts[0] == "art" and parts[2] == EXPERIENCE_FAMILY:
            rows.experiences.append((parts[2], parts[3], parts[4]))
    return scopes


def as_sets(scopes: dict[str, ScopeRows]) -> dict[str, tuple[frozenset[Any], ...]]:
    return {
        scope_id: (frozenset(rows.groups), frozenset(rows.handoff_heads), frozenset(rows.experiences))
        for scope_id, rows in scopes.items()
    }


def oracle(state: State, scope_id: str) -> ScopeStatistics | None:
    meta = state.scope(scope_id)
    if meta is None or meta.last_position <= 0:
        return None
    return scope_statistics(state, scope_id, CONFIG.review_threshold, CONFIG.top_revisions)


def as_model(document: dict[str, Any] | None) -> ScopeStatistics | None:
    """The worker's statistics document read as the wire model (strict: it must validate)."""
    return None if document is None else validated(document)


def oracle_json(state: State, scope_id: str) -> dict[str, Any]:
    found = oracle(state, scope_id)
    assert found is not None
    return found.model_dump(mode="json")


# -- a small world that exercises every row the statistics depend on -----------------------------------
experience_ids = st.sampled_from(["E1", "E2"])
revisions = st.integers(min_value=1, max_value=2)
failures = st.one_of(st.none(), st.integers(min_value=0, max_value=1))
operation = st.one_of(
    st.tuples(st.just("experience"), experience_ids, revisions, failures),
    st.tuples(
        st.just("handoff"),
        st.sampled_from(["H1", "H2"]),
        revisions,
        st.lists(st.tuples(experience_ids, revisions), min_size=1, max_size=3),
    ),
    # A receipt selects one of the scope's Handoff revisions (counted from the newest), or any.
    st.tuples(
        st.just("receipt"),
        st.sampled_from([0, 0, 1, None]),
        st.sampled_from(["H1", "H2"]),
        revisions,
        st.sampled_from([True, True, True, False]),
    ),
    st.tuples(
        st.just("outcome"),
        st.sampled_from([0, 0, 1, 2, None]),
        st.booleans(),
        st.lists(st.tuples(st.integers(min_value=0, max_value=1), st.booleans()), max_size=2),
        st.booleans(),
    ),
)
scoped = st.tuples(st.sampled_from(["s1", "s1", "s2"]), operation)


def world(operations: list[tuple[str, tuple[Any, ...]]]) -> list[bytes]:
    journal = Journal()
    # Each scope starts linked: E1@1 bears a failure, H1@1 cites it and E2@1 (not there yet), a receipt
    # accepted H1@1. What follows is drawn.
    receipts: dict[str, list[str]] = {"s1": ["R0"], "s2": ["R0"]}  # newest last
    handoffs: dict[str, list[tuple[str, int]]] = {"s1": [("H1", 1)], "s2": [("H1", 1)]}
    for scope in ("s1", "s2"):
        journal.evidence("ev-1", scope=scope)
        journal.experience("E1", 1, failure_block(CUES[0], CONDITIONS[0]), scope=scope)
        journal.handoff("H1", [("E1", 1), ("E2", 1)], scope=scope)
        journal.receipt("R0", ("H1", 1), scope=scope)
    for number, (scope, op) in enumerate(operations):
        kind = op[0]
        if kind == "experience":
            _, artifact_id, revision, cue = op
            failure = None if cue is None else failure_block(CUES[cue], CONDITIONS[cue])
            journal.experience(artifact_id, revision, failure, scope=scope)
        elif kind == "handoff":
            _, artifact_id, revision, cites = op
            handoffs[scope].append((artifact_id, revision))
            journal.handoff(artifact_id, cites, revision, scope=scope)
        elif kind == "receipt":
            _, back, artifact_id, revision, accepted = op
            known = handoffs[scope]
            selected = (artifact_id, revision) if back is None or not known else known[-1 - min(back, len(known) - 1)]
            receipts[scope].append(f"R{number}")
            journal.receipt(f"R{number}", selected, "accepted" if accepted else "declined", scope=scope)
        else:
            _, back, failed, checks, condition = op  # back: which receipt, counted from the newest
            recent = receipts[scope]
            journal.outcome(
                f"O{number}",
                status="failed" if failed else "succeeded",
                receipt=None if back is None or not recent else recent[-1 - min(back, len(recent) - 1)],
                checks=[check(CUES[cue], "failed" if failing else "passed") for cue, failing in checks],
                observations=[claim(CONDITIONS[0])] if condition else None,
                scope=scope,
            )
    return journal.lines()


def run_batches(worker: Worker, lines: list[bytes], data: st.DataObject) -> None:
    """``lines`` in random batches, some of which fail once, with restores and restarts between them."""
    snapshots: list[tuple[MemoryStore, int]] = []  # (copy of the state, lines it holds)
    done = 0
    while done < len(lines):
        size = data.draw(st.integers(min_value=1, max_value=max(1, len(lines) // 3)), label="batch size")
        event = data.draw(st.sampled_from(["ok"] * 6 + ["fail", "restart", "snapshot", "restore"]), label="event")
        if event == "fail":
            worker.batch(lines[done : done + size], fail=True)  # computed, never flushed: runs again below
        elif event == "restart":
            worker.restart()
        elif event == "snapshot":
            snapshots.append((worker.copy(), done))
        elif event == "restore" and snapshots:
            snapshot, done = snapshots[data.draw(st.integers(min_value=0, max_value=len(snapshots) - 1))]
            worker.restore(snapshot)
            snapshots = [(store, held) for store, held in snapshots if held <= done]
            continue
        worker.batch(lines[done : done + size])
        done += size


@SETTINGS
@given(
    operations=st.lists(scoped, min_size=10, max_size=80), capacity=st.sampled_from([10, 40, 200_000]), data=st.data()
)
def test_incremental_statistics_equal_the_scan_on_a_small_world(
    operations: list[tuple[str, tuple[Any, ...]]], capacity: int, data: st.DataObject
) -> None:
    worker = Worker(capacity)
    run_batches(worker, world(operations), data)
    assert worker.checked > 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=journal_specs(entries=(20, 400), scopes=(1, 6)),
    data=st.data(),
)
def test_incremental_statistics_equal_the_scan_on_synthetic_journals(spec: JournalSpec, data: st.DataObject) -> None:
    worker = Worker(200_000)
    run_batches(worker, list(generate(spec)), data)


def test_a_summary_that_cannot_prove_it_is_current_is_rebuilt() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E7", 1, failure_block())
    journal.handoff("H12", [("E7", 1)])
    journal.receipt("R12")
    first = journal.lines()
    journal.outcome("O1")  # linked: E7@1 selected, so its citation is no longer a gap
    second = journal.lines()[len(first) :]
    journal.evidence("ev-2")
    third = journal.lines()[len(first) + len(second) :]

    worker = Worker(200_000)
    worker.batch(first)
    assert (worker.summaries.updated, worker.summaries.rebuilt) == (0, 1)
    # The state moves on without the cache (another owner's batch restored from the changelog):
    txn = Transaction(worker.store, worker.cache)
    engine = Engine(txn, CONFIG)
    for line in second:
        engine.process(line, {"line": 0})
    txn.commit()

    txn = Transaction(worker.store, worker.cache)
    engine = Engine(txn, CONFIG, track_statistics_rows=True)
    for line in third:
        engine.process(line, {"line": 0})
    changes = txn.prepare()
    ((scope_id, rows),) = changed_rows(engine.state, changes).items()
    assert rows.groups == [] and rows.handoff_heads == []  # the batch itself changes no figure's row
    got = as_model(worker.summaries.statistics(engine.state, 0, scope_id, rows))
    assert got is not None and got.recurrence.unlinked_handoff_citations == 0
    assert got == oracle(engine.state, scope_id)
    assert (worker.summaries.updated, worker.summaries.rebuilt) == (0, 2)  # rebuilt, not brought forward
    # Trusting the old summary would have kept serving the gap the skipped batch closed:
    stale = Worker(200_000)
    stale.batch(first)
    summary = stale.summaries.cached(0, scope_id)
    assert summary is not None
    summary.apply(engine.state, scope_id, rows, CONFIG.review_threshold)
    meta = engine.state.scope(scope_id)
    assert meta is not None
    assert summary.statistics(scope_id, meta, CONFIG.top_revisions)["recurrence"]["unlinked_handoff_citations"] == 1


def test_summaries_are_built_once_then_brought_forward() -> None:
    lines = list(generate(JournalSpec(entries=600, scopes=8, seed=3)))
    worker = Worker(200_000)
    for start in range(0, len(lines), 50):
        worker.batch(lines[start : start + 50])
    assert worker.summaries.rebuilt == 8  # one scan per scope, the first time it changed
    assert worker.summaries.updated == worker.checked - 8 > 0


def test_the_cache_holds_at_most_its_capacity() -> None:
    lines = list(generate(JournalSpec(entries=600, scopes=8, seed=3)))
    worker = Worker(60)
    for start in range(0, len(lines), 50):
        worker.batch(lines[start : start + 50])
        assert worker.summaries.weight <= 60
        assert worker.summaries.weight == sum(s.weight for s in worker.summaries.summaries())
    assert 0 < len(worker.summaries) < 8  # some scopes evicted, the rest kept
    assert worker.summaries.rebuilt > 8  # evicted scopes were scanned again


def test_committed_reads_ignore_what_the_batch_staged() -> None:
    store = MemoryStore()
    store.apply({b'["k"]': b"old"})
    txn = Transaction(store, row_cache())
    txn.put(b'["k"]', b"new")
    txn.put(b'["fresh"]', b"x")
    txn.prepare()
    assert (txn.get(b'["k"]'), txn.committed(b'["k"]')) == (b"new", b"old")
    assert (txn.get(b'["fresh"]'), txn.committed(b'["fresh"]')) == (b"x", None)
    txn.flush()
    assert Transaction(store, txn.cache).committed(b'["k"]') == b"new"  # the cache holds what was flushed


def test_changed_rows_leave_out_what_an_aborted_entry_staged() -> None:
    txn = Transaction(MemoryStore())
    state = State(txn, track_statistics_rows=True)
    kept = ("experience", "e1", 1)
    txn.begin_entry()
    scope_key, current = state.scope_row("s1")
    state.stage_scope(scope_key, current)
    state.put_artifact("s1", kept, StoredArtifact(1, "d1"))
    txn.end_entry()
    txn.begin_entry()  # fails halfway: nothing it staged may count as changed
    scope_key, current = state.scope_row("s2")
    state.stage_scope(scope_key, current)
    state.put_head("s1", ("handoff", "h1", 1))
    state.group_for_update("s1", kept, "cue")
    txn.abort_entry()
    changed = changed_rows(state, txn.staged_keys())
    assert changed == {"s1": ScopeRows(experiences=[kept])}
    assert as_sets(changed) == as_sets(rows_by_key(txn.prepare()))


def test_changed_rows_need_a_state_that_tracks_them() -> None:
    txn = Transaction(MemoryStore())
    with pytest.raises(ValueError, match="track_statistics_rows"):
        changed_rows(State(txn), txn.staged_keys())
