"""RFC "Record validation rejects any event that violates this matrix before it reaches persistence".

Each test takes a valid record the engine produced, breaks exactly one rule,
rebuilds the record's own id (so only the targeted rule can object) and
expects construction to fail with that rule's message.
"""

from typing import Any

import pytest
from pydantic import ValidationError

from recurrence_ledger.schemas.base import ArtifactRef, SourceRef
from recurrence_ledger.schemas.canonical import digest
from recurrence_ledger.schemas.records import MatchRecord, ObservationRecord, TaskOutcomeItemRef
from tests.support.builders import CONDITION, CUE, check, claim, linked_setup, run


def _records() -> dict[str, Any]:
    journal = linked_setup()
    journal.outcome("O-pass", checks=[check(CUE)], observations=[claim(CONDITION)])
    journal.outcome("O-fail", status="failed", checks=[check(CUE, "failed")], observations=[claim("noise", False)])
    journal.outcome("O-unl", status="failed", receipt=None, checks=[check(CUE, "failed"), check("other", "failed")])
    records, _ = run(journal)
    out: dict[str, Any] = {}
    for record in records:
        if isinstance(record, ObservationRecord):
            out.setdefault(record.event, record)
        elif isinstance(record, MatchRecord):
            out.setdefault(f"match:{record.result}", record)
    assert set(out) >= {"selected", "avoided", "recurred", "match:matched", "match:unmatched"}
    return out


RECORDS = _records()


def fields(record: ObservationRecord | MatchRecord) -> dict[str, Any]:
    data = dict(record)
    data.pop("record")
    data.pop("observation_id", None)
    data.pop("match_digest", None)
    data.pop("candidate_set_digest", None)
    return data


def other_ref(ref: TaskOutcomeItemRef, **changes: Any) -> TaskOutcomeItemRef:
    return ref.model_copy(update=changes)


ELSEWHERE = SourceRef(source_type="content", source_id="another-outcome")


def test_valid_records_rebuild_to_identical_ids() -> None:
    for event in ("selected", "avoided", "recurred"):
        record = RECORDS[event]
        assert ObservationRecord.build(**fields(record)) == record
    match = RECORDS["match:matched"]
    assert MatchRecord.build(**fields(match)) == match


# --- RecurrenceObservation ----------------------------------------------------------


@pytest.mark.parametrize("missing", ["handoff_receipt_ref", "handoff_ref"])
def test_selected_requires_handoff_provenance(missing: str) -> None:
    with pytest.raises(ValidationError, match="selected requires handoff_receipt_ref and handoff_ref"):
        ObservationRecord.build(**{**fields(RECORDS["selected"]), missing: None})


def test_selected_carries_no_item_locator() -> None:
    condition = RECORDS["avoided"].condition_ref
    with pytest.raises(ValidationError, match="selected carries no item locator"):
        ObservationRecord.build(**{**fields(RECORDS["selected"]), "condition_ref": condition})


def test_selected_carries_no_match_digest() -> None:
    with pytest.raises(ValidationError, match="selected carries no match digest"):
        ObservationRecord.build(**{**fields(RECORDS["selected"]), "recurrence_match_digest": "sha256:" + "1" * 64})


@pytest.mark.parametrize("missing", ["handoff_receipt_ref", "handoff_ref"])
def test_avoided_requires_handoff_provenance(missing: str) -> None:
    with pytest.raises(ValidationError, match="avoided requires handoff_receipt_ref and handoff_ref"):
        ObservationRecord.build(**{**fields(RECORDS["avoided"]), missing: None})


def test_avoided_requires_condition_observation() -> None:
    avoided = RECORDS["avoided"]
    with pytest.raises(ValidationError, match="condition_ref locating an observation"):
        ObservationRecord.build(**{**fields(avoided), "condition_ref": None})
    with pytest.raises(ValidationError, match="condition_ref locating an observation"):
        ObservationRecord.build(
            **{**fields(avoided), "condition_ref": other_ref(avoided.condition_ref, item_kind="check")}
        )


def test_avoided_requires_check() -> None:
    avoided = RECORDS["avoided"]
    with pytest.raises(ValidationError, match="check_ref locating a check"):
        ObservationRecord.build(**{**fields(avoided), "check_ref": None})
    with pytest.raises(ValidationError, match="check_ref locating a check"):
        ObservationRecord.build(
            **{**fields(avoided), "check_ref": other_ref(avoided.check_ref, item_kind="observation")}
        )


def test_avoided_carries_no_failure_evidence() -> None:
    avoided, recurred = RECORDS["avoided"], RECORDS["recurred"]
    failure = other_ref(recurred.failure_ref, task_outcome_ref=avoided.task_outcome_ref)
    with pytest.raises(ValidationError, match="avoided carries no failure_ref"):
        ObservationRecord.build(**{**fields(avoided), "failure_ref": failure})


