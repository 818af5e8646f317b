"""One test per decision the contract fixes (section 2) and per RFC accounting boundary."""

import hashlib
import json

from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.schemas.records import DeadLetterRecord, MatchRecord, ObservationRecord
from tests.support.builders import (
    CONDITION,
    CUE,
    Journal,
    artifact_ref,
    check,
    claim,
    failure_block,
    kinds,
    linked_setup,
    run,
)


def matches(records: list) -> list[MatchRecord]:  # type: ignore[type-arg]
    return [r for r in records if isinstance(r, MatchRecord)]


def observations(records: list, event: str | None = None) -> list[ObservationRecord]:  # type: ignore[type-arg]
    return [r for r in records if isinstance(r, ObservationRecord) and (event is None or r.event == event)]


# --- failure items ------------------------------------------------------------------------


def test_failure_items_are_checks_first_then_observations_each_in_index_order() -> None:
    journal = linked_setup()
    journal.outcome(
        "O1",
        status="failed",
        observations=[claim("first observation"), claim("second observation")],
        checks=[check("check zero", "failed"), check("passing check", "passed"), check("check two", "timed_out")],
    )
    records, _ = run(journal)
    located = [(m.failure_ref.item_kind, m.failure_ref.item_index) for m in matches(records)]
    assert located == [("check", 0), ("check", 2), ("observation", 0), ("observation", 1)]
    assert [m.result for m in matches(records)] == ["unmatched"] * 4


def test_observations_are_failure_items_only_under_a_failed_or_blocked_outcome() -> None:
    for status, expected in [("failed", 1), ("blocked", 1), ("partial", 0), ("succeeded", 0), ("unknown", 0)]:
        journal = linked_setup()
        journal.outcome("O1", status=status, observations=[claim(CUE)])
        records, _ = run(journal)
        assert len(matches(records)) == expected, status


def test_only_failed_timed_out_unavailable_checks_are_failure_items() -> None:
    statuses = ["passed", "failed", "skipped", "timed_out", "unavailable", "cancelled", "unknown"]
    journal = linked_setup()
    journal.outcome("O1", status="failed", checks=[check(f"check {s}", s) for s in statuses])
    records, _ = run(journal)
    assert [m.failure_ref.item_index for m in matches(records)] == [1, 3, 4]


def test_declared_items_are_never_failure_evidence() -> None:
    journal = linked_setup()
    journal.outcome(
        "O1", status="failed", observations=[claim(CUE, verified=False)], checks=[check(CUE, "failed", verified=False)]
    )
    records, _ = run(journal)
    assert matches(records) == []
    assert kinds(records) == ["observation:selected"]


# --- verified evidence must resolve ----------------------------------------------------------


def test_unresolvable_evidence_is_not_failure_evidence() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", checks=[check(CUE, "failed", evidence="never-seen")])
    records, _ = run(journal)
    assert matches(records) == []


def test_evidence_must_be_accepted_earlier_than_the_outcome() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", checks=[check(CUE, "failed", evidence="ev-late")])
    journal.evidence("ev-late")
    records, _ = run(journal)
    assert matches(records) == []


def test_artifact_citations_must_resolve_and_memory_citations_are_taken_as_given() -> None:
    journal = linked_setup()
    failing = check(CUE, "failed")
    failing["evidence"] = [{"kind": "artifact", "artifact_ref": artifact_ref("E7", 1)}]
    unknown = check("other failure", "failed")
    unknown["evidence"] = [{"kind": "artifact", "artifact_ref": artifact_ref("E7", 9)}]
    memory = check("memory backed", "failed")
    memory["evidence"] = [
        {
            "kind": "memory",
            "memory_citation": {
                "memory_ref": artifact_ref("M1", 1, "memory"),
                "entry_id": "e1",
                "entry_version_id": "v1",
            },
        }
    ]
    journal.outcome("O1", status="failed", checks=[failing, unknown, memory])
    records, _ = run(journal)
    assert [m.failure_ref.item_index for m in matches(records)] == [0, 2]


