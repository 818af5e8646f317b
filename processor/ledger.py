"""RFC "Ledger write path" and "Degradation": one Task Outcome in, match and observation records out.

Order of the records for one Outcome: every RecurrenceMatch first (failure
item order), then per candidate (sorted by ArtifactRef) its ``selected``, its
terminal verdict and, when that verdict crosses the threshold, the Review
proposal. A match therefore always precedes the observation citing it.
"""

import functools
from dataclasses import dataclass

import orjson

from recurrence.processor.matching import (
    Candidate,
    CitationResolver,
    Item,
    avoided_evidence,
    failure_items,
    match_record,
    verified_checks,
    verified_observations,
)
from recurrence.processor.state import Group, ScopeMeta, State, StoredArtifact, ref_from_json
from recurrence.schemas.base import ArtifactRef, SourceRef
from recurrence.schemas.constants import EXPERIENCE_FAMILY, MAX_CANDIDATE_EVIDENCE
from recurrence.schemas.powercontext import HandoffArtifactCitation, HandoffCitation, HandoffSourceCitation, TaskOutcome
from recurrence.schemas.records import CandidateSetMode, ObservationRecord, OutputRecord, ReviewProposalRecord


@dataclass(frozen=True)
class Link:
    """A complete Receipt -> Handoff chain for one Task Outcome."""

    receipt_ref: SourceRef
    handoff_ref: ArtifactRef
    cited: tuple[ArtifactRef, ...]


def citation_resolver(state: State, scope_id: str) -> CitationResolver:
    def resolves(citation: HandoffCitation) -> bool:
        if isinstance(citation, HandoffSourceCitation):
            return state.source(scope_id, citation.source_ref) is not None
        if isinstance(citation, HandoffArtifactCitation):
            return state.artifact(scope_id, citation.artifact_ref) is not None
        return True  # Memory is not in the journal: taken as given (contract).

    return resolves


def resolve_link(state: State, scope_id: str, receipt_ref: SourceRef | None) -> Link | None:
    """Receipt (accepted, exact, already in scope) -> known Handoff revision, or unlinked."""
    if receipt_ref is None:
        return None
    receipt = state.source(scope_id, receipt_ref)
    if receipt is None or receipt.linkable_handoff is None:
        return None
    handoff_ref = ref_from_json(receipt.linkable_handoff)
    handoff = state.artifact(scope_id, handoff_ref)
    if handoff is None or handoff.cites is None:
        return None
    return Link(receipt_ref, handoff_ref, tuple(ref_from_json(c) for c in handoff.cites))


def _candidate(ref: ArtifactRef, stored: StoredArtifact | None) -> Candidate | None:
    if stored is None or stored.signature_key is None:
        return None
    assert stored.repair_surface and stored.condition_key and stored.check_key
    return Candidate(ref, stored.signature_key, stored.repair_surface, stored.condition_key, stored.check_key)


@dataclass(frozen=True)
class CandidateSet:
    mode: CandidateSetMode
    candidates: tuple[Candidate, ...]
    refs: tuple[ArtifactRef, ...]


@functools.lru_cache(maxsize=64)
def scope_heads(index: bytes) -> tuple[Candidate, ...]:
    """Parse a failure-heads index row; memoized on its exact bytes, so it is pure."""
    return tuple(
        Candidate(
            ArtifactRef.model_construct(family=EXPERIENCE_FAMILY, artifact_id=artifact_id, revision=revision),
            signature_key,
            surface,
            condition_key,
            check_key,
        )
        for artifact_id, revision, signature_key, surface, condition_key, check_key in orjson.loads(index)
    )


def candidate_set(state: State, scope_id: str, link: Link | None) -> CandidateSet:
    """Freeze the candidate set: cited failure-bearing revisions, or failure-bearing scope heads."""
    if link is not None:
        refs = {ref.identity(): ref for ref in link.cited}.values()
        found = (_candidate(ref, state.artifact(scope_id, ref)) for ref in refs)
        cited = tuple(sorted((c for c in found if c is not None), key=lambda c: c.ref.identity()))
        return CandidateSet("handoff_citations", cited, tuple(c.ref for c in cited))
    heads = scope_heads(state.failure_heads(scope_id))
    return CandidateSet("scope_heads", heads, tuple(c.ref for c in heads))


