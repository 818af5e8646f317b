"""Admission gate (issue 4; RFC "Admission rules"; contract record ``admission``).

Every rule test asserts the rule's own id in ``violations`` together with the
decision ``dropped``, and sits next to a positive control: the same journal
with only the offending detail changed is ``admitted``. Removing a rule from
``processor.admission`` therefore fails its test rather than being masked by a
neighbouring rule.
"""

from fractions import Fraction
from typing import Any

import pytest

from recurrence_ledger.processor.core.admission import (
    RULE_CUE,
    RULE_FAILING_OBSERVATION,
    RULE_NEAR_TWIN,
    RULE_PROVENANCE,
    RULE_REPAIR_SURFACE,
    RULE_VERIFICATION,
    RULE_WELL_FORMED,
)
from recurrence_ledger.schemas.base import ArtifactRef
from recurrence_ledger.schemas.constants import (
    MAX_CANDIDATE_EVIDENCE,
    MAX_FAILURE_CUE_LENGTH,
    NEAR_DUPLICATE_BIGRAM_OVERLAP,
)
from recurrence_ledger.schemas.normalize import bigram_overlap, bigrams, normalize
from recurrence_ledger.schemas.records import AdmissionRecord, DeadLetterRecord, OutputRecord
from tests.support.builders import (
    CUE,
    SCOPE,
    Journal,
    Runner,
    artifact_ref,
    check,
    claim,
    experience_content,
    failure_block,
    kinds,
    linked_setup,
    run,
    source_ref,
)

OUTCOME = "The client build broke after the contract changed"


# -- local builders ----------------------------------------------------------------


def failing_outcome(journal: Journal, source_id: str = "O1", status: str = "failed", **kwargs: Any) -> None:
    """An unlinked Task Outcome whose verified check ``unit tests`` has ``status``: failure evidence
    for the default status; its name matches no cue, so it never links a recurrence."""
    journal.outcome(source_id, status="failed", receipt=None, checks=[check("unit tests", status)], **kwargs)


def base_journal() -> Journal:
    """Evidence ev-1 and a cited-able failing Task Outcome O1 (a verified failed check)."""
    journal = Journal()
    journal.evidence("ev-1")
    failing_outcome(journal, "O1")
    return journal


def proposal(failure: Any = None, outcome: str = OUTCOME, cue: str = CUE, **overrides: Any) -> dict[str, Any]:
    """A well-formed failure-bearing proposal; ``failure`` replaces the whole block when given."""
    block = failure_block(cue=cue, check_subject=overrides.pop("check_subject", "client build"), **overrides)
    content = experience_content(block, outcome=outcome)
    if failure is not None:
        content["failure"] = failure
    return content


def decide(
    journal: Journal,
    candidate_proposal: dict[str, Any] | None = None,
    sources: list[str] | None = None,
    candidate_id: str = "c1",
    **candidate_fields: Any,
) -> AdmissionRecord:
    """Append one candidate, run the journal through a fresh engine, return its only admission record."""
    entry = journal.candidate(candidate_id, candidate_proposal or proposal(), sources)
    entry["candidate"].update(candidate_fields)
    records, _ = run(journal)
    assert not [r for r in records if isinstance(r, DeadLetterRecord)], kinds(records)
    found = admissions(records)
    assert len(found) == 1, kinds(records)
    assert found[0].candidate_id == candidate_id
    assert found[0].scope_id == SCOPE
    return found[0]


def admissions(records: list[OutputRecord]) -> list[AdmissionRecord]:
    return [r for r in records if isinstance(r, AdmissionRecord)]


def rules(record: AdmissionRecord) -> set[str]:
    return {v.rule for v in record.violations}


def assert_admitted(record: AdmissionRecord) -> None:
    assert record.decision == "admitted", record.violations
    assert record.violations == ()


