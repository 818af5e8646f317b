"""Retirement suggestions: which lessons to look at for retiring, on measured yield (RFC "Future possibilities").

Suggestions only. RFC 0014: only explicit revision evidence revises an entry and
deactivation needs an explicit forget; RFC 0051: no automatic retirement. So nothing
here writes a record or changes what the engine does: each suggestion names its rule,
the counts behind it and the revision to ``explain``; a person decides.

The rules look at the current head of each failure-bearing Experience artifact (an
older revision is already replaced) and each reads one revision's yield (decision 128):

* ``never_avoids``: selected at least ``min_selected`` times, recurred at least once,
  never avoided -- the lesson is in context and the failure happens anyway.
* ``never_selected``: recurred at least ``min_unselected_recurred`` times and never
  selected -- a recall (or provenance) problem, not a content one. Missing selected
  evidence does not prove recall failed (RFC): the suggestion says to check both.
* ``unknown_binding``: at least ``min_unknown`` linked selections without a verdict
  that make up ``unknown_percent`` or more of its selections -- the bound check does
  not run where the lesson is selected, so the verification binding is wrong.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from .history import RevisionFacts, revision_label
from .yieldmarks import Yield

#: Defaults of the rules' thresholds (decision 128); each is an option of ``recurrence suggestions``
#: and of ``/scopes/{scope_id}/suggestions``.
RETIRE_MIN_SELECTED: Final = 5
RETIRE_MIN_UNSELECTED_RECURRED: Final = 3
RETIRE_MIN_UNKNOWN: Final = 5
RETIRE_UNKNOWN_PERCENT: Final = 80
#: The largest value a threshold takes (the share is a percentage, at most 100).
MAX_RULE_THRESHOLD: Final = 1_000_000

NEVER_AVOIDS: Final = "never_avoids"
NEVER_SELECTED: Final = "never_selected"
UNKNOWN_BINDING: Final = "unknown_binding"
RULES: Final = (NEVER_AVOIDS, NEVER_SELECTED, UNKNOWN_BINDING)


@dataclass(frozen=True, slots=True)
class RetirementRules:
    min_selected: int = RETIRE_MIN_SELECTED
    min_unselected_recurred: int = RETIRE_MIN_UNSELECTED_RECURRED
    min_unknown: int = RETIRE_MIN_UNKNOWN
    unknown_percent: int = RETIRE_UNKNOWN_PERCENT

    def __post_init__(self) -> None:
        for name in self.names():
            value = getattr(self, name)
            top = 100 if name == "unknown_percent" else MAX_RULE_THRESHOLD
            if not 1 <= value <= top:
                raise ValueError(f"{name.replace('_', '-')} must be 1..{top}, not {value}")

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(field.name for field in fields(RetirementRules))

    def as_json(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in self.names()}


def _rules_met(folded: Yield, rules: RetirementRules) -> list[tuple[str, str]]:
    met = []
    if folded.selected >= rules.min_selected and folded.avoided == 0 and folded.recurred > 0:
        met.append(
            (
                NEVER_AVOIDS,
                f"selected {folded.selected} times, recurred {folded.recurred} times, "
                "never avoided: the lesson does not prevent the failure; sharpen it, change its repair_surface, "
                "or retire it",
            )
        )
    if folded.selected == 0 and folded.recurred >= rules.min_unselected_recurred:
        met.append(
            (
                NEVER_SELECTED,
                f"recurred {folded.recurred} times and never selected: check recall for this cue and the "
                "Handoff/Receipt provenance (missing selected evidence does not prove recall failed)",
            )
        )
    if folded.unknown >= rules.min_unknown and folded.unknown * 100 >= rules.unknown_percent * folded.selected:
        met.append(
            (
                UNKNOWN_BINDING,
                f"{folded.unknown} of {folded.selected} selections got no verdict: the bound check does not run "
                "where the lesson is selected; check its verification binding",
            )
        )
    return met


def suggestions(scope_id: str, heads: Iterable[RevisionFacts], rules: RetirementRules) -> dict[str, Any]:
    """The suggestions for one scope's failure-bearing heads, in (family, artifact_id) order, rules in ``RULES``
    order; each with the revision's counts and its ``explain`` id."""
    listed = []
    for facts in sorted(heads, key=lambda f: f.ref):
        if facts.signature_key is None:
            continue
        folded = Yield.of(facts.marks)
        for rule, text in _rules_met(folded, rules):
            listed.append(
                {
                    "rule": rule,
                    "artifact_ref": {"family": facts.ref[0], "artifact_id": facts.ref[1], "revision": facts.ref[2]},
                    "signature_key": facts.signature_key,
                    "repair_surface": facts.repair_surface,
                    "explain": revision_label(facts.ref),
                    **folded.counts(),
                    "text": text,
                }
            )
    return {"scope_id": scope_id, "rules": rules.as_json(), "suggestions": listed}


def what_if(heads: Iterable[RevisionFacts], thresholds: Sequence[int], unknown_percent: int) -> list[dict[str, Any]]:
    """``tune``-style counts: per threshold N, how many suggestions each rule would make with its count
    threshold at N (``min_selected``, ``min_unselected_recurred``, ``min_unknown``; each rule reads only its own,
    so one set of rules per N answers all three) and ``unknown_percent`` as given."""
    folded = [Yield.of(f.marks) for f in heads if f.signature_key is not None]
    rows = []
    for threshold in thresholds:
        rules = RetirementRules(threshold, threshold, threshold, unknown_percent)
        counts = dict.fromkeys(RULES, 0)
        for one in folded:
            for rule, _ in _rules_met(one, rules):
                counts[rule] += 1
        rows.append({"threshold": threshold, "suggestions": counts})
    return rows
