"""History, retirement suggestions and trends from state equal an independent computation from the ledger.

The oracle here reads only what a downstream service has: the ledger's records (observations and
review proposals, in ledger order) and, for the positions at which revisions were accepted, the
journal lines the engine did not dead-letter. It counts, streaks, windows and applies the rules
its own way; the engine answers from its state (``repairloop``). Hypothesis draws the journals.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recurrence_ledger.processor import repairloop
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.history import head_spans
from recurrence_ledger.processor.core.retirement import RetirementRules
from recurrence_ledger.processor.core.state import State
from recurrence_ledger.processor.core.trends import MAX_TREND_WINDOWS, WindowTooSmallError, scope_trends
from recurrence_ledger.processor.core.yieldmarks import Mark, terminal_streak
from recurrence_ledger.processor.explain import NotFoundError
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from tests.support.builders import Runner
from tests.support.strategies import journal_specs

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Ref = tuple[str, str, int]


@dataclass
class Facts:
    """What the ledger says of one revision: per Task Outcome position, the events it had."""

    events: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))


@dataclass
class LedgerOracle:
    threshold: int
    revisions: dict[tuple[str, Ref], Facts] = field(default_factory=lambda: defaultdict(Facts))
    accepted: dict[tuple[str, Ref], int] = field(default_factory=dict)  # revision -> accepted position
    signature: dict[tuple[str, Ref], str | None] = field(default_factory=dict)
    last_position: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, lines: list[bytes], records: list[Any], threshold: int) -> "LedgerOracle":
        oracle = cls(threshold)
        rejected = {r.data()["origin"]["line"] for r in records if r.record == "dead_letter"}
        for number, line in enumerate(lines, start=1):
            if number in rejected:
                continue
            entry = orjson.loads(line)
            scope = entry["scope_id"]
            oracle.last_position[scope] = max(oracle.last_position.get(scope, 0), entry["position"])
            if entry["type"] == "artifact" and entry["artifact"]["family"] == "experience":
                art = entry["artifact"]
                key = (scope, ("experience", art["artifact_id"], art["revision"]))
                if key not in oracle.accepted:
                    oracle.accepted[key] = entry["position"]
                    failure = art["content"].get("failure")
                    oracle.signature[key] = None if failure is None else failure["signature"]["recall_cue"]
        last_seen: dict[tuple[str, Ref], int] = {}
        for record in records:
            data = record.data()
            if record.record == "observation":
                ref = data["artifact_ref"]
                key = (data["scope_id"], (ref["family"], ref["artifact_id"], ref["revision"]))
                oracle.revisions[key].events[data["task_outcome_position"]].add(data["event"])
                last_seen[key] = data["task_outcome_position"]
            elif record.record == "review_proposal":
                ref = data["target"]
                key = (data["scope_id"], (ref["family"], ref["artifact_id"], ref["revision"]))
                oracle.revisions[key].events[last_seen[key]].add("proposal")
        return oracle

    def counts(self, key: tuple[str, Ref]) -> dict[str, int]:
        events = self.revisions[key].events.values() if key in self.revisions else []
        return {
            "selected": sum("selected" in e for e in events),
            "recurred": sum("recurred" in e for e in events),
            "recurred_selected": sum("recurred" in e and "selected" in e for e in events),
            "avoided": sum("avoided" in e for e in events),
            "unknown": sum(e == {"selected"} for e in events),
            "review_proposals": sum("proposal" in e for e in events),
        }

    def streak(self, key: tuple[str, Ref]) -> int:
        streak = 0
        events = self.revisions[key].events if key in self.revisions else {}
        for position in sorted(events):
            if "avoided" in events[position]:
                streak = 0
            elif "recurred" in events[position]:
                streak += 1
        return streak

    def heads(self, scope: str, artifact_id: str) -> list[tuple[int, int]]:
        """(revision, from) in the order revisions became the head."""
        accepted = sorted(
            (position, key[1][2])
            for key, position in self.accepted.items()
            if key[0] == scope and key[1][1] == artifact_id
        )
        became: list[tuple[int, int]] = []
        for position, revision in accepted:
            if all(revision > r for r, _ in became):
                became.append((revision, position))
        return became


journals = journal_specs(entries=(30, 600), scopes=(1, 4))


def _replayed(spec: JournalSpec, threshold: int) -> tuple[Runner, LedgerOracle]:
    lines = list(generate(spec))
    runner = Runner(config=EngineConfig(review_threshold=threshold))
    records = runner.emit(lines)
    return runner, LedgerOracle.of(lines, records, threshold)


@SETTINGS
@given(spec=journals, threshold=st.sampled_from([2, 3]))
def test_every_revision_history_equals_the_ledger(spec: JournalSpec, threshold: int) -> None:
    runner, oracle = _replayed(spec, threshold)
    state = State(runner.txn)
    artifacts = sorted({(scope, ref[1]) for scope, ref in oracle.accepted})
    assert artifacts
    for scope, artifact_id in artifacts:
        got = repairloop.history(state, scope, "experience", artifact_id, threshold)
        heads = oracle.heads(scope, artifact_id)
        assert got["head_revision"] == heads[-1][0]
        spans = {
            revision: (start, heads[i + 1][1] - 1 if i + 1 < len(heads) else None)
            for i, (revision, start) in enumerate(heads)
        }
        revisions = sorted(ref[2] for s, ref in oracle.accepted if s == scope and ref[1] == artifact_id)
        assert [row["artifact_ref"]["revision"] for row in got["revisions"]] == revisions
        for row in got["revisions"]:
            key = (scope, ("experience", artifact_id, row["artifact_ref"]["revision"]))
            expected = oracle.counts(key)
            assert {name: row[name] for name in expected} == expected
            assert row["terminal_recurred_streak"] == oracle.streak(key)
            assert row["position"] == oracle.accepted[key]
            assert (row["head_from"], row["head_until"]) == spans.get(key[1][2], (None, None))
            events = oracle.revisions[key].events if key in oracle.revisions else {}
            assert row["proposal_positions"] == sorted(p for p, e in events.items() if "proposal" in e)
            _check_effect(oracle, scope, artifact_id, heads, row)


def _check_effect(
    oracle: LedgerOracle, scope: str, artifact_id: str, heads: list[tuple[int, int]], row: dict[str, Any]
) -> None:
    order = [revision for revision, _ in heads]
    revision = row["artifact_ref"]["revision"]
    if revision not in order or order.index(revision) == 0:
        assert row["repair_effect"] is None
        return
    previous = order[order.index(revision) - 1]
    before_key = (scope, ("experience", artifact_id, previous))
    start = dict(heads)[revision]
    events = oracle.revisions[before_key].events if before_key in oracle.revisions else {}
    proposed = [p for p, e in events.items() if "proposal" in e and p < start]
    if not proposed:
        assert row["repair_effect"] is None
        return
    effect = row["repair_effect"]
    before, after = oracle.counts(before_key), oracle.counts((scope, ("experience", artifact_id, revision)))
    assert effect["proposal_position"] == max(proposed)
    assert (effect["before"]["selected"], effect["before"]["recurred"]) == (before["selected"], before["recurred"])
    assert (effect["after"]["selected"], effect["after"]["recurred"]) == (after["selected"], after["recurred"])
    if min(before["selected"], after["selected"]) < 3:
        assert effect["verdict"] == "too_little_evidence"
    elif after["recurred"] == 0:
        assert effect["verdict"] == "stopped"
    elif after["recurred"] * before["selected"] < before["recurred"] * after["selected"]:
        assert effect["verdict"] == "fewer"
    else:
        assert effect["verdict"] == "not_better"


@SETTINGS
@given(spec=journals, window=st.integers(min_value=1, max_value=120))
def test_trends_equal_the_ledger_windowed(spec: JournalSpec, window: int) -> None:
    runner, oracle = _replayed(spec, 3)
    state = State(runner.txn)
    for scope, last in sorted(oracle.last_position.items()):
        got = repairloop.trends(state, scope, window)
        expected: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        per_revision: dict[tuple[Ref, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for (s, ref), facts in oracle.revisions.items():
            if s != scope:
                continue
            for position, events in facts.events.items():
                first = (position - 1) // window * window + 1
                for bucket in (expected[first], per_revision[(ref, first)]):
                    for name in ("selected", "recurred", "avoided"):
                        bucket[name] += name in events
                    bucket["unknown"] += events == {"selected"}
                    bucket["review_proposals"] += "proposal" in events
        assert [w["first_position"] for w in got["windows"]] == list(range(1, last + 1, window))
        for row in got["windows"]:
            wanted = expected.get(row["first_position"], {})
            assert all(row[name] == wanted.get(name, 0) for name in ("selected", "recurred", "avoided", "unknown"))
            assert row["review_proposals"] == wanted.get("review_proposals", 0)
            assert row["last_position"] == row["first_position"] + window - 1
        names = ("selected", "recurred", "avoided", "unknown", "review_proposals")
        listed = {
            (tuple(r["artifact_ref"].values()), w["first_position"]): {name: w[name] for name in names}
            for r in got["revisions"]
            for w in r["windows"]
        }
        assert listed == {key: {n: value.get(n, 0) for n in names} for key, value in per_revision.items()}


@SETTINGS
@given(spec=journals, min_selected=st.integers(1, 6), min_unknown=st.integers(1, 6), percent=st.integers(1, 100))
def test_suggestions_equal_the_rules_applied_to_the_ledger(
    spec: JournalSpec, min_selected: int, min_unknown: int, percent: int
) -> None:
    runner, oracle = _replayed(spec, 3)
    state = State(runner.txn)
    rules = RetirementRules(min_selected=min_selected, min_unknown=min_unknown, unknown_percent=percent)
    for scope in sorted(oracle.last_position):
        got = repairloop.scope_suggestions(state, scope, rules)
        expected = []
        heads: dict[str, int] = {}
        for s, ref in oracle.accepted:
            if s == scope:
                heads[ref[1]] = max(heads.get(ref[1], 0), ref[2])
        for artifact_id in sorted(heads):
            key = (scope, ("experience", artifact_id, heads[artifact_id]))
            if oracle.signature[key] is None:
                continue
            c = oracle.counts(key)
            if c["selected"] >= min_selected and c["avoided"] == 0 and c["recurred"] > 0:
                expected.append(("never_avoids", artifact_id))
            if c["selected"] == 0 and c["recurred"] >= 3:
                expected.append(("never_selected", artifact_id))
            if c["unknown"] >= min_unknown and c["unknown"] * 100 >= percent * c["selected"]:
                expected.append(("unknown_binding", artifact_id))
        assert [(s["rule"], s["artifact_ref"]["artifact_id"]) for s in got["suggestions"]] == expected
        for suggestion in got["suggestions"]:
            ref = suggestion["artifact_ref"]
            assert suggestion["explain"] == f"experience/{ref['artifact_id']}@{ref['revision']}"


def test_marks_fold_in_position_order_whatever_order_they_come_in() -> None:
    marks = [Mark(5, recurred=True), Mark(2, avoided=True), Mark(9, recurred=True), Mark(1, recurred=True)]
    assert terminal_streak(marks) == 2
    assert terminal_streak(reversed(marks)) == 2


def test_a_window_that_makes_too_many_windows_is_refused_with_one_that_fits() -> None:
    with pytest.raises(WindowTooSmallError, match=r"use a window of at least 2$"):
        scope_trends("team-a", MAX_TREND_WINDOWS + 1, 1, iter(()))
    assert len(scope_trends("team-a", MAX_TREND_WINDOWS + 1, 2, iter(()))["windows"]) == MAX_TREND_WINDOWS // 2 + 1


def test_an_unknown_scope_or_artifact_is_not_found() -> None:
    runner, oracle = _replayed(JournalSpec(entries=100, scopes=1, seed=3), 3)
    state = State(runner.txn)
    scope = next(iter(oracle.last_position))
    with pytest.raises(NotFoundError):
        repairloop.history(state, "no-such-scope", "experience", "E1", 3)
    with pytest.raises(NotFoundError):
        repairloop.history(state, scope, "experience", "no-such-artifact", 3)


def test_a_state_whose_marks_miss_observations_is_refused() -> None:
    runner, oracle = _replayed(JournalSpec(entries=400, scopes=1, seed=8), 3)
    key = next(k for k, facts in oracle.revisions.items() if facts.events)
    scope, ref = key
    # A state built before the marks existed: the group's counters stand without them.
    for raw_key, _ in list(runner.txn.iterate_prefix(b'["mark",')):
        runner.txn.delete(raw_key)
    state = State(runner.txn)
    with pytest.raises(repairloop.IncompleteMarksError, match="replay the journal into a new --state"):
        repairloop.history(state, scope, ref[0], ref[1], 3)
    with pytest.raises(repairloop.IncompleteMarksError):
        repairloop.trends(state, scope, 100)


def test_a_revision_accepted_below_the_head_never_becomes_the_head() -> None:
    # revision 3 arrives before revision 2: 2 is a known revision, never the head (contract, "head").
    assert head_spans([(1, 4), (3, 9), (2, 12), (4, 20)]) == {1: (4, 8), 3: (9, 19), 4: (20, None)}
    assert head_spans([]) == {}