def assert_dropped_by(record: AdmissionRecord, *expected: str, only: bool = True) -> None:
    assert record.decision == "dropped"
    if only:
        assert rules(record) == set(expected), record.violations
    else:
        assert set(expected) <= rules(record), record.violations
    for violation in record.violations:
        assert violation.message.strip(), "every violation carries a readable message"


# -- positive control -------------------------------------------------------------


def test_control_well_formed_candidate_citing_a_failing_outcome_is_admitted() -> None:
    record = decide(base_journal())
    assert_admitted(record)
    assert record.warnings == ()
    assert record.model_dump(mode="json")["record"] == "admission"


def test_rule_ids_are_stable() -> None:
    assert [
        RULE_WELL_FORMED,
        RULE_FAILING_OBSERVATION,
        RULE_CUE,
        RULE_REPAIR_SURFACE,
        RULE_VERIFICATION,
        RULE_NEAR_TWIN,
        RULE_PROVENANCE,
    ] == [
        "well_formed_proposal",
        "cited_failing_observation",
        "self_contained_cue",
        "repair_surface",
        "runnable_verification",
        "no_silent_near_twin",
        "provenance",
    ]


# -- rule 1: cited_failing_observation ------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "timed_out", "unavailable"])
def test_rule1_control_verified_failing_check_is_evidence(status: str) -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.outcome("O1", status="succeeded", receipt=None, checks=[check("unit tests", status)])
    assert_admitted(decide(journal))


@pytest.mark.parametrize("status", ["skipped", "cancelled", "unknown", "passed"])
def test_rule1_check_that_only_skipped_is_not_failure_evidence(status: str) -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.outcome("O1", status="failed", receipt=None, checks=[check("unit tests", status)])
    assert_dropped_by(decide(journal), RULE_FAILING_OBSERVATION)


@pytest.mark.parametrize("status", ["failed", "blocked"])
def test_rule1_control_failed_outcome_with_verified_observation_is_evidence(status: str) -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.outcome("O1", status=status, receipt=None, observations=[claim("the client did not compile")])
    assert_admitted(decide(journal))


def test_rule1_failed_outcome_whose_observation_is_only_declared_is_not_evidence() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.outcome(
        "O1",
        status="failed",
        receipt=None,
        observations=[claim("the client did not compile", verified=False)],
        checks=[check("unit tests", "failed", verified=False)],
    )
    assert_dropped_by(decide(journal), RULE_FAILING_OBSERVATION)


@pytest.mark.parametrize("status", ["succeeded", "partial", "cancelled", "unknown"])
def test_rule1_verified_observation_under_a_non_failed_outcome_is_not_evidence(status: str) -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.outcome("O1", status=status, receipt=None, observations=[claim("the client did not compile")])
    assert_dropped_by(decide(journal), RULE_FAILING_OBSERVATION)


def test_rule1_verified_check_with_unresolvable_evidence_is_not_evidence() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    unresolvable = check("unit tests", "failed", evidence="ev-missing")
    journal.outcome("O1", status="failed", receipt=None, checks=[unresolvable])
    assert_dropped_by(decide(journal), RULE_FAILING_OBSERVATION)


def test_rule1_evidence_must_precede_the_outcome_not_just_the_candidate() -> None:
    """Contract: evidence resolves to a Source accepted *before the Task Outcome*."""
    journal = Journal()
    journal.evidence("ev-1")
    late = check("unit tests", "failed", evidence="ev-late")
    journal.outcome("O1", status="failed", receipt=None, checks=[late])
    journal.evidence("ev-late")  # known by the time the candidate arrives, too late for O1
    assert_dropped_by(decide(journal), RULE_FAILING_OBSERVATION)


def test_rule1_cited_source_that_is_unknown() -> None:
    record = decide(base_journal(), sources=["O-unknown"])
    # Unknown is also unresolvable, so provenance fires too; rule 1 must name it on its own.
    assert_dropped_by(record, RULE_FAILING_OBSERVATION, RULE_PROVENANCE)


