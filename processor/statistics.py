"""RFC "Read surface": per-scope RecurrenceStatistics, derived from state on request.

Counters are kept incrementally by the ledger; streak-based figures
(``needing_review``, ``top_revisions``) and the provenance-coverage gap
(``unlinked_handoff_citations``) are derived here from the group and head rows
so they can never drift from the observations that produced them.
"""

from recurrence.processor.state import State, ref_from_json
from recurrence.schemas.base import ArtifactRef
from recurrence.schemas.constants import EXPERIENCE_FAMILY, HANDOFF_FAMILY
from recurrence.schemas.statistics import RecurrenceStatistics, RecurrenceStreak, ScopeStatistics


def _unlinked_handoff_citations(state: State, scope_id: str) -> int:
    """Failure-bearing Experience groups cited by a current Handoff head with no ``selected``."""
    gaps: set[tuple[tuple[str, str, int], str]] = set()
    for handoff_ref, _row in state.heads(scope_id, HANDOFF_FAMILY):
        handoff = state.artifact(scope_id, handoff_ref)
        for cited_json in (handoff.cites if handoff is not None else None) or []:
            cited = ref_from_json(cited_json)
            if cited.family != EXPERIENCE_FAMILY:
                continue
            experience = state.artifact(scope_id, cited)
            if experience is None or experience.signature_key is None:
                continue
            if state.group(scope_id, cited, experience.signature_key).selected == 0:
                gaps.add((cited.identity(), experience.signature_key))
    return len(gaps)


def _order(item: tuple[ArtifactRef, str, int]) -> tuple[int, str, str, int, str]:
    ref, signature_key, streak = item
    return (-streak, ref.family, ref.artifact_id, ref.revision, signature_key)


def scope_statistics(state: State, scope_id: str, review_threshold: int, top: int) -> ScopeStatistics:
    meta = state.scope(scope_id)
    recurring: list[tuple[ArtifactRef, str, int]] = []
    needing_review = 0
    for ref, signature_key, group in state.groups(scope_id):
        if group.streak >= review_threshold:
            needing_review += 1
        if group.recurred > 0:
            recurring.append((ref, signature_key, group.streak))
    recurring.sort(key=_order)
    return ScopeStatistics(
        scope_id=scope_id,
        recurrence=RecurrenceStatistics(
            selected=meta.selected,
            recurred=meta.recurred,
            avoided=meta.avoided,
            unknown=meta.unknown,
            unlinked_handoff_citations=_unlinked_handoff_citations(state, scope_id),
            needing_review=needing_review,
            top_revisions=tuple(
                RecurrenceStreak(artifact_ref=ref, signature_key=key, terminal_recurred_streak=streak)
                for ref, key, streak in recurring[:top]
            ),
        ),
    )
