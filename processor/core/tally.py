"""What a run did, counted the same way by both runners (in the spirit of faust's Monitor).

The embedded runner's summary line and the worker's Prometheus counters are
both a ``Tally`` that each runner feeds entry by entry and record by record;
what a runner adds on top (a resume, a ledger repair, lag and batches) stays
in its own subclass.
"""

from collections import Counter
from dataclasses import dataclass, field

from .records import Emitted


@dataclass
class Tally:
    entries: int = 0
    records: Counter[str] = field(default_factory=Counter)  # by record kind
    dead_letters: Counter[str] = field(default_factory=Counter)  # by error code

    def record(self, emitted: Emitted) -> None:
        self.records[emitted.record] += 1
        if emitted.error is not None:
            self.dead_letters[emitted.error] += 1

    def describe(self) -> str:
        """``records: kind=n, ...; dead letters: n (code=n, ...)``: counts and codes, never content."""
        kinds = ", ".join(f"{k}={v:,}" for k, v in sorted(self.records.items())) or "none"
        dead = sum(self.dead_letters.values())
        codes = ", ".join(f"{k}={v:,}" for k, v in sorted(self.dead_letters.items()))
        return f"records: {kinds}; dead letters: {dead:,}{f' ({codes})' if codes else ''}"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 scope``, ``2 scopes``: a count with its noun in the number it needs (thousands separated)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