def test_rule1_cited_source_that_exists_but_is_not_a_task_outcome() -> None:
    journal = base_journal()
    journal.source("N1", "note", {"text": "the build failed", "status": "failed"})
    assert_dropped_by(decide(journal, sources=["ev-1", "N1"]), RULE_FAILING_OBSERVATION)


def test_rule1_a_handoff_receipt_is_not_a_task_outcome() -> None:
    journal = linked_setup(base_journal())
    assert_dropped_by(decide(journal, sources=["R12"]), RULE_FAILING_OBSERVATION)


def test_rule1_the_failing_outcome_only_counts_when_cited() -> None:
    journal = base_journal()
    journal.outcome("O2", status="succeeded", receipt=None, checks=[check("unit tests", "passed")])
    assert_dropped_by(decide(journal, sources=["O2"]), RULE_FAILING_OBSERVATION)


def test_rule1_control_one_failing_outcome_among_citations_is_enough() -> None:
    journal = base_journal()
    journal.outcome("O2", status="succeeded", receipt=None, checks=[check("unit tests", "passed")])
    assert_admitted(decide(journal, sources=["O2", "ev-1", "O1"]))


def test_rule1_outcome_arriving_after_the_candidate_does_not_count() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.candidate("c1", proposal(), ["O1"])
    failing_outcome(journal, "O1")
    records, _ = run(journal)
    (record,) = admissions(records)
    assert_dropped_by(record, RULE_FAILING_OBSERVATION, RULE_PROVENANCE)


def test_rule1_failing_outcome_in_another_scope_does_not_count() -> None:
    journal = Journal()
    journal.evidence("ev-1", scope="team-b")
    failing_outcome(journal, "O1", scope="team-b")
    journal.evidence("ev-1")
    assert_dropped_by(decide(journal), RULE_FAILING_OBSERVATION, RULE_PROVENANCE)


# -- rule 2: self_contained_cue -----------------------------------------------------------


@pytest.mark.parametrize(
    "cue",
    [
        OUTCOME,
        OUTCOME.upper(),
        "  the client   build broke after\tthe contract changed  ",
        f"...{OUTCOME.lower()}!",
        f'"{OUTCOME}."',
        "\uff34he client build broke after the contract changed",  # fullwidth T: NFKC folds it
    ],
)
def test_rule2_cue_restating_the_outcome_is_dropped(cue: str) -> None:
    assert normalize(cue) == normalize(OUTCOME)
    assert_dropped_by(decide(base_journal(), proposal(cue=cue)), RULE_CUE)


def test_rule2_control_cue_naming_a_situation_is_admitted() -> None:
    # Same words plus the situation: not equal after normalization, so it passes.
    assert_admitted(decide(base_journal(), proposal(cue=f"{OUTCOME} while regenerating the client")))


@pytest.mark.parametrize("cue", ["", "   ", "  ...  ", "\t-\n", "\u3000!?\u3000"])
def test_rule2_blank_cue(cue: str) -> None:
    assert normalize(cue) == ""
    assert_dropped_by(decide(base_journal(), proposal(cue=cue)), RULE_CUE)


def test_rule2_cue_over_512_characters() -> None:
    cue = "x" * (MAX_FAILURE_CUE_LENGTH + 1)
    assert len(cue) == 513
    assert_dropped_by(decide(base_journal(), proposal(cue=cue)), RULE_CUE)


def test_rule2_control_cue_of_exactly_512_characters_is_admitted() -> None:
    assert_admitted(decide(base_journal(), proposal(cue="x" * MAX_FAILURE_CUE_LENGTH)))


@pytest.mark.parametrize("signature", [None, "just a string", {"symptom": None}, {"recall_cue": 7, "symptom": None}])
def test_rule2_missing_or_malformed_signature(signature: Any) -> None:
    block = failure_block(cue=CUE, check_subject="client build")
    block["signature"] = signature
    assert_dropped_by(decide(base_journal(), proposal(failure=block)), RULE_CUE)