def test_unresolvable_condition_or_check_leaves_the_verdict_unknown() -> None:
    journal = linked_setup()
    journal.outcome("O1", observations=[claim(CONDITION, evidence="nope")], checks=[check(CUE)])
    journal.outcome("O2", observations=[claim(CONDITION)], checks=[check(CUE, evidence="nope")])
    records, runner = run(journal)
    assert kinds(records) == ["observation:selected", "observation:selected"]
    assert runner.stats()["unknown"] == 2


# --- ambiguity ---------------------------------------------------------------------------------


def test_two_failure_items_for_one_group_write_matches_but_no_recurred() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", observations=[claim(CUE)], checks=[check(CUE, "failed")])
    records, runner = run(journal)
    assert kinds(records) == ["match:matched", "match:matched", "observation:selected"]
    assert runner.stats()["recurred"] == 0 and runner.stats()["unknown"] == 1


def test_two_candidates_with_one_key_are_ambiguous() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E1", 1, failure_block(CUE))
    journal.experience("E2", 1, failure_block(CUE.upper() + "!"))
    journal.outcome("O1", status="failed", receipt=None, checks=[check(CUE, "failed")])
    records, runner = run(journal)
    assert kinds(records) == ["match:ambiguous"]
    assert matches(records)[0].artifact_ref is None
    assert runner.stats()["recurred"] == 0


# --- linkage ------------------------------------------------------------------------------------


def _unlinked_variant(mutate: str) -> Journal:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E7", 1, failure_block(CUE, CONDITION))
    if mutate != "handoff-unknown":
        journal.handoff("H12", [("E7", 1)])
    if mutate == "declined":
        journal.receipt("R12", status="declined")
    elif mutate == "latest":
        journal.receipt("R12", selection="latest")
    elif mutate == "prepared":
        journal.receipt("R12", selection="prepared")
    elif mutate == "not-a-receipt":
        journal.evidence("R12")
    elif mutate != "missing":
        journal.receipt("R12")
    journal.outcome("O1", observations=[claim(CONDITION)], checks=[check(CUE)])
    journal.outcome("O2", status="failed", checks=[check(CUE, "failed")])
    return journal


def test_unresolvable_receipts_are_unlinked_not_errors() -> None:
    for mutate in ["missing", "declined", "latest", "prepared", "not-a-receipt", "handoff-unknown"]:
        records, runner = run(_unlinked_variant(mutate))
        assert not any(isinstance(r, DeadLetterRecord) for r in records), mutate
        assert observations(records, "selected") == [] and observations(records, "avoided") == [], mutate
        assert [m.candidate_set_mode for m in matches(records)] == ["scope_heads"], mutate
        assert kinds(records) == ["match:matched", "observation:recurred"], mutate
        assert runner.stats()["unknown"] == 0, mutate


def test_receipt_arriving_after_the_outcome_does_not_link_it() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E7", 1, failure_block(CUE, CONDITION))
    journal.handoff("H12", [("E7", 1)])
    journal.outcome("O1", observations=[claim(CONDITION)], checks=[check(CUE)])
    journal.receipt("R12")
    records, _ = run(journal)
    assert records == []


# --- candidate sets --------------------------------------------------------------------------------


def test_handoff_candidate_set_holds_cited_failure_bearing_revisions_sorted() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E9", 1, failure_block("cue nine"))
    journal.experience("E1", 1, failure_block("cue one"))
    journal.experience("E1", 2, failure_block("cue one"))
    journal.experience("E5", 1, None)  # no failure block: never a candidate
    journal.handoff("H12", [("E9", 1), ("E5", 1), ("E1", 1)], next_action_cites=[("E1", 2), ("E1", 1)])
    journal.receipt("R12")
    journal.outcome("O1", status="failed", checks=[check("cue nine", "failed")])
    records, _ = run(journal)
    (match,) = matches(records)
    assert match.candidate_set_mode == "handoff_citations"
    assert [(r.artifact_id, r.revision) for r in match.candidate_refs] == [("E1", 1), ("E1", 2), ("E9", 1)]
    assert [(o.event, o.artifact_ref.artifact_id, o.artifact_ref.revision) for o in observations(records)] == [
        ("selected", "E1", 1),
        ("selected", "E1", 2),
        ("selected", "E9", 1),
        ("recurred", "E9", 1),
    ]


