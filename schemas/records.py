"""Output records (contract section 2) and the RFC's record validation matrix.

A record that violates the matrix cannot be constructed, so it can never reach
a ledger file or topic ("Record validation rejects any event that violates this
matrix before it reaches persistence").
"""

import functools
import re
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from .base import ArtifactRef, Position, ScopeId, SourceRef, Value
from .canonical import digest
from .constants import MAX_CANDIDATE_EVIDENCE, MAX_POSITION
from .normalize import normalize
from .powercontext import ExperienceContent

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]

ItemKind = Literal["observation", "check"]
CandidateSetMode = Literal["handoff_citations", "scope_heads"]
MatchResult = Literal["matched", "unmatched", "ambiguous"]
RecurrenceEvent = Literal["selected", "recurred", "avoided"]


class RecordValidationError(ValueError):
    """A record broke the RFC's validation matrix."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise RecordValidationError(message)


class TaskOutcomeItemRef(Value):
    task_outcome_ref: SourceRef
    item_kind: ItemKind
    item_index: Annotated[int, Field(ge=0, le=MAX_POSITION)]
    item_digest: Digest


@functools.lru_cache(maxsize=16)
def candidate_set_digest(refs: tuple[ArtifactRef, ...]) -> str:
    """Digest of the ``candidate_refs`` list; memoized because one Outcome's
    failure items all share one frozen set."""
    return digest([r.model_dump(mode="json") for r in refs])


def self_digest(model: Value, *exclude: str) -> str:
    """Digest of a record without ``record`` and its own id field(s)."""
    return digest(model.model_dump(mode="json", by_alias=True, exclude={"record", *exclude}))


class MatchRecord(Value):
    record: Literal["match"] = "match"
    scope_id: ScopeId
    task_outcome_ref: SourceRef
    task_outcome_position: Position
    failure_ref: TaskOutcomeItemRef
    candidate_set_mode: CandidateSetMode
    candidate_refs: tuple[ArtifactRef, ...]
    candidate_set_digest: Digest
    result: MatchResult
    artifact_ref: ArtifactRef | None = None
    signature_key: str | None = None
    match_digest: Digest

    @model_validator(mode="after")
    def _matrix(self) -> Self:
        _require(
            self.failure_ref.task_outcome_ref == self.task_outcome_ref, "failure_ref must locate this Task Outcome"
        )
        identities = [ref.identity() for ref in self.candidate_refs]
        _require(identities == sorted(set(identities)), "candidate_refs must be sorted and unique")
        _require(
            self.candidate_set_digest == candidate_set_digest(self.candidate_refs),
            "candidate_set_digest must be the digest of candidate_refs",
        )
        if self.result == "matched":
            _require(self.artifact_ref is not None and bool(self.signature_key), "matched requires its exact target")
            _require(self.artifact_ref in self.candidate_refs, "a matched target must come from the frozen set")
            _require(
                self.signature_key is not None and normalize(self.signature_key) == self.signature_key,
                "signature_key must already be normalized",
            )
        else:
            _require(
                self.artifact_ref is None and self.signature_key is None,
                "unmatched and ambiguous decisions carry no target",
            )
        _require(self.match_digest == self_digest(self, "match_digest"), "match_digest must be the record's digest")
        return self

    @classmethod
    def build(cls, **fields: Any) -> "MatchRecord":
        fields["candidate_set_digest"] = candidate_set_digest(fields["candidate_refs"])
        draft = cls.model_construct(**fields, match_digest="")
        data = {**fields, "match_digest": self_digest(draft, "match_digest")}
        return cls.model_validate(data)


class ObservationRecord(Value):
    record: Literal["observation"] = "observation"
    observation_id: Digest
    scope_id: ScopeId
    artifact_ref: ArtifactRef
    signature_key: Annotated[str, Field(min_length=1)]
    event: RecurrenceEvent
    match_basis: Literal["exact"] = "exact"
    task_outcome_ref: SourceRef
    task_outcome_position: Position
    handoff_receipt_ref: SourceRef | None = None
    handoff_ref: ArtifactRef | None = None
    condition_ref: TaskOutcomeItemRef | None = None
    check_ref: TaskOutcomeItemRef | None = None
    failure_ref: TaskOutcomeItemRef | None = None
    recurrence_match_digest: Digest | None = None

    @model_validator(mode="after")
    def _matrix(self) -> Self:
        _require(normalize(self.signature_key) == self.signature_key, "signature_key must already be normalized")
        for ref in (self.condition_ref, self.check_ref, self.failure_ref):
            if ref is not None:
                _require(ref.task_outcome_ref == self.task_outcome_ref, "item locators must resolve in this Outcome")
        linked = self.handoff_receipt_ref is not None and self.handoff_ref is not None
        if self.event == "selected":
            _require(linked, "selected requires handoff_receipt_ref and handoff_ref")
            _require(
                self.condition_ref is None and self.check_ref is None and self.failure_ref is None,
                "selected carries no item locator",
            )
            _require(self.recurrence_match_digest is None, "selected carries no match digest")
        elif self.event == "avoided":
            _require(linked, "avoided requires handoff_receipt_ref and handoff_ref")
            _require(
                self.condition_ref is not None and self.condition_ref.item_kind == "observation",
                "avoided requires condition_ref locating an observation",
            )
            _require(
                self.check_ref is not None and self.check_ref.item_kind == "check",
                "avoided requires check_ref locating a check",
            )
            _require(
                self.failure_ref is None and self.recurrence_match_digest is None,
                "avoided carries no failure_ref or match digest",
            )
        else:
            _require(
                self.failure_ref is not None and self.recurrence_match_digest is not None,
                "recurred requires failure_ref and recurrence_match_digest",
            )
            _require(self.condition_ref is None and self.check_ref is None, "recurred carries no condition/check")
            _require(
                self.handoff_receipt_ref is None and self.handoff_ref is None,
                "recurred is provenance of the failure item, not of a Handoff",
            )
        _require(
            self.observation_id == self_digest(self, "observation_id"),
            "observation_id must be derived from the event's evidence",
        )
        return self

    @classmethod
    def build(cls, **fields: Any) -> "ObservationRecord":
        draft = cls.model_construct(**fields, observation_id="")
        data = {**fields, "observation_id": self_digest(draft, "observation_id")}
        return cls.model_validate(data)


class ReviewProposalRecord(Value):
    record: Literal["review_proposal"] = "review_proposal"
    scope_id: ScopeId
    target: ArtifactRef
    proposal: ExperienceContent
    sources: Annotated[tuple[SourceRef, ...], Field(min_length=1, max_length=MAX_CANDIDATE_EVIDENCE)]
    reason: Annotated[str, Field(min_length=1)]
    streak: Annotated[int, Field(ge=1)]


class Violation(Value):
    rule: str
    message: str


class NearTwinWarning(Value):
    rule: Literal["no_silent_near_twin"] = "no_silent_near_twin"
    artifact_ref: ArtifactRef
    signature_key: str
    overlap: Annotated[float, Field(ge=0.0, le=1.0)]
    message: str


class AdmissionRecord(Value):
    record: Literal["admission"] = "admission"
    scope_id: ScopeId
    candidate_id: str
    decision: Literal["admitted", "dropped"]
    violations: tuple[Violation, ...] = ()
    warnings: tuple[NearTwinWarning, ...] = ()
    # Enough of the candidate that a Review service need not read the journal
    # (an extension of the contract's fields; docs/decisions.md, decision 36).
    target: ArtifactRef | None = None
    recall_cue: str | None = None

    @model_validator(mode="after")
    def _decision(self) -> Self:
        _require((self.decision == "dropped") == bool(self.violations), "dropped exactly when a rule is violated")
        return self


class LineOrigin(Value):
    """Where a journal file's entry came from: its 1-based line."""

    line: Annotated[int, Field(ge=1)]


class KafkaOrigin(Value):
    """Where a journal topic's entry came from."""

    topic: Annotated[str, Field(min_length=1)]
    partition: Annotated[int, Field(ge=0)]
    offset: Annotated[int, Field(ge=0)]


class DeadLetterRecord(Value):
    record: Literal["dead_letter"] = "dead_letter"
    dead_letter_id: Digest
    origin: LineOrigin | KafkaOrigin
    scope_id: str | None = None
    position: int | None = None
    error: str
    detail: str
    raw: str

    @model_validator(mode="after")
    def _identity(self) -> Self:
        _require(
            self.dead_letter_id == self_digest(self, "dead_letter_id"),
            "dead_letter_id must be the digest of the record",
        )
        return self


OutputRecord = MatchRecord | ObservationRecord | ReviewProposalRecord | AdmissionRecord | DeadLetterRecord


def is_digest(value: str) -> bool:
    return _DIGEST.fullmatch(value) is not None
