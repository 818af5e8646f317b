"""RFC "Ledger write path" and "Degradation": one Task Outcome in, match and observation records out.

Order of the records for one Outcome: every RecurrenceMatch first (failure
item order), then per candidate (sorted by ArtifactRef) its ``selected``, its
terminal verdict and, when that verdict crosses the threshold, the Review
proposal. A match therefore always precedes the observation citing it.
"""

from typing import Any, NamedTuple

from ...schemas.constants import FAILURE_CHECK_STATUSES, FAILURE_OUTCOME_STATUSES, MAX_CANDIDATE_EVIDENCE
from ...schemas.powercontext import HandoffArtifactCitation, HandoffCitation, HandoffSourceCitation, TaskOutcome
from . import records, yieldmarks
from .matching import (
    Candidate,
    CandidateSet,
    CitationResolver,
    Item,
    avoided_evidence,
    decide,
    failure_items,
    handoff_citations,
    scope_heads,
    verified_checks,
    verified_observations,
)
from .records import Emitted
from .state import (
    SHADOW_STREAKS,
    ArtifactKey,
    Group,
    ScopeMeta,
    Shadow,
    SourceKey,
    State,
    StoredArtifact,
    artifact_json,
    source_json,
)


class Link(NamedTuple):
    """A complete Receipt -> Handoff chain for one Task Outcome."""

    receipt_ref: SourceKey
    handoff_ref: ArtifactKey
    cited: tuple[ArtifactKey, ...]


def citation_resolver(state: State, scope_id: str) -> CitationResolver:
    def resolves(citation: HandoffCitation) -> bool:
        if isinstance(citation, HandoffSourceCitation):
            ref = citation.source_ref
            return state.source(scope_id, (ref.source_type, ref.source_id)) is not None
        if isinstance(citation, HandoffArtifactCitation):
            art = citation.artifact_ref
            return state.artifact(scope_id, (art.family, art.artifact_id, art.revision)) is not None
        return True  # Memory is not in the journal: taken as given (contract).

    return resolves


def resolve_link(state: State, scope_id: str, receipt_ref: SourceKey | None) -> Link | None:
    """Receipt (accepted, exact, already in scope) -> known Handoff revision, or unlinked."""
    if receipt_ref is None:
        return None
    receipt = state.source(scope_id, receipt_ref)
    if receipt is None or receipt.linkable_handoff is None:
        return None
    handoff_ref = receipt.linkable_handoff
    handoff = state.artifact(scope_id, handoff_ref)
    if handoff is None or handoff.cites is None:
        return None
    return Link(receipt_ref, handoff_ref, handoff.cites)


def candidate(ref: ArtifactKey, stored: StoredArtifact | None) -> Candidate | None:
    if stored is None or stored.signature_key is None:
        return None
    assert stored.repair_surface and stored.condition_key and stored.check_key
    return Candidate(
        ref, artifact_json(ref), stored.signature_key, stored.repair_surface, stored.condition_key, stored.check_key
    )


def candidate_set(state: State, scope_id: str, link: Link | None) -> CandidateSet:
    """Freeze the candidate set: cited failure-bearing revisions, or failure-bearing scope heads."""
    if link is None:
        return scope_heads(state.failure_heads(scope_id))
    bindings = []
    for ref in link.cited:
        stored = state.artifact(scope_id, ref)
        if stored is not None and stored.signature_key is not None:
            assert stored.repair_surface and stored.condition_key and stored.check_key
            bindings.append((ref, stored.signature_key, stored.repair_surface, stored.condition_key, stored.check_key))
    return handoff_citations(tuple(bindings))