def test_rule2_absent_signature_key() -> None:
    block = failure_block(cue=CUE, check_subject="client build")
    del block["signature"]
    assert_dropped_by(decide(base_journal(), proposal(failure=block)), RULE_CUE)


# -- rule 3: repair_surface ----------------------------------------------------------------


SURFACES = ["experience_content", "working_state", "recall_policy", "acceptance_check"]


@pytest.mark.parametrize("surface", SURFACES)
def test_rule3_control_every_enum_value_is_admitted(surface: str) -> None:
    assert_admitted(decide(base_journal(), proposal(surface=surface)))


@pytest.mark.parametrize("surface", ["content", "", "Experience_Content", None, 3, ["working_state"]])
def test_rule3_bad_repair_surface(surface: Any) -> None:
    assert_dropped_by(decide(base_journal(), proposal(surface=surface)), RULE_REPAIR_SURFACE)


def test_rule3_missing_repair_surface() -> None:
    block = failure_block(cue=CUE, check_subject="client build")
    del block["repair_surface"]
    assert_dropped_by(decide(base_journal(), proposal(failure=block)), RULE_REPAIR_SURFACE)


# -- rule 4: runnable_verification ------------------------------------------------------------


def _verification(**changes: Any) -> dict[str, Any]:
    block = failure_block(cue=CUE, condition="openapi.yaml was edited", check_subject="client build")
    for name, value in changes.items():
        if value is _DELETE:
            del block["verification"][name]
        else:
            block["verification"][name] = value
    return block


_DELETE = object()


@pytest.mark.parametrize(
    "changes",
    [
        {"condition": _DELETE},
        {"condition": ""},
        {"condition": "   "},
        {"condition": " ... "},
        {"condition": None},
        {"check_subject": _DELETE},
        {"check_subject": ""},
        {"check_subject": "\t\n"},
        {"check_subject": "--"},
        {"check_subject": None},
        {"check_subject": "y" * (MAX_FAILURE_CUE_LENGTH + 1)},
        {"condition": _DELETE, "check_subject": _DELETE},
    ],
    ids=lambda c: ",".join(f"{k}={'<missing>' if v is _DELETE else repr(v)[:12]}" for k, v in c.items()),
)
def test_rule4_missing_or_blank_verification_binding(changes: dict[str, Any]) -> None:
    record = decide(base_journal(), proposal(failure=_verification(**changes)))
    assert_dropped_by(record, RULE_VERIFICATION)


@pytest.mark.parametrize("verification", [None, {}, "run the tests"])
def test_rule4_missing_or_malformed_verification_block(verification: Any) -> None:
    block = _verification()
    block["verification"] = verification
    assert_dropped_by(decide(base_journal(), proposal(failure=block)), RULE_VERIFICATION)


def test_rule4_absent_verification_key() -> None:
    block = _verification()
    del block["verification"]
    assert_dropped_by(decide(base_journal(), proposal(failure=block)), RULE_VERIFICATION)


def test_rule4_control_present_bindings_are_admitted() -> None:
    assert_admitted(decide(base_journal(), proposal(failure=_verification())))


# -- well_formed_proposal: a malformed block is an admission decision, never a dead letter -------------


@pytest.mark.parametrize(
    ("failure", "rule"),
    [
        ([], RULE_WELL_FORMED),
        ("the build failed", RULE_WELL_FORMED),
        (42, RULE_WELL_FORMED),
        (True, RULE_WELL_FORMED),
        ({**failure_block(cue=CUE, check_subject="client build"), "severity": "high"}, RULE_WELL_FORMED),
        ({}, RULE_CUE),
        ({"signature": "x"}, RULE_CUE),
    ],
)
def test_malformed_failure_block_gives_an_admission_record_not_a_dead_letter(failure: Any, rule: str) -> None:
    journal = base_journal()
    journal.candidate("c1", proposal(failure=failure), ["O1"])
    records, _ = run(journal)
    assert not any(isinstance(r, DeadLetterRecord) for r in records), kinds(records)
    (record,) = admissions(records)
    assert_dropped_by(record, rule, only=False)


