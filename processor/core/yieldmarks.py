"""Yield marks: what one Task Outcome did to one Experience revision, the unit the repair loop counts.

The ledger writes one mark per (revision, Task Outcome) it touched, at the Outcome's
``task_outcome_position``, beside the observations it emits: ``s`` when the revision was
selected, ``r`` or ``a`` for its terminal verdict, ``p`` when that verdict wrote a Review
proposal, ``x`` when it reached the review threshold and no proposal could be written
(another repair surface, or a newer head). Every figure of ``history``, ``trends`` and
``retirement`` is a fold of marks, so each equals what the ledger's own records say:
a mark is the observations of one ``(artifact_ref, task_outcome_ref)``, and a ``p`` is the
``review_proposal`` that follows them. A revision has one failure block, so one
signature key: the mark's key needs no signature key.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

SELECTED: Final = b"s"
RECURRED: Final = b"r"
AVOIDED: Final = b"a"
PROPOSED: Final = b"p"
CROSSED: Final = b"x"


@dataclass(frozen=True, slots=True)
class Mark:
    position: int
    selected: bool = False
    recurred: bool = False
    avoided: bool = False
    proposed: bool = False
    crossed: bool = False

    @classmethod
    def decode(cls, position: int, flags: bytes) -> "Mark":
        return cls(
            position,
            SELECTED in flags,
            RECURRED in flags,
            AVOIDED in flags,
            PROPOSED in flags,
            CROSSED in flags,
        )

    @property
    def unknown(self) -> bool:
        """A linked selection that got no terminal verdict (RFC: the derived ``unknown``)."""
        return self.selected and not (self.recurred or self.avoided)


@dataclass(slots=True)
class Yield:
    """A fold of marks: the RFC's counters, the linked recurrences, the proposals and crossings."""

    selected: int = 0
    recurred: int = 0
    # recurred on a Task Outcome that selected the revision: the numerator of recurrences per selection
    recurred_selected: int = 0
    avoided: int = 0
    unknown: int = 0
    review_proposals: int = 0
    crossings_without_proposal: int = 0

    def add(self, mark: Mark) -> None:
        self.selected += mark.selected
        self.recurred += mark.recurred
        self.recurred_selected += mark.recurred and mark.selected
        self.avoided += mark.avoided
        self.unknown += mark.unknown
        self.review_proposals += mark.proposed
        self.crossings_without_proposal += mark.crossed

    @classmethod
    def of(cls, marks: Iterable[Mark]) -> "Yield":
        folded = cls()
        for mark in marks:
            folded.add(mark)
        return folded

    def counts(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "recurred": self.recurred,
            "recurred_selected": self.recurred_selected,
            "avoided": self.avoided,
            "unknown": self.unknown,
            "review_proposals": self.review_proposals,
        }


def terminal_streak(marks: Iterable[Mark]) -> int:
    """Recurred verdicts since the last avoided one, in position order (RFC "Degradation")."""
    streak = 0
    for mark in sorted(marks, key=lambda m: m.position):
        if mark.avoided:
            streak = 0
        elif mark.recurred:
            streak += 1
    return streak
