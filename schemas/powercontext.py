"""PowerContext content shapes the processor reads: Experience, Handoff, Task Outcome, Receipt.

They mirror PowerContext's own models field for field (names, enums, limits and
the cross-field rules), so a Source journal can be consumed unchanged.
"""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from .base import (
    ArtifactRef,
    ConditionText,
    ExperienceText,
    FailureCueText,
    HandoffText,
    SourceRef,
    Value,
    WorkText,
)
from .constants import (
    MAX_HANDOFF_CITATIONS,
    MAX_HANDOFF_OMISSIONS,
    MAX_HANDOFF_RECEIPT_EVIDENCE,
    MAX_HANDOFF_STATE_STATEMENTS,
    MAX_WORK_CLAIM_EVIDENCE,
    MAX_WORK_EVIDENCE,
    MAX_WORK_ITEMS,
)

RepairSurface = Literal["experience_content", "working_state", "recall_policy", "acceptance_check"]
WorkClaimBasis = Literal["declared", "verified"]
TaskOutcomeStatus = Literal["succeeded", "partial", "blocked", "failed", "cancelled", "unknown"]
TaskCheckStatus = Literal["passed", "failed", "skipped", "timed_out", "unavailable", "cancelled", "unknown"]


# --- Experience -------------------------------------------------------------


class FailureSignature(Value):
    recall_cue: FailureCueText
    symptom: ExperienceText | None = None


class FailureVerification(Value):
    condition: ConditionText
    check_subject: FailureCueText


class FailureRecord(Value):
    signature: FailureSignature
    repair_surface: RepairSurface
    verification: FailureVerification


class ExperienceContent(Value):
    situation: ExperienceText
    action: ExperienceText
    outcome: ExperienceText
    lesson: ExperienceText
    failure: FailureRecord | None = None


# --- Handoff citations and content --------------------------------------------


class MemoryCitation(Value):
    memory_ref: ArtifactRef
    entry_id: Annotated[str, Field(min_length=1)]
    entry_version_id: Annotated[str, Field(min_length=1)]


class HandoffSourceCitation(Value):
    kind: Literal["source"] = "source"
    source_ref: SourceRef


class HandoffArtifactCitation(Value):
    kind: Literal["artifact"] = "artifact"
    artifact_ref: ArtifactRef


class HandoffMemoryCitation(Value):
    kind: Literal["memory"] = "memory"
    memory_citation: MemoryCitation


HandoffCitation = Annotated[
    HandoffSourceCitation | HandoffArtifactCitation | HandoffMemoryCitation,
    Field(discriminator="kind"),
]


class HandoffStatement(Value):
    text: HandoffText
    citations: Annotated[tuple[HandoffCitation, ...], Field(min_length=1, max_length=MAX_HANDOFF_CITATIONS)]


class HandoffOmission(Value):
    text: HandoffText
    citation: HandoffCitation | None = None


class HandoffContent(Value):
    schema_version: Literal["powercontext.handoff.v1"] = Field(default="powercontext.handoff.v1", alias="schema")
    objective: HandoffText
    state: Annotated[tuple[HandoffStatement, ...], Field(min_length=1, max_length=MAX_HANDOFF_STATE_STATEMENTS)]
    disposition: Literal["continuable", "blocked", "complete"]
    next_action: HandoffStatement | None = None
    omissions: Annotated[tuple[HandoffOmission, ...], Field(max_length=MAX_HANDOFF_OMISSIONS)] = ()

    def experience_citations(self) -> tuple[ArtifactRef, ...]:
        """Experience revisions this Handoff put in context (state, then next_action)."""
        statements = self.state + ((self.next_action,) if self.next_action is not None else ())
        return tuple(
            citation.artifact_ref
            for statement in statements
            for citation in statement.citations
            if isinstance(citation, HandoffArtifactCitation) and citation.artifact_ref.family == "experience"
        )


# --- Work continuity: Task Outcome and Handoff Receipt -----------------------------