def test_malformed_block_with_everything_missing_names_each_rule() -> None:
    record = decide(base_journal(), proposal(failure={}))
    assert_dropped_by(record, RULE_CUE, RULE_REPAIR_SURFACE, RULE_VERIFICATION)


@pytest.mark.parametrize("field", ["situation", "action", "outcome", "lesson"])
def test_well_formed_proposal_missing_experience_field(field: str) -> None:
    content = proposal()
    del content[field]
    assert_dropped_by(decide(base_journal(), content), RULE_WELL_FORMED)


def test_well_formed_proposal_unknown_field() -> None:
    assert_dropped_by(decide(base_journal(), {**proposal(), "importance": 0.9}), RULE_WELL_FORMED)


# -- rule 6: provenance --------------------------------------------------------------------


def test_rule6_zero_sources() -> None:
    record = decide(base_journal(), sources=[])
    # With nothing cited there is no failing observation either; provenance must still be named.
    assert_dropped_by(record, RULE_PROVENANCE, RULE_FAILING_OBSERVATION)
    assert any("got 0" in v.message for v in record.violations if v.rule == RULE_PROVENANCE)


def _many_sources(count: int) -> tuple[Journal, list[str]]:
    journal = base_journal()
    ids = ["O1"] + [f"ev-{i}" for i in range(2, count + 1)]
    for source_id in ids[1:]:
        journal.evidence(source_id)
    return journal, ids


def test_rule6_thirty_three_sources() -> None:
    journal, ids = _many_sources(MAX_CANDIDATE_EVIDENCE + 1)
    assert len(ids) == 33
    assert_dropped_by(decide(journal, sources=ids), RULE_PROVENANCE)


def test_rule6_control_thirty_two_sources_are_admitted() -> None:
    journal, ids = _many_sources(MAX_CANDIDATE_EVIDENCE)
    assert len(ids) == 32
    assert_admitted(decide(journal, sources=ids))


def test_rule6_unresolvable_source_next_to_a_failing_outcome() -> None:
    record = decide(base_journal(), sources=["O1", "ev-missing"])
    assert_dropped_by(record, RULE_PROVENANCE)
    assert "content/ev-missing" in record.violations[0].message


def test_rule6_source_ref_must_match_exactly_including_source_type() -> None:
    journal = base_journal()
    journal.candidate("c1", proposal(), ["O1"])["candidate"]["sources"].append(
        {"source_type": "git", "source_id": "ev-1"}
    )
    records, _ = run(journal)
    (record,) = admissions(records)
    assert_dropped_by(record, RULE_PROVENANCE)


def test_rule6_unresolvable_cited_artifact() -> None:
    record = decide(base_journal(), artifacts=[artifact_ref("E404")])
    assert_dropped_by(record, RULE_PROVENANCE)
    assert "experience/E404@1" in record.violations[0].message


def test_rule6_control_resolvable_cited_artifact_is_admitted() -> None:
    journal = base_journal()
    journal.experience("E7", 1, failure_block(cue="an unrelated situation entirely"))
    assert_admitted(decide(journal, artifacts=[artifact_ref("E7")]))


# -- rule 5: no_silent_near_twin (warns, never drops, never links) ----------------------------------

EXISTING_CUE = "regenerate the client after editing openapi"  # 6 tokens, 5 bigrams
TWIN_AT_080 = "regenerate the client after editing"  # 5 tokens, 4 bigrams, all shared: 4/5
# 16 tokens, 15 distinct bigrams; the twin appends 4 tokens (4 new bigrams): 15/19 ~ 0.789.
LONG_EXISTING = (
    "when the openapi contract changes the generated client sources must be regenerated before integration tests run"
)
TWIN_BELOW = LONG_EXISTING + " in the ci pipeline"


def _with_existing_record(cue: str = EXISTING_CUE, artifact_id: str = "E7") -> Journal:
    journal = base_journal()
    journal.experience(artifact_id, 1, failure_block(cue=cue, check_subject="client build"))
    return journal