def test_scope_heads_exclude_superseded_and_failure_free_heads() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E1", 1, failure_block(CUE))
    journal.experience("E1", 2, failure_block(CUE))
    journal.experience("E2", 1, failure_block("other cue"))
    journal.experience("E2", 2, None)  # head without failure: E2 leaves the set
    journal.experience("E3", 2, failure_block("third cue"))
    journal.experience("E3", 1, failure_block("third cue"))  # older revision arrives late: not the head
    journal.outcome("O1", status="failed", receipt=None, checks=[check(CUE, "failed")])
    records, _ = run(journal)
    (match,) = matches(records)
    assert [(r.artifact_id, r.revision) for r in match.candidate_refs] == [("E1", 2), ("E3", 2)]
    assert match.artifact_ref is not None and match.artifact_ref.revision == 2


# --- avoided gates ---------------------------------------------------------------------------------


def test_avoided_needs_exactly_one_condition_and_one_check() -> None:
    cases = {
        "ok": ([claim(CONDITION)], [check(CUE)], ["observation:selected", "observation:avoided"]),
        "two conditions": ([claim(CONDITION), claim(CONDITION + ".")], [check(CUE)], ["observation:selected"]),
        "two checks": ([claim(CONDITION)], [check(CUE), check(CUE.lower())], ["observation:selected"]),
        "no condition": ([claim("something else")], [check(CUE)], ["observation:selected"]),
        "declared condition": ([claim(CONDITION, verified=False)], [check(CUE)], ["observation:selected"]),
        "declared check": ([claim(CONDITION)], [check(CUE, verified=False)], ["observation:selected"]),
        "check skipped": ([claim(CONDITION)], [check(CUE, "skipped")], ["observation:selected"]),
    }
    for name, (obs, checks, expected) in cases.items():
        journal = linked_setup()
        journal.outcome("O1", observations=obs, checks=checks)
        records, _ = run(journal)
        assert kinds(records) == expected, name


def test_gate_four_blocks_avoided_when_a_failure_item_is_eligible() -> None:
    # The passing bound check is present, but an observation of the failure itself
    # (eligible for the group) is too: the Outcome cannot count as avoided.
    journal = linked_setup(failure=failure_block("the cue", CONDITION, check_subject="the bound check"))
    journal.outcome(
        "O1",
        status="failed",
        observations=[claim(CONDITION)],
        checks=[check("the bound check"), check("The cue", "failed")],
    )
    records, _ = run(journal)
    assert "observation:avoided" not in kinds(records)
    assert "observation:recurred" in kinds(records)


def test_gate_four_blocks_even_when_no_recurred_is_written() -> None:
    journal = linked_setup(failure=failure_block("the cue", CONDITION, check_subject="the bound check"))
    journal.outcome(
        "O1",
        status="failed",
        observations=[claim(CONDITION)],
        checks=[check("the bound check"), check("the cue", "failed"), check("THE CUE", "unavailable")],
    )
    records, _ = run(journal)
    assert kinds(records) == ["match:matched", "match:matched", "match:unmatched", "observation:selected"]


def test_unlinked_outcome_can_never_be_avoided() -> None:
    journal = linked_setup()
    journal.outcome("O1", receipt=None, observations=[claim(CONDITION)], checks=[check(CUE)])
    records, runner = run(journal)
    assert records == []
    assert runner.stats()["avoided"] == 0


# --- RFC minimum checkable case boundaries -------------------------------------------------------------