def _check_evidence_basis(basis: WorkClaimBasis, evidence: tuple[object, ...], what: str) -> None:
    if basis == "verified" and not evidence:
        raise ValueError(f"verified {what} require exact evidence")
    if basis == "declared" and evidence:
        raise ValueError(f"declared {what} cannot present evidence as verified")


class WorkClaim(Value):
    text: WorkText
    basis: WorkClaimBasis = "declared"
    evidence: Annotated[tuple[HandoffCitation, ...], Field(max_length=MAX_WORK_CLAIM_EVIDENCE)] = ()

    @model_validator(mode="after")
    def _evidence_matches_basis(self) -> Self:
        _check_evidence_basis(self.basis, self.evidence, "Work claims")
        return self


class TaskCheck(Value):
    name: WorkText
    status: TaskCheckStatus
    details: WorkText | None = None
    basis: WorkClaimBasis = "declared"
    evidence: Annotated[tuple[HandoffCitation, ...], Field(max_length=MAX_WORK_EVIDENCE)] = ()

    @model_validator(mode="after")
    def _evidence_matches_basis(self) -> Self:
        _check_evidence_basis(self.basis, self.evidence, "Task checks")
        return self


class TaskOutcome(Value):
    schema_version: Literal["powercontext.task-outcome.v1"] = Field(
        default="powercontext.task-outcome.v1", alias="schema"
    )
    trust: Literal["untrusted_observation"] = "untrusted_observation"
    objective: WorkText
    status: TaskOutcomeStatus
    summary: WorkText
    handoff_receipt_ref: SourceRef | None = None
    observations: Annotated[tuple[WorkClaim, ...], Field(min_length=1, max_length=MAX_WORK_ITEMS)]
    checks: Annotated[tuple[TaskCheck, ...], Field(max_length=MAX_WORK_ITEMS)] = ()
    produced_artifacts: Annotated[tuple[ArtifactRef, ...], Field(max_length=MAX_WORK_EVIDENCE)] = ()
    remaining_work: Annotated[tuple[WorkText, ...], Field(max_length=MAX_WORK_ITEMS)] = ()


class ReceiverChecks(Value):
    live_state: Literal["confirmed", "mismatch", "not_checked"]
    capability: Literal["confirmed", "insufficient", "not_checked"]
    authorization: Literal["confirmed", "insufficient", "not_checked"]

    def all_confirmed(self) -> bool:
        return self.live_state == self.capability == self.authorization == "confirmed"


class HandoffReceipt(Value):
    schema_version: Literal["powercontext.handoff-receipt.v1"] = Field(
        default="powercontext.handoff-receipt.v1", alias="schema"
    )
    trust: Literal["untrusted_observation"] = "untrusted_observation"
    receiver: str
    status: Literal["accepted", "needs_clarification", "declined"]
    selection: Literal["prepared", "exact", "latest"]
    selected_revision: ArtifactRef | None = None
    prepared_digest: str | None = None
    receiver_checks: ReceiverChecks | None = None
    evidence_status: Literal["available", "unavailable"]
    unavailable_evidence: Annotated[tuple[HandoffCitation, ...], Field(max_length=MAX_HANDOFF_RECEIPT_EVIDENCE)] = ()
    message: str | None = None

    @model_validator(mode="after")
    def _target_and_evidence(self) -> Self:
        if self.selection == "prepared":
            if self.selected_revision is not None or self.prepared_digest is None:
                raise ValueError("a prepared receipt carries prepared_digest and no selected_revision")
        elif self.selected_revision is None or self.prepared_digest is not None:
            raise ValueError("a committed receipt carries selected_revision and no prepared_digest")
        if (self.evidence_status == "unavailable") != bool(self.unavailable_evidence):
            raise ValueError("unavailable_evidence is non-empty exactly when evidence_status is unavailable")
        if self.status == "accepted" and self.evidence_status == "unavailable":
            raise ValueError("a Handoff with unavailable evidence cannot be accepted")
        if self.status == "accepted" and self.receiver_checks is not None and not self.receiver_checks.all_confirmed():
            raise ValueError("an accepted receipt requires all recorded receiver checks confirmed")
        return self
