"""RFC "Read surface": per-scope RecurrenceStatistics, derived from state on request.

Counters are kept incrementally by the ledger; streak-based figures
(``needing_review``, ``top_revisions``) and the provenance-coverage gap
(``unlinked_handoff_citations``) are derived here from the group and head rows
so they can never drift from the observations that produced them.
"""

from recurrence.processor.state import ArtifactKey, State
from recurrence.schemas.base import ArtifactRef
from recurrence.schemas.constants import EXPERIENCE_FAMILY, HANDOFF_FAMILY
from recurrence.schemas.statistics import RecurrenceStatistics, RecurrenceStreak, ScopeStatistics


def _unlinked_handoff_citations(state: State, scope_id: str) -> int:
    """Failure-bearing Experience groups cited by a current Handoff head with no ``selected``."""
    gaps: set[tuple[ArtifactKey, str]] = set()
    for handoff_ref in state.heads(scope_id, HANDOFF_FAMILY):
        handoff = state.artifact(scope_id, handoff_ref)
        for cited in (handoff.cites if handoff is not None else None) or ():
            if cited[0] != EXPERIENCE_FAMILY:
                continue
            experience = state.artifact(scope_id, cited)
            if experience is None or experience.signature_key is None:
                continue
            group = state.group(scope_id, cited, experience.signature_key)
            if group is None or group.selected == 0:
                gaps.add((cited, experience.signature_key))
    return len(gaps)


def _order(item: tuple[ArtifactKey, str, int]) -> tuple[int, str, str, int, str]:
    ref, signature_key, streak = item
    return (-streak, ref[0], ref[1], ref[2], signature_key)


def scope_statistics(state: State, scope_id: str, review_threshold: int, top: int) -> ScopeStatistics:
    meta = state.scope(scope_id)
    assert meta is not None
    recurring: list[tuple[ArtifactKey, str, int]] = []
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
                RecurrenceStreak(
                    artifact_ref=ArtifactRef(family=ref[0], artifact_id=ref[1], revision=ref[2]),
                    signature_key=key,
                    terminal_recurred_streak=streak,
                )
                for ref, key, streak in recurring[:top]
            ),
        ),
    )