def test_recurred_requires_failure_ref_and_match_digest() -> None:
    recurred = RECORDS["recurred"]
    for missing in ("failure_ref", "recurrence_match_digest"):
        with pytest.raises(ValidationError, match="recurred requires failure_ref and recurrence_match_digest"):
            ObservationRecord.build(**{**fields(recurred), missing: None})


def test_recurred_carries_no_condition_or_check() -> None:
    recurred = RECORDS["recurred"]
    condition = other_ref(RECORDS["avoided"].condition_ref, task_outcome_ref=recurred.task_outcome_ref)
    with pytest.raises(ValidationError, match="recurred carries no condition/check"):
        ObservationRecord.build(**{**fields(recurred), "condition_ref": condition})


def test_recurred_carries_no_handoff_provenance() -> None:
    recurred = RECORDS["recurred"]
    with pytest.raises(ValidationError, match="recurred is provenance of the failure item"):
        ObservationRecord.build(**{**fields(recurred), "handoff_ref": RECORDS["selected"].handoff_ref})


@pytest.mark.parametrize(
    "event,locator", [("avoided", "condition_ref"), ("avoided", "check_ref"), ("recurred", "failure_ref")]
)
def test_item_locators_resolve_in_the_same_outcome(event: str, locator: str) -> None:
    record = RECORDS[event]
    moved = other_ref(getattr(record, locator), task_outcome_ref=ELSEWHERE)
    with pytest.raises(ValidationError, match="item locators must resolve in this Outcome"):
        ObservationRecord.build(**{**fields(record), locator: moved})


def test_observation_id_is_derived_from_evidence() -> None:
    data = RECORDS["selected"].model_dump()
    data["observation_id"] = "sha256:" + "2" * 64
    with pytest.raises(ValidationError, match="observation_id must be derived"):
        ObservationRecord.model_validate(data)
    data = RECORDS["selected"].model_dump()
    data["task_outcome_position"] += 1  # any evidence change changes the id
    with pytest.raises(ValidationError, match="observation_id must be derived"):
        ObservationRecord.model_validate(data)


def test_unknown_is_never_an_event() -> None:
    with pytest.raises(ValidationError):
        ObservationRecord.build(**{**fields(RECORDS["selected"]), "event": "unknown"})


def test_only_exact_match_basis() -> None:
    with pytest.raises(ValidationError):
        ObservationRecord.build(**{**fields(RECORDS["selected"]), "match_basis": "fuzzy"})


def test_observation_signature_key_is_normalized() -> None:
    with pytest.raises(ValidationError, match="signature_key must already be normalized"):
        ObservationRecord.build(**{**fields(RECORDS["selected"]), "signature_key": CUE})


# --- RecurrenceMatch ------------------------------------------------------------------


def test_match_failure_ref_locates_its_outcome() -> None:
    match = RECORDS["match:matched"]
    with pytest.raises(ValidationError, match="failure_ref must locate this Task Outcome"):
        MatchRecord.build(**{**fields(match), "failure_ref": other_ref(match.failure_ref, task_outcome_ref=ELSEWHERE)})


def test_match_candidates_sorted_and_unique() -> None:
    match = RECORDS["match:matched"]
    extra = ArtifactRef(family="experience", artifact_id="A0", revision=1)
    with pytest.raises(ValidationError, match="candidate_refs must be sorted and unique"):
        MatchRecord.build(**{**fields(match), "candidate_refs": (*match.candidate_refs, extra)})
    with pytest.raises(ValidationError, match="candidate_refs must be sorted and unique"):
        MatchRecord.build(**{**fields(match), "candidate_refs": match.candidate_refs * 2})


def test_match_candidate_set_digest_checked() -> None:
    data = RECORDS["match:matched"].model_dump()
    data["candidate_set_digest"] = digest([])
    with pytest.raises(ValidationError, match="candidate_set_digest must be the digest"):
        MatchRecord.model_validate(data)


def test_matched_requires_target_in_frozen_set() -> None:
    match = RECORDS["match:matched"]
    with pytest.raises(ValidationError, match="matched requires its exact target"):
        MatchRecord.build(**{**fields(match), "artifact_ref": None})
    outsider = ArtifactRef(family="experience", artifact_id="E99", revision=1)
    with pytest.raises(ValidationError, match="a matched target must come from the frozen set"):
        MatchRecord.build(**{**fields(match), "artifact_ref": outsider})
    with pytest.raises(ValidationError, match="signature_key must already be normalized"):
        MatchRecord.build(**{**fields(match), "signature_key": CUE})


@pytest.mark.parametrize("result", ["unmatched", "ambiguous"])
def test_unmatched_and_ambiguous_carry_no_target(result: str) -> None:
    match = RECORDS["match:matched"]
    with pytest.raises(ValidationError, match="unmatched and ambiguous decisions carry no target"):
        MatchRecord.build(**{**fields(match), "result": result})


def test_match_digest_is_the_records_own() -> None:
    data = RECORDS["match:unmatched"].model_dump()
    data["task_outcome_position"] += 1
    with pytest.raises(ValidationError, match="match_digest must be the record's digest"):
        MatchRecord.model_validate(data)
