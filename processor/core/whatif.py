"""The review-threshold what-if (contract section 5): what a replay at threshold k would have counted.

The streak threshold is the RFC's only brake on the Review Inbox, proposed and
not measured. Every figure a replay at k produces that depends on k follows
from the moments a group's terminal streak changes, and the ledger reports
those to the scope's shadow counters (``state.Shadow``) at every verdict,
whatever threshold the state runs with:

* a group's streak only goes up by one (``recurred``) or back to 0 (``avoided``),
  so a run of recurrences reaches k exactly once when its peak is at least k;
  a run ends only by an ``avoided`` verdict, else it is the group's terminal
  streak now. With ``peaks[v]`` (runs an avoided ended at v) and ``streaks[v]``
  (terminal streaks now at v):

  - ``needing_review(k)``   = sum of streaks[v] for v >= k   (stats: terminal streak >= k)
  - ``flags_then_avoided(k)`` = sum of peaks[v] for v >= k
  - ``flags(k)``            = the two added: every run that reached k

* a replay at k writes a proposal when a streak reaches exactly k and the
  proposal rule's other conditions hold then (``experience_content``, the
  revision still the head; ``ledger.OutcomeLedger._blocked`` decides both for
  the proposal itself and for the counters), so ``review_proposals(k)`` =
  ``eligible[k]``.

Nothing else a replay writes depends on the threshold (matches,
observations, admissions and dead letters are the same bytes at every k), so
one pass of the engine answers every k at once. Values above
``SHADOW_STREAKS`` are counted in its slot: thresholds up to it are exact.
"""

from collections.abc import Iterable, Sequence
from typing import Any, Final

from .state import SHADOW_STREAKS, Shadow, State

#: The largest threshold the counters answer for (their last slot).
MAX_THRESHOLD: Final = SHADOW_STREAKS
#: Thresholds asked at most at once.
MAX_THRESHOLDS: Final = SHADOW_STREAKS
COUNTS: Final = ("review_proposals", "needing_review", "flags", "flags_then_avoided")


#: Why a review threshold past ``MAX_THRESHOLD`` is refused, said with the refusal.
_STREAKS_TOLD_APART: Final = " (the streaks the counters tell apart)"


def parse_thresholds(text: str, *, top: int = MAX_THRESHOLD, why: str = _STREAKS_TOLD_APART) -> list[int]:
    """``2,3,4,5``: integers 1..``top``, at most MAX_THRESHOLDS of them, in the order given (a value given
    twice is two rows); ValueError says what is wrong (each caller names the option or parameter), and ``why``
    after a value past ``top``. Review thresholds by default; ``suggestions --what-if`` passes its own top."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ValueError(f"a comma-separated list of integers such as 2,3,4,5 is expected, not {text!r}")
    if len(items) > MAX_THRESHOLDS:
        raise ValueError(f"at most {MAX_THRESHOLDS} thresholds at once, not {len(items)}")
    thresholds: list[int] = []
    for item in items:
        if not item.isdecimal() or not item.isascii():
            raise ValueError(f"{item!r} is not a whole number; give integers such as 2,3,4,5")
        # Not int() of a huge string first: past 4,300 digits that is an error of its own.
        digits = item.lstrip("0") or "0"
        value = int(digits) if len(digits) <= len(str(top)) else top + 1
        if not 1 <= value <= top:
            shown = item if len(item) <= 12 else item[:12] + "…"
            raise ValueError(f"{shown} is outside 1..{top}{why}")
        thresholds.append(value)
    return thresholds


def chart_thresholds(configured: int) -> list[int]:
    """The thresholds the page draws unless asked for others: 1..10, and two past the configured one."""
    return list(range(1, min(max(10, configured + 2), MAX_THRESHOLD) + 1))


def _at_least(histogram: list[int], k: int) -> int:
    return sum(histogram[k:])


def scope_counts(shadow: Shadow | None, k: int) -> dict[str, int]:
    """The four counts of one scope at threshold ``k`` (no counters: nothing recurred)."""
    if shadow is None:
        return dict.fromkeys(COUNTS, 0)
    needing = _at_least(shadow.streaks, k)
    ended = _at_least(shadow.peaks, k)
    proposals = shadow.eligible[k] if k < len(shadow.eligible) else 0
    return {
        "review_proposals": proposals,
        "needing_review": needing,
        "flags": needing + ended,
        "flags_then_avoided": ended,
    }


def complete(shadow: Shadow | None, recurred: int, avoided: int) -> bool:
    """Did the counters see every verdict of the scope (not a state replayed before they were kept)?"""
    return (0 if shadow is None else shadow.verdicts) == recurred + avoided


def rows(scopes: Sequence[tuple[str, Shadow | None]], thresholds: Iterable[int]) -> list[dict[str, Any]]:
    """The contract's ``thresholds`` list: per threshold the totals, then ``by_scope`` in the given order."""
    result = []
    for k in thresholds:
        counts = [(scope_id, scope_counts(shadow, k)) for scope_id, shadow in scopes]
        by_scope = [{"scope_id": scope_id, **scope} for scope_id, scope in counts]
        totals = {name: sum(scope[name] for _, scope in counts) for name in COUNTS}
        result.append({"threshold": k, **totals, "by_scope": by_scope})
    return result


def merge(parts: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One ``thresholds`` list from several of the same thresholds over disjoint scopes (a worker's
    partitions): ``by_scope`` joined in scope order, totals added."""
    merged = []
    for same in zip(*parts, strict=True):
        by_scope = sorted((row for part in same for row in part["by_scope"]), key=lambda row: str(row["scope_id"]))
        totals = {name: sum(part[name] for part in same) for name in COUNTS}
        merged.append({"threshold": same[0]["threshold"], **totals, "by_scope": by_scope})
    return merged


def scope_shadows(state: State) -> tuple[list[tuple[str, Shadow | None]], list[str]]:
    """Every scope ``stats`` lists (scope_id order) with its counters; and those whose counters missed
    part of their history."""
    scopes: list[tuple[str, Shadow | None]] = []
    incomplete: list[str] = []
    for scope_id in sorted(state.scope_ids()):
        meta = state.scope(scope_id)
        if meta is None or meta.last_position <= 0:
            continue
        shadow = state.shadow(scope_id)
        scopes.append((scope_id, shadow))
        if not complete(shadow, meta.recurred, meta.avoided):
            incomplete.append(scope_id)
    return scopes, incomplete


def what_if(state: State, thresholds: Iterable[int]) -> dict[str, Any]:
    """The contract's section 5 body for the scopes of ``state``."""
    scopes, _ = scope_shadows(state)
    return {"thresholds": rows(scopes, thresholds)}


def served(review_threshold: int, incomplete: list[str], thresholds: list[dict[str, Any]]) -> dict[str, Any]:
    """``GET /tune``'s body (``schemas.readsurface.ThresholdWhatIf``): the what-if of a state being served."""
    return {"review_threshold": review_threshold, "incomplete_scopes": incomplete, "thresholds": thresholds}