class OutcomeLedger:
    def __init__(self, state: State, review_threshold: int) -> None:
        self.state = state
        self.review_threshold = review_threshold

    def process(
        self, scope_id: str, meta: ScopeMeta, outcome_ref: SourceKey, position: int, outcome: TaskOutcome
    ) -> tuple[list[Emitted], bool]:
        """Records for one Outcome, and whether it carries failure evidence (admission rule 1)."""
        state = self.state
        resolves = citation_resolver(state, scope_id)
        receipt = outcome.handoff_receipt_ref
        link = resolve_link(state, scope_id, None if receipt is None else (receipt.source_type, receipt.source_id))
        ref_json = source_json(outcome_ref)
        at = records.OutcomeAt(scope_id, ref_json, position)
        if link is None:
            # Unlinked, only failure items can lead to a record (avoided needs a link): verify just
            # those, not every check and observation of the Outcome.
            checks = verified_checks(outcome, ref_json, resolves, FAILURE_CHECK_STATUSES)
            failed = outcome.status in FAILURE_OUTCOME_STATUSES
            observations = verified_observations(outcome, ref_json, resolves) if failed else []
        else:
            checks = verified_checks(outcome, ref_json, resolves)
            observations = verified_observations(outcome, ref_json, resolves)
        failures = failure_items(checks, observations, outcome.status)
        if link is None and not failures:
            return [], False  # unlinked and nothing failed: no record can follow
        frozen = candidate_set(state, scope_id, link)

        out: list[Emitted] = []
        matched: dict[ArtifactKey, list[tuple[Item, str]]] = {}
        targets: dict[ArtifactKey, Candidate] = {}
        for item in failures:
            result, target = decide(item, frozen)
            match = records.match(
                at,
                failure_ref=item.ref_json,
                candidates=frozen,
                result=result,
                target=target,
                prefix=frozen.match_prefix(target),
            )
            out.append(match)
            if target is not None:
                matched.setdefault(target.ref, []).append((item, match.record_id))
                targets[target.ref] = target
        failure_keys = {item.key for item in failures}

        receipt_json = None if link is None else source_json(link.receipt_ref)
        handoff_json = None if link is None else artifact_json(link.handoff_ref)

        def observation(
            candidate: Candidate,
            event: str,
            linked: bool,
            evidence: tuple[Item, Item] | None = None,
            hit: tuple[Item, str] | None = None,
        ) -> Emitted:
            # ``evidence``: an avoided's (condition, check); ``hit``: a recurred's (failure, match digest).
            condition, check = (None, None) if evidence is None else evidence
            failure, match_digest = (None, None) if hit is None else hit
            return records.observation(
                {
                    "scope_id": scope_id,
                    "artifact_ref": candidate.ref_json,
                    "signature_key": candidate.signature_key,
                    "event": event,
                    "match_basis": "exact",
                    "task_outcome_ref": ref_json,
                    "task_outcome_position": position,
                    "handoff_receipt_ref": receipt_json if linked else None,
                    "handoff_ref": handoff_json if linked else None,
                    "condition_ref": None if condition is None else condition.ref_json,
                    "check_ref": None if check is None else check.ref_json,
                    "failure_ref": None if failure is None else failure.ref_json,
                    "recurrence_match_digest": match_digest,
                }
            )

        # Unlinked, only a matched candidate can get a record: visit just those (in ArtifactRef order,
        # as the frozen set is), not the whole of a large heads set.
        touched = frozen.candidates if link is not None else [targets[ref] for ref in sorted(targets)]
        shadow: Shadow | None = None
        for cand in touched:
            verdict: Emitted | None = None
            avoided = False
            hits = matched.get(cand.ref, [])
            if len(hits) == 1:
                # Two or more evidence items for one group leave the verdict unknown.
                verdict = observation(cand, "recurred", False, hit=hits[0])
            elif link is not None and cand.signature_key not in failure_keys:
                # Gate 1 (linked) holds; gate 4: no failure item eligible for this group.
                evidence = avoided_evidence(cand, checks, observations)
                if evidence is not None:
                    verdict = observation(cand, "avoided", True, evidence=evidence)
                    avoided = True
            if link is None and verdict is None:
                continue  # nothing happened to this candidate: leave its group row alone
            group = state.group_for_update(scope_id, cand.ref, cand.signature_key)
            mark = yieldmarks.SELECTED if link is not None else b""
            if link is not None:
                out.append(observation(cand, "selected", True))
                group.selected += 1
                meta.selected += 1
                if verdict is None:
                    meta.unknown += 1
                    group.unknown += 1
            if verdict is not None:
                out.append(verdict)
                if shadow is None:
                    # One copy per Outcome, not per verdict.
                    shadow = state.shadow_for_update(scope_id, meta.recurred + meta.avoided)
                proposals = self._apply_verdict(at, meta, cand, group, shadow, avoided)
                out.extend(proposals)
                mark += yieldmarks.AVOIDED if avoided else yieldmarks.RECURRED
                if proposals:
                    mark += yieldmarks.PROPOSED
                elif not avoided and group.streak == self.review_threshold:
                    mark += yieldmarks.CROSSED  # the threshold was reached, and no proposal could be written
            # The history and trends of the repair loop read these, never the journal (``yieldmarks``).
            state.put_mark(scope_id, cand.ref, position, mark)
        return out, bool(failures)

    def _apply_verdict(
        self, at: records.OutcomeAt, meta: ScopeMeta, cand: Candidate, group: Group, shadow: Shadow, avoided: bool
    ) -> list[Emitted]:
        scope_id, outcome_ref, position = at
        # Outcomes arrive in strictly increasing task_outcome_position per scope,
        # so folding verdicts in arrival order is folding them in RFC order.
        group.verdict(position, "avoided" if avoided else "recurred")
        if avoided:
            meta.avoided += 1
            group.avoided += 1
            shadow.avoided(group.streak)
            group.streak = 0
            group.streak_sources = []
            return []
        meta.recurred += 1
        group.recurred += 1
        group.streak += 1
        streak = group.streak
        source = [outcome_ref["source_type"], outcome_ref["source_id"]]
        group.streak_sources = [*group.streak_sources, source][-MAX_CANDIDATE_EVIDENCE:]
        at_threshold = streak == self.review_threshold
        # The shadow counters ask the proposal rule at every streak they tell apart, whatever the
        # threshold: what a replay at that threshold would decide here (whatif).
        blocked = self._blocked(scope_id, cand) if at_threshold or streak <= SHADOW_STREAKS else None
        shadow.recurred(streak, blocked is None)
        if not at_threshold:
            return []
        if blocked is not None:
            group.crossed(position, f"no proposal: {blocked}")
            return []
        group.crossed(position, "proposed")
        return self._review_proposal(scope_id, cand, group)

    def _blocked(self, scope_id: str, cand: Candidate) -> str | None:
        """RFC: only experience_content records propose a content revision, and only on the head; why a
        streak reaching the threshold now would write no proposal (None: it would write one)."""
        if cand.repair_surface != "experience_content":
            return f"repair_surface {cand.repair_surface}"
        family, artifact_id, revision = cand.ref
        if self.state.head(scope_id, family, artifact_id) != revision:
            return "a newer revision is the head"
        return None

    def _review_proposal(self, scope_id: str, cand: Candidate, group: Group) -> list[Emitted]:
        stored = self.state.artifact(scope_id, cand.ref)
        assert stored is not None and stored.content is not None
        proposal: dict[str, Any] = stored.content
        return [
            records.review_proposal(
                scope_id,
                cand.ref_json,
                proposal,
                [{"source_type": t, "source_id": i} for t, i in group.streak_sources],
                (
                    f"recurred {group.streak} consecutive times with no avoided in between "
                    f"(threshold {self.review_threshold}); recurrences so far: {group.recurred}; "
                    "repair_surface experience_content: sharpen this record or change its repair_surface"
                ),
                group.streak,
            )
        ]


def handoff_cites(citations: tuple[Any, ...]) -> tuple[ArtifactKey, ...]:
    """Distinct cited Experience revisions (ArtifactRef models) in first-seen order, as keys."""
    seen: dict[ArtifactKey, None] = {}
    for ref in citations:
        seen.setdefault((ref.family, ref.artifact_id, ref.revision), None)
    return tuple(seen)
