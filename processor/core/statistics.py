"""RFC "Read surface": per-scope RecurrenceStatistics, derived from state on request.

Counters are kept incrementally by the ledger; streak-based figures
(``needing_review``, ``top_revisions``) and the provenance-coverage gap
(``unlinked_handoff_citations``) are derived here from the group and head rows
so they can never drift from the observations that produced them.

The rule behind each figure lives here once, as a function of one row (or one
cited revision): ``scope_statistics`` applies them to a scan of the scope and
is the read path and the oracle; ``scopesummary`` applies the same functions
to the rows a batch changed, for the worker's statistics topic.
"""

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from ...schemas.constants import EXPERIENCE_FAMILY, HANDOFF_FAMILY
from ...schemas.statistics import ScopeStatistics
from .state import ArtifactKey, Group, ScopeMeta, State, StoredArtifact

#: Where a recurring group sorts in ``top_revisions``: the longest terminal streak first, then by key.
RankKey = tuple[int, str, str, int, str]

_NO_CITES: Final[tuple[ArtifactKey, ...]] = ()


# -- the rules, one row at a time ------------------------------------------------------------------
def needs_review(group: Group, review_threshold: int) -> bool:
    """``needing_review`` counts the groups whose terminal recurrence streak reached the threshold."""
    return group.streak >= review_threshold


def is_recurring(group: Group) -> bool:
    """``top_revisions`` ranks every group that recurred at least once (a streak of 0 included)."""
    return group.recurred > 0


def rank(ref: ArtifactKey, signature_key: str, streak: int) -> RankKey:
    return (-streak, ref[0], ref[1], ref[2], signature_key)


def handoff_citations(handoff: StoredArtifact | None) -> tuple[ArtifactKey, ...]:
    """The Experience revisions a Handoff head cites: the only citations that can be a coverage gap."""
    if handoff is None or not handoff.cites:
        return _NO_CITES
    return tuple(cited for cited in handoff.cites if cited[0] == EXPERIENCE_FAMILY)


def never_selected(group: Group | None) -> bool:
    """The other half of ``citation_gap``: a failure-bearing revision's group with no ``selected``."""
    return group is None or group.selected == 0


def citation_gap(state: State, scope_id: str, cited: ArtifactKey) -> str | None:
    """A cited Experience revision counts as an unlinked citation when it bears a failure and its
    group has no ``selected``: the signature key of that group, else None."""
    experience = state.artifact(scope_id, cited)
    if experience is None or experience.signature_key is None:
        return None
    group = state.group(scope_id, cited, experience.signature_key)
    return experience.signature_key if never_selected(group) else None


def top_revisions(ranked: Iterable[RankKey], top: int) -> list[dict[str, Any]]:
    """``top_revisions`` as JSON-ready data: the first ``top`` recurring groups in rank order."""
    streaks: list[dict[str, Any]] = []
    for negative_streak, family, artifact_id, revision, signature_key in ranked:
        if len(streaks) >= top:
            break
        streaks.append(
            {
                "artifact_ref": {"family": family, "artifact_id": artifact_id, "revision": revision},
                "signature_key": signature_key,
                "terminal_recurred_streak": -negative_streak,
            }
        )
    return streaks


def statistics_document(
    scope_id: str,
    meta: ScopeMeta,
    unlinked: int,
    needing_review: int,
    streaks: list[dict[str, Any]],
) -> dict[str, Any]:
    """A scope's ``ScopeStatistics`` as JSON-ready data, in the model's field order (``streaks`` from
    ``top_revisions``): the worker writes one per changed scope per batch, and building the models
    cost more than the figures (``tests/core/test_scopesummary.py`` holds its bytes equal to the model's
    dump)."""
    return {
        "scope_id": scope_id,
        "recurrence": {
            "selected": meta.selected,
            "recurred": meta.recurred,
            "avoided": meta.avoided,
            "unknown": meta.unknown,
            "unlinked_handoff_citations": unlinked,
            "needing_review": needing_review,
            "top_revisions": streaks,
        },
    }


# -- the read path: a scan of the scope ------------------------------------------------------------
def _unlinked_handoff_citations(state: State, scope_id: str) -> int:
    """Failure-bearing Experience groups cited by a current Handoff head with no ``selected``."""
    gaps: set[tuple[ArtifactKey, str]] = set()
    for handoff_ref in state.heads(scope_id, HANDOFF_FAMILY):
        for cited in handoff_citations(state.artifact(scope_id, handoff_ref)):
            signature_key = citation_gap(state, scope_id, cited)
            if signature_key is not None:
                gaps.add((cited, signature_key))
    return len(gaps)


def scope_statistics(state: State, scope_id: str, review_threshold: int, top: int) -> ScopeStatistics:
    meta = state.scope(scope_id)
    assert meta is not None
    ranked: list[RankKey] = []
    needing_review = 0
    for ref, signature_key, group in state.groups(scope_id):
        if needs_review(group, review_threshold):
            needing_review += 1
        if is_recurring(group):
            ranked.append(rank(ref, signature_key, group.streak))
    ranked.sort()
    return validated(
        statistics_document(
            scope_id, meta, _unlinked_handoff_citations(state, scope_id), needing_review, top_revisions(ranked, top)
        )
    )


def validated(document: Mapping[str, Any]) -> ScopeStatistics:
    """A statistics document read as the wire model, strictly: the worker's statistics records are
    these documents, built without the models, so whatever reads one back checks it."""
    return ScopeStatistics.model_validate_json(orjson.dumps(document))