def _exact_jaccard(left: str, right: str) -> Fraction:
    a, b = bigrams(normalize(left)), bigrams(normalize(right))
    return Fraction(len(a & b), len(a | b))


def test_near_twin_fixtures_sit_where_claimed() -> None:
    assert _exact_jaccard(TWIN_AT_080, EXISTING_CUE) == Fraction(4, 5)
    assert _exact_jaccard(TWIN_BELOW, LONG_EXISTING) == Fraction(15, 19)
    at = bigram_overlap(normalize(TWIN_AT_080), normalize(EXISTING_CUE))
    below = bigram_overlap(normalize(TWIN_BELOW), normalize(LONG_EXISTING))
    assert at == NEAR_DUPLICATE_BIGRAM_OVERLAP == 0.8
    assert 0.78 < below < NEAR_DUPLICATE_BIGRAM_OVERLAP


def test_near_twin_at_exactly_080_warns_and_is_still_admitted() -> None:
    record = decide(_with_existing_record(), proposal(cue=TWIN_AT_080))
    assert_admitted(record)
    (warning,) = record.warnings
    assert warning.rule == RULE_NEAR_TWIN
    assert warning.artifact_ref == ArtifactRef(family="experience", artifact_id="E7", revision=1)
    assert warning.signature_key == normalize(EXISTING_CUE)
    assert warning.overlap == pytest.approx(0.8)
    assert "experience/E7" in warning.message and "0.80" in warning.message


def test_near_twin_below_threshold_gives_no_warning() -> None:
    record = decide(_with_existing_record(LONG_EXISTING), proposal(cue=TWIN_BELOW))
    assert_admitted(record)
    assert record.warnings == ()


def test_near_twin_normalized_equal_cue_warns_with_overlap_one() -> None:
    record = decide(_with_existing_record(), proposal(cue="  Regenerate the CLIENT after editing OpenAPI. "))
    assert_admitted(record)
    (warning,) = record.warnings
    assert warning.overlap == 1.0


def test_near_twin_warning_does_not_save_a_dropped_candidate() -> None:
    record = decide(_with_existing_record(), proposal(cue=TWIN_AT_080), sources=["ev-1"])
    assert_dropped_by(record, RULE_FAILING_OBSERVATION)
    assert [w.rule for w in record.warnings] == [RULE_NEAR_TWIN]


def test_near_twin_names_every_overlapping_head() -> None:
    journal = _with_existing_record()
    journal.experience("E8", 1, failure_block(cue=EXISTING_CUE.upper(), check_subject="client build"))
    journal.experience("E9", 1, failure_block(cue="something unrelated", check_subject="client build"))
    record = decide(journal, proposal(cue=TWIN_AT_080))
    assert_admitted(record)
    assert sorted(w.artifact_ref.artifact_id for w in record.warnings) == ["E7", "E8"]


def test_near_twin_compares_with_current_heads_only() -> None:
    journal = _with_existing_record()
    rewritten = failure_block(cue="a rewritten, different situation", check_subject="client build")
    journal.experience("E7", 2, rewritten)
    assert decide(journal, proposal(cue=TWIN_AT_080)).warnings == ()


def test_near_twin_ignores_experience_heads_without_a_failure_block() -> None:
    journal = base_journal()
    journal.experience("E7", 1, None, outcome=EXISTING_CUE)
    assert decide(journal, proposal(cue=EXISTING_CUE)).warnings == ()