def test_a_new_revision_does_not_redirect_history_and_streaks_do_not_cross() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", receipt=None, checks=[check(CUE, "failed")])
    journal.experience("E7", 2, failure_block())
    journal.outcome("O2", status="failed", receipt=None, checks=[check(CUE, "failed")])
    records, runner = run(journal)
    first, second = matches(records)
    assert first.artifact_ref is not None and first.artifact_ref.revision == 1
    assert second.artifact_ref is not None and second.artifact_ref.revision == 2
    assert [
        (r["artifact_ref"]["revision"], r["terminal_recurred_streak"]) for r in runner.stats()["top_revisions"]
    ] == [(1, 1), (2, 1)]


def test_two_chains_for_one_revision_remain_two_observations() -> None:
    journal = linked_setup()
    journal.receipt("R13")
    journal.outcome("O1", receipt="R12")
    journal.outcome("O2", receipt="R13")
    records, runner = run(journal)
    assert len(observations(records, "selected")) == 2
    assert len({o.observation_id for o in observations(records)}) == 2
    assert runner.stats()["selected"] == 2 and runner.stats()["unknown"] == 2


def test_unlinked_handoff_citations_count_cited_groups_without_selected() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E1", 1, failure_block("cue one"))
    journal.experience("E2", 1, failure_block("cue two"))
    journal.experience("E3", 1, None)
    journal.handoff("H1", [("E1", 1), ("E2", 1), ("E3", 1), ("E404", 1)])
    journal.handoff("H2", [("E1", 1)])
    journal.receipt("R1", handoff=("H2", 1))
    journal.outcome("O1", receipt="R1")
    _, runner = run(journal)
    assert runner.stats()["unlinked_handoff_citations"] == 1  # E2 only: E1 was selected, E3 bears no failure


def test_unlinked_citations_follow_the_handoff_head() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E1", 1, failure_block("cue one"))
    journal.handoff("H1", [("E1", 1)])
    journal.handoff("H1", [], revision=2)
    _, runner = run(journal)
    assert runner.stats()["unlinked_handoff_citations"] == 0


def test_matches_precede_the_observations_that_cite_them() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", checks=[check(CUE, "failed")])
    records, _ = run(journal)
    assert kinds(records) == ["match:matched", "observation:selected", "observation:recurred"]
    match, _, recurred = records
    assert isinstance(match, MatchRecord) and isinstance(recurred, ObservationRecord)
    assert recurred.recurrence_match_digest == match.match_digest
    assert recurred.failure_ref == match.failure_ref


def test_digests_follow_the_contract_canonical_json() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", checks=[check(CUE, "failed")])
    records, _ = run(journal)
    match = matches(records)[0]
    body = match.model_dump(mode="json", exclude={"record", "match_digest"})
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert match.match_digest == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    refs = json.dumps([r.model_dump() for r in match.candidate_refs], sort_keys=True, separators=(",", ":"))
    assert match.candidate_set_digest == "sha256:" + hashlib.sha256(refs.encode()).hexdigest()


def test_statistics_top_revisions_order_and_cap() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    for name in ["b", "a", "c"]:
        journal.experience(name, 1, failure_block(f"cue {name}", surface="recall_policy"))
    for index, name in enumerate(["c", "a", "a", "b", "b", "b", "c"]):
        journal.outcome(f"O{index}", status="failed", receipt=None, checks=[check(f"cue {name}", "failed")])
    _records, runner = run(journal, EngineConfig(review_threshold=3))
    top = runner.stats()["top_revisions"]
    assert [(t["artifact_ref"]["artifact_id"], t["terminal_recurred_streak"]) for t in top] == [
        ("b", 3),
        ("a", 2),
        ("c", 2),
    ]
    assert runner.stats()["needing_review"] == 1
    assert len(runner.stats(top=1)["top_revisions"]) == 1
    assert runner.stats(top=0)["top_revisions"] == []
