"""An Experience artifact's history: every revision in order with its yield, and the repair effect.

"Did the repair work?" A revision that became the head after a Review proposal on the
revision before it is a repair; its effect compares the failure's recurrences per
selection before (the proposed revision) and after (the repair), each over the
revision's whole life: its ``recurred`` verdicts (linked or not: scope-heads matching
attributes an unlinked recurrence to the head) per linked ``selected`` observation, the
only measure of how often the lesson reached a task (decision 127). Below
``REPAIR_MIN_SELECTIONS`` selections on either side the effect says "too little evidence
yet" and gives no verdict on the rates.

Pure: the revisions come in as ``RevisionFacts`` (``repairview`` reads them from state, the
tests build them from a ledger), the answer goes out as JSON-ready data.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from .yieldmarks import Mark, Yield, terminal_streak

ArtifactKey = tuple[str, str, int]

#: Selections each side of a repair needs before its recurrences per selection are compared (decision 127).
REPAIR_MIN_SELECTIONS: Final = 3

#: The repair effect's verdicts (decision 127).
STOPPED: Final = "stopped"
FEWER: Final = "fewer"
NOT_BETTER: Final = "not_better"
TOO_LITTLE_EVIDENCE: Final = "too_little_evidence"


@dataclass(frozen=True, slots=True)
class RevisionFacts:
    """One revision as the history needs it: where it was accepted, its failure block, its marks."""

    ref: ArtifactKey
    position: int
    signature_key: str | None
    repair_surface: str | None
    marks: tuple[Mark, ...]  # position order


def revision_label(ref: ArtifactKey) -> str:
    """``family/artifact_id@revision``: what ``recurrence explain`` takes."""
    return f"{ref[0]}/{ref[1]}@{ref[2]}"


def head_spans(revisions: Sequence[tuple[int, int]]) -> dict[int, tuple[int, int | None]]:
    """Revision -> (first, last) positions it was the head, from (revision, accepted position) pairs.

    A revision becomes the head when it is accepted above the head (contract: "a higher
    revision becomes that artifact's head"); a revision accepted below it never is one.
    ``last`` is the position before the next head's, None while it is the head.
    """
    became: list[tuple[int, int]] = []
    for revision, position in sorted(revisions, key=lambda r: r[1]):
        if not became or revision > became[-1][0]:
            became.append((revision, position))
    spans: dict[int, tuple[int, int | None]] = {}
    for index, (revision, position) in enumerate(became):
        following = became[index + 1][1] - 1 if index + 1 < len(became) else None
        spans[revision] = (position, following)
    return spans


def _rate(folded: Yield) -> Fraction | None:
    return None if folded.selected == 0 else Fraction(folded.recurred, folded.selected)


def _side(ref: ArtifactKey, folded: Yield) -> dict[str, Any]:
    rate = _rate(folded)
    return {
        "artifact_ref": {"family": ref[0], "artifact_id": ref[1], "revision": ref[2]},
        "selected": folded.selected,
        "recurred_selected": folded.recurred_selected,
        "recurred": folded.recurred,
        "avoided": folded.avoided,
        "recurrences_per_selection": None if rate is None else round(float(rate), 4),
    }


def repair_effect(
    before: RevisionFacts, after: RevisionFacts, proposal_position: int, min_selections: int = REPAIR_MIN_SELECTIONS
) -> dict[str, Any]:
    """The effect of ``after``, the head that followed a Review proposal on ``before``."""
    old, new = Yield.of(before.marks), Yield.of(after.marks)
    if old.selected < min_selections or new.selected < min_selections:
        verdict = TOO_LITTLE_EVIDENCE
        text = (
            f"too little evidence yet: {old.selected} selections before and {new.selected} after, "
            f"{min_selections} needed on each side"
        )
    else:
        old_rate, new_rate = _rate(old), _rate(new)
        assert old_rate is not None and new_rate is not None
        shown = (
            f"{new.recurred} recurrences in {new.selected} selections after, {old.recurred} in {old.selected} before"
        )
        if new.recurred == 0:
            verdict, text = STOPPED, f"the failure stopped recurring ({shown})"
        elif new_rate < old_rate:
            verdict, text = FEWER, f"fewer recurrences per selection ({shown})"
        else:
            verdict, text = NOT_BETTER, f"recurs as often or more per selection ({shown})"
    return {
        "proposal_position": proposal_position,
        "before": _side(before.ref, old),
        "after": _side(after.ref, new),
        "minimum_selections": min_selections,
        "verdict": verdict,
        "text": text,
    }


def artifact_history(
    scope_id: str,
    family: str,
    artifact_id: str,
    revisions: Sequence[RevisionFacts],
    review_threshold: int,
    min_selections: int = REPAIR_MIN_SELECTIONS,
) -> dict[str, Any]:
    """Every revision of one artifact in revision order: yield, streak, head span, proposals, repair effect."""
    spans = head_spans([(r.ref[2], r.position) for r in revisions])
    by_revision = {r.ref[2]: r for r in revisions}
    heads_in_order = sorted(spans, key=lambda rev: spans[rev][0])
    rows = []
    for facts in sorted(revisions, key=lambda r: r.ref[2]):
        folded = Yield.of(facts.marks)
        streak = terminal_streak(facts.marks)
        span = spans.get(facts.ref[2])
        effect = None
        if span is not None:
            order = heads_in_order.index(facts.ref[2])
            if order > 0:
                previous = by_revision[heads_in_order[order - 1]]
                proposals = [m.position for m in previous.marks if m.proposed and m.position < span[0]]
                if proposals:
                    effect = repair_effect(previous, facts, proposals[-1], min_selections)
        rows.append(
            {
                "artifact_ref": {"family": facts.ref[0], "artifact_id": facts.ref[1], "revision": facts.ref[2]},
                "explain": revision_label(facts.ref),
                "position": facts.position,
                "signature_key": facts.signature_key,
                "repair_surface": facts.repair_surface,
                "head_from": None if span is None else span[0],
                "head_until": None if span is None else span[1],
                **folded.counts(),
                "terminal_recurred_streak": streak,
                "needs_review": facts.signature_key is not None and streak >= review_threshold,
                "proposal_positions": [m.position for m in facts.marks if m.proposed],
                "crossings_without_proposal": folded.crossings_without_proposal,
                "repair_effect": effect,
            }
        )
    head = max(spans) if spans else None
    return {
        "scope_id": scope_id,
        "family": family,
        "artifact_id": artifact_id,
        "head_revision": head,
        "review_threshold": review_threshold,
        "revisions": rows,
    }