def test_near_twin_never_writes_observations_statistics_or_links() -> None:
    """RFC: a near-duplicate only suggests; it never writes a counter and never links a recurrence."""
    journal = _with_existing_record()
    runner = Runner()
    runner.feed(journal.lines())
    before = runner.stats()

    journal.candidate("c1", proposal(cue=TWIN_AT_080), ["O1"])
    records = runner.feed(journal.lines()[-1:])
    assert kinds(records) == ["admission:admitted"]
    assert admissions(records)[0].warnings
    assert runner.stats() == before

    # A later failure whose text is the near-twin cue is unmatched: only exact equality links.
    journal.outcome("O2", status="failed", receipt=None, checks=[check(TWIN_AT_080, "failed")])
    records = runner.feed(journal.lines()[-1:])
    assert kinds(records) == ["match:unmatched"]
    after = runner.stats()
    assert (after["recurred"], after["needing_review"], after["top_revisions"]) == (0, 0, [])


# -- candidates without a failure block ---------------------------------------------------------


@pytest.mark.parametrize("sources", [[], ["ev-unknown"], ["ev-1"]])
def test_candidate_without_failure_block_passes_unchanged(sources: list[str]) -> None:
    record = decide(base_journal(), experience_content(None, outcome=OUTCOME), sources=sources)
    assert_admitted(record)
    assert record.warnings == ()


def test_candidate_with_explicit_null_failure_passes() -> None:
    content = experience_content(None)
    content["failure"] = None
    assert_admitted(decide(Journal(), content, sources=[]))


# -- one decision, one record; replay; immutability -------------------------------------------------


def test_every_decision_writes_exactly_one_admission_record_in_order() -> None:
    journal = _with_existing_record()
    journal.candidate("ok", proposal(), ["O1"])
    journal.candidate("twin", proposal(cue=TWIN_AT_080), ["O1"])
    journal.candidate("no-evidence", proposal(), ["ev-1"])
    journal.candidate("plain", experience_content(None), [])
    journal.candidate("many-faults", proposal(failure={}), [])
    records, _ = run(journal)
    decided = admissions(records)
    assert [(r.candidate_id, r.decision) for r in decided] == [
        ("ok", "admitted"),
        ("twin", "admitted"),
        ("no-evidence", "dropped"),
        ("plain", "admitted"),
        ("many-faults", "dropped"),
    ]
    assert len(records) == len(decided) + 1  # plus O1's unmatched match record


def test_replaying_candidate_entries_writes_no_second_admission_record() -> None:
    journal = base_journal()
    journal.candidate("c1", proposal(), ["O1"])
    journal.candidate("c2", proposal(), ["ev-1"])  # a dropped decision is not re-made either
    runner = Runner()
    first = runner.feed(journal.lines())
    assert [r.candidate_id for r in admissions(first)] == ["c1", "c2"]

    assert runner.feed(journal.lines()) == []  # same lines again: re-delivery
    assert Runner(store=runner.store).feed(journal.lines()) == []  # after a restart on the same state


def test_same_candidate_at_a_new_position_writes_nothing() -> None:
    journal = base_journal()
    journal.candidate("c1", proposal(), ["O1"])
    journal.candidate("c1", proposal(), ["O1"])  # identical body, next position
    journal.candidate("c2", proposal(), ["ev-1"])
    journal.candidate("c2", proposal(), ["ev-1"])
    records, runner = run(journal)
    decided = [(r.candidate_id, r.decision) for r in admissions(records)]
    assert decided == [("c1", "admitted"), ("c2", "dropped")]
    assert not any(isinstance(r, DeadLetterRecord) for r in records)
    # The re-sent entry still consumed its position (it was valid).
    assert runner.last_position() == journal.positions[SCOPE]


def test_a_dropped_candidate_is_not_re_decided_when_evidence_arrives_later() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    journal.candidate("c1", proposal(), ["O1"])
    failing_outcome(journal, "O1")
    journal.candidate("c1", proposal(), ["O1"])  # same candidate again: decision already made
    records, _ = run(journal)
    assert [r.decision for r in admissions(records)] == ["dropped"]


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["proposal"].update(lesson="a different lesson"),
        lambda c: c.update(sources=[source_ref("ev-1")]),
        lambda c: c.update(reason="another reason"),
    ],
)
def test_same_candidate_id_with_different_content_is_an_immutable_conflict(change: Any) -> None:
    journal = base_journal()
    journal.candidate("c1", proposal(), ["O1"])
    change(journal.candidate("c1", proposal(), ["O1"])["candidate"])
    records, _ = run(journal)
    assert kinds(records)[-2:] == ["admission:admitted", "dead_letter:immutable_conflict"]
    dead = records[-1]
    assert isinstance(dead, DeadLetterRecord)
    assert (dead.scope_id, dead.position) == (SCOPE, journal.positions[SCOPE])
    assert "c1" not in dead.detail and "candidate_id" in dead.detail  # names the field, never its value
    assert len(admissions(records)) == 1


