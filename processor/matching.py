"""RFC "Matching policy": failure items, frozen candidate sets, exact eligibility.

Everything here is a pure function of a Task Outcome and a candidate snapshot;
the same inputs always give the same decision, which is what lets a replay
resolve a match instead of choosing again.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recurrence.schemas.base import ArtifactRef, SourceRef
from recurrence.schemas.canonical import digest
from recurrence.schemas.constants import FAILURE_CHECK_STATUSES, FAILURE_OUTCOME_STATUSES
from recurrence.schemas.normalize import normalize
from recurrence.schemas.powercontext import HandoffCitation, TaskCheck, TaskOutcome, WorkClaim
from recurrence.schemas.records import CandidateSetMode, ItemKind, MatchRecord, MatchResult, TaskOutcomeItemRef

# Resolves a citation to "accepted in this scope at an earlier position".
CitationResolver = Callable[[HandoffCitation], bool]


@dataclass(frozen=True)
class Candidate:
    """A failure-bearing Experience revision in a frozen candidate set."""

    ref: ArtifactRef
    signature_key: str
    repair_surface: str
    condition_key: str
    check_key: str


@dataclass(frozen=True)
class Item:
    """One Task Outcome item with its locator and comparison key."""

    ref: TaskOutcomeItemRef
    key: str
    status: str  # TaskCheck.status; "" for observations


def item_ref(outcome_ref: SourceRef, kind: ItemKind, index: int, item: WorkClaim | TaskCheck) -> TaskOutcomeItemRef:
    return TaskOutcomeItemRef(
        task_outcome_ref=outcome_ref,
        item_kind=kind,
        item_index=index,
        item_digest=digest(item.model_dump(mode="json", by_alias=True)),
    )


def is_verified(item: WorkClaim | TaskCheck, resolves: CitationResolver) -> bool:
    """Contract: basis verified, non-empty evidence, every source/artifact citation resolving."""
    return item.basis == "verified" and bool(item.evidence) and all(resolves(c) for c in item.evidence)


def verified_checks(outcome: TaskOutcome, outcome_ref: SourceRef, resolves: CitationResolver) -> list[Item]:
    return [
        Item(item_ref(outcome_ref, "check", i, check), normalize(check.name), check.status)
        for i, check in enumerate(outcome.checks)
        if is_verified(check, resolves)
    ]


def verified_observations(outcome: TaskOutcome, outcome_ref: SourceRef, resolves: CitationResolver) -> list[Item]:
    return [
        Item(item_ref(outcome_ref, "observation", i, claim), normalize(claim.text), "")
        for i, claim in enumerate(outcome.observations)
        if is_verified(claim, resolves)
    ]


def failure_items(checks: Sequence[Item], observations: Sequence[Item], outcome_status: str) -> list[Item]:
    """Checks first, then observations, each in index order (contract, fixed decision).

    A check is failure evidence when verified and failed/timed_out/unavailable;
    an observation when verified under a failed or blocked parent Outcome.
    """
    failing_checks = [item for item in checks if item.status in FAILURE_CHECK_STATUSES]
    failing_observations = list(observations) if outcome_status in FAILURE_OUTCOME_STATUSES else []
    return failing_checks + failing_observations


def decide(item: Item, candidates: Sequence[Candidate]) -> tuple[MatchResult, Candidate | None]:
    """Deterministic eligibility: zero is unmatched, one matched, more ambiguous."""
    eligible = [c for c in candidates if c.signature_key == item.key]
    if len(eligible) == 1:
        return "matched", eligible[0]
    return ("ambiguous" if eligible else "unmatched"), None


def match_record(
    *,
    scope_id: str,
    outcome_ref: SourceRef,
    position: int,
    item: Item,
    mode: CandidateSetMode,
    candidates: Sequence[Candidate],
    candidate_refs: tuple[ArtifactRef, ...],
) -> tuple[MatchRecord, Candidate | None]:
    result, target = decide(item, candidates)
    record = MatchRecord.build(
        scope_id=scope_id,
        task_outcome_ref=outcome_ref,
        task_outcome_position=position,
        failure_ref=item.ref,
        candidate_set_mode=mode,
        candidate_refs=candidate_refs,
        result=result,
        artifact_ref=None if target is None else target.ref,
        signature_key=None if target is None else target.signature_key,
    )
    return record, target


def avoided_evidence(
    candidate: Candidate, checks: Sequence[Item], observations: Sequence[Item]
) -> tuple[Item, Item] | None:
    """Gates 2 and 3: exactly one bound verified condition, exactly one bound verified check, passed.

    More than one binding item is ambiguity, never a choice; ``None`` is unknown.
    """
    conditions = [item for item in observations if item.key == candidate.condition_key]
    bound_checks = [item for item in checks if item.key == candidate.check_key]
    if len(conditions) != 1 or len(bound_checks) != 1 or bound_checks[0].status != "passed":
        return None
    return conditions[0], bound_checks[0]
