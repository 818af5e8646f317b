"""``recurrence tune``: the review-threshold what-if over a journal, a dry run (contract section 5).

It is ``recurrence replay`` itself (``embedded.runner.replay``: the one reader, the
shards, ``--jobs`` processes, the engine) into a scratch state that is
removed when the run ends, however it ends, with a ledger that counts its
records and keeps none (``DiscardedLedger``): no ``--state``, no ``--out``,
nothing kept. The scopes' shadow counters, kept by the engine itself, then
answer every threshold at once (``whatif``); the engine's own threshold
changes none of them, so it runs with the default.

The scratch state is a state directory in ``TMPDIR``: held in memory instead,
a 200k-entry journal took ~1 GB of RSS (every row of the journal's history as
Python objects), against the flat footprint of ``replay``'s state.
"""

import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .core.engineconfig import EngineConfig
from .core.state import State
from .core.whatif import what_if
from .embedded.runner import DEFAULT_BATCH, RunSummary, replay
from .embedded.statedir import open_view
from .exceptions import StateDirError
from .host.journalfile import shown
from .host.stopsignals import StopSignals
from .store.base import Transaction


@dataclass(frozen=True)
class TuneSummary:
    run: RunSummary

    def line(self) -> str:
        run = self.run
        rate = run.entries / run.seconds if run.seconds > 0 else 0.0
        processes = f" in {run.processes} processes" if run.processes > 1 else ""
        return (
            f"recurrence tune: {run.entries} entries in {run.seconds:.2f}s ({rate:,.0f} entries/s{processes}), "
            f"nothing kept; at the default threshold the replay would write {run.describe()}"
        )


def tune(
    journal: str,
    thresholds: Sequence[int],
    batch_size: int = DEFAULT_BATCH,
    progress_stream: IO[str] | None = None,
    stop: StopSignals | None = None,
    jobs: int | None = None,
) -> tuple[dict[str, Any], TuneSummary]:
    """The contract's section 5 body for ``journal`` at ``thresholds``, and what the run did. ``jobs``:
    processes, as ``replay --jobs`` (default: the cores, or one for a small journal)."""
    with tempfile.TemporaryDirectory(prefix="recurrence-tune-") as directory:
        state = Path(directory) / "state"
        try:
            summary = replay(journal, state, None, EngineConfig(), batch_size, progress_stream, stop, jobs)
            view = open_view(state)
            try:
                body = what_if(State(Transaction(view)), thresholds)
            finally:
                view.close()
        except StateDirError as error:
            raise StateDirError(
                f"{error} (the scratch state in {shown(directory)}, removed again); "
                "point TMPDIR at a disk with room for a state of this journal"
            ) from error
    return body, TuneSummary(summary)


def table(body: dict[str, Any]) -> str:
    """The what-if for people: one row per threshold, the four counts, the share of flags that were premature."""
    header = ("threshold", "review proposals", "needing review", "flags", "flags then avoided", "premature")
    lines = [header]
    for row in body["thresholds"]:
        flags = row["flags"]
        premature = f"{row['flags_then_avoided'] / flags:.1%}" if flags else "-"
        lines.append((
            str(row["threshold"]), f"{row['review_proposals']:,}", f"{row['needing_review']:,}", f"{flags:,}",
            f"{row['flags_then_avoided']:,}", premature,
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in lines]
    scopes = len(body["thresholds"][0]["by_scope"]) if body["thresholds"] else 0
    note = (
        f"{scopes} scopes. review proposals: what replay --review-threshold K writes (experience_content "
        "records on their head revision); needing review: what stats then counts; flags: times a group's "
        "streak reached K (any repair surface, head or not); premature: the share of flags an avoided "
        "verdict later ended (the lesson began to work without a review)."
    )
    return "\n".join([*text, "", textwrap.fill(note, 100)]) + "\n"