def test_candidate_ids_are_per_scope() -> None:
    journal = base_journal()
    journal.evidence("ev-1", scope="team-b")
    failing_outcome(journal, "O1", scope="team-b")
    journal.candidate("c1", proposal(), ["O1"])
    journal.candidate("c1", proposal(), ["O1"], scope="team-b")
    records, _ = run(journal)
    decided = [(r.scope_id, r.decision) for r in admissions(records)]
    assert decided == [(SCOPE, "admitted"), ("team-b", "admitted")]


def test_plain_candidate_that_is_not_valid_experience_content_is_dropped() -> None:
    """No failure block, but not an ExperienceContent either: well_formed_proposal, not a pass-through."""
    content = experience_content(None)
    del content["lesson"]
    assert_dropped_by(decide(Journal(), content, sources=[]), RULE_WELL_FORMED)


# -- every violated rule is named ---------------------------------------------------------------------


def test_a_candidate_breaking_two_rules_names_both() -> None:
    record = decide(base_journal(), proposal(cue=OUTCOME, surface="content"))
    assert_dropped_by(record, RULE_CUE, RULE_REPAIR_SURFACE)


def test_a_candidate_breaking_independent_rules_names_each() -> None:
    # Schema-routed rules and state-based rules are all reported together.
    record = decide(base_journal(), proposal(failure=_verification(condition="  ")), sources=["ev-1", "nope"])
    assert_dropped_by(record, RULE_VERIFICATION, RULE_FAILING_OBSERVATION, RULE_PROVENANCE)


def test_near_twin_skips_the_record_the_candidate_revises() -> None:
    journal = _with_existing_record()
    journal.experience("E8", 1, failure_block(cue=EXISTING_CUE.upper(), check_subject="client build"))
    target = {"family": "experience", "artifact_id": "E7", "revision": 1}
    record = decide(journal, proposal(cue=TWIN_AT_080), target=target)
    assert_admitted(record)
    assert [w.artifact_ref.artifact_id for w in record.warnings] == ["E8"]


def test_provenance_target_must_resolve() -> None:
    target = {"family": "experience", "artifact_id": "E404", "revision": 9}
    record = decide(base_journal(), proposal(), target=target)
    assert_dropped_by(record, RULE_PROVENANCE)
    assert "experience/E404@9" in record.violations[0].message


def test_a_malformed_proposal_still_gets_its_near_twin_warning() -> None:
    record = decide(_with_existing_record(), proposal(cue=TWIN_AT_080, surface="nope"))
    assert_dropped_by(record, RULE_REPAIR_SURFACE)
    assert [w.rule for w in record.warnings] == [RULE_NEAR_TWIN]


def test_an_admission_names_its_target_and_cue_so_review_need_not_read_the_journal() -> None:
    journal = base_journal()
    journal.experience("E1", 1, failure_block(cue="an older cue"))
    entry = journal.candidate("c1", proposal(cue="Port already bound in the sandbox"), ["O1"])
    entry["candidate"]["target"] = {"family": "experience", "artifact_id": "E1", "revision": 1}
    journal.candidate("c2", proposal(failure={"signature": "not an object"}), ["O1"])
    first, second = admissions(run(journal)[0])
    assert first.target is not None and first.target.artifact_id == "E1"
    assert first.recall_cue == "Port already bound in the sandbox"
    assert second.target is None and second.recall_cue is None