class OutcomeLedger:
    def __init__(self, state: State, review_threshold: int) -> None:
        self.state = state
        self.review_threshold = review_threshold

    def process(
        self, scope_id: str, meta: ScopeMeta, outcome_ref: SourceRef, position: int, outcome: TaskOutcome
    ) -> tuple[list[OutputRecord], bool]:
        """Records for one Outcome, and whether it carries failure evidence (admission rule 1)."""
        resolves = citation_resolver(self.state, scope_id)
        link = resolve_link(self.state, scope_id, outcome.handoff_receipt_ref)
        checks = verified_checks(outcome, outcome_ref, resolves)
        observations = verified_observations(outcome, outcome_ref, resolves)
        failures = failure_items(checks, observations, outcome.status)
        if link is None and not failures:
            return [], False  # unlinked and nothing failed: no record can follow
        frozen = candidate_set(self.state, scope_id, link)
        mode, candidates, candidate_refs = frozen.mode, frozen.candidates, frozen.refs

        records: list[OutputRecord] = []
        matched: dict[tuple[str, str, int], list[tuple[Item, str]]] = {}
        for item in failures:
            match, target = match_record(
                scope_id=scope_id,
                outcome_ref=outcome_ref,
                position=position,
                item=item,
                mode=mode,
                candidates=candidates,
                candidate_refs=candidate_refs,
            )
            records.append(match)
            if target is not None:
                matched.setdefault(target.ref.identity(), []).append((item, match.match_digest))
        failure_keys = {item.key for item in failures}

        common = {"scope_id": scope_id, "task_outcome_ref": outcome_ref, "task_outcome_position": position}
        linked = {} if link is None else {"handoff_receipt_ref": link.receipt_ref, "handoff_ref": link.handoff_ref}
        for candidate in candidates:
            base = {**common, "artifact_ref": candidate.ref, "signature_key": candidate.signature_key}
            verdict: ObservationRecord | None = None
            hits = matched.get(candidate.ref.identity(), [])
            if len(hits) == 1:
                # Two or more evidence items for one group leave the verdict unknown.
                item, match_digest = hits[0]
                verdict = ObservationRecord.build(
                    **base, event="recurred", failure_ref=item.ref, recurrence_match_digest=match_digest
                )
            elif link is not None and candidate.signature_key not in failure_keys:
                # Gate 1 (linked) holds; gate 4: no failure item eligible for this group.
                evidence = avoided_evidence(candidate, checks, observations)
                if evidence is not None:
                    condition, check = evidence
                    verdict = ObservationRecord.build(
                        **base, **linked, event="avoided", condition_ref=condition.ref, check_ref=check.ref
                    )
            if link is None and verdict is None:
                continue  # nothing happened to this candidate: leave its group row alone
            group = self.state.group(scope_id, candidate.ref, candidate.signature_key)
            if link is not None:
                records.append(ObservationRecord.build(**base, **linked, event="selected"))
                group.selected += 1
                meta.selected += 1
                if verdict is None:
                    meta.unknown += 1
            if verdict is not None:
                records.append(verdict)
                records.extend(self._apply_verdict(scope_id, meta, candidate, group, verdict))
            self.state.put_group(scope_id, candidate.ref, candidate.signature_key, group)
        return records, bool(failures)

    def _apply_verdict(
        self, scope_id: str, meta: ScopeMeta, candidate: Candidate, group: Group, verdict: ObservationRecord
    ) -> list[OutputRecord]:
        # Outcomes arrive in strictly increasing task_outcome_position per scope,
        # so folding verdicts in arrival order is folding them in RFC order.
        if verdict.event == "avoided":
            meta.avoided += 1
            group.avoided += 1
            group.streak = 0
            group.streak_sources = []
            return []
        meta.recurred += 1
        group.recurred += 1
        group.streak += 1
        ref = verdict.task_outcome_ref
        group.streak_sources = [*group.streak_sources, [ref.source_type, ref.source_id]][-MAX_CANDIDATE_EVIDENCE:]
        if group.streak != self.review_threshold:
            return []
        return self._review_proposal(scope_id, candidate, group)

    def _review_proposal(self, scope_id: str, candidate: Candidate, group: Group) -> list[OutputRecord]:
        """RFC: only experience_content records propose a content revision, and only on the head."""
        if candidate.repair_surface != "experience_content":
            return []
        ref = candidate.ref
        if self.state.head(scope_id, ref.family, ref.artifact_id) != ref.revision:
            return []
        stored = self.state.artifact(scope_id, ref)
        assert stored is not None and stored.content is not None
        return [
            ReviewProposalRecord(
                scope_id=scope_id,
                target=ref,
                proposal=stored.content,  # type: ignore[arg-type]
                sources=tuple(SourceRef(source_type=t, source_id=i) for t, i in group.streak_sources),
                reason=(
                    f"recurred {group.streak} consecutive times with no avoided in between "
                    f"(threshold {self.review_threshold}); recurrences so far: {group.recurred}; "
                    "repair_surface experience_content: sharpen this record or change its repair_surface"
                ),
                streak=group.streak,
            )
        ]


def handoff_cites(citations: tuple[ArtifactRef, ...]) -> list[list[object]]:
    """Distinct cited Experience revisions in first-seen order, for storage."""
    seen: dict[tuple[str, str, int], list[object]] = {}
    for ref in citations:
        seen.setdefault(ref.identity(), [ref.family, ref.artifact_id, ref.revision])
    return list(seen.values())
