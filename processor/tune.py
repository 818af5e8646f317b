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

``tune --state DIR`` reads the same counters from a state a replay already
kept (``state_what_if``): no journal is read, and it takes as long as
``stats``.
"""

import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from ..schemas.constants import RECURRENCE_REVIEW_STREAK_THRESHOLD
from .core.engineconfig import EngineConfig
from .core.state import State
from .core.tally import counted
from .core.whatif import rows, scope_shadows, what_if
from .embedded.header import state_config
from .embedded.mainkeys import JOURNAL_KEY
from .embedded.reading import open_state
from .embedded.runner import DEFAULT_BATCH, ReplayOptions, RunSummary, replay
from .embedded.views import open_view
from .exceptions import REBUILD, StateDirError
from .host.journalfile import JournalPosition
from .host.printable import shown
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
            f"recurrence tune: {counted(run.entries, 'entry', 'entries')} in {run.seconds:.2f}s "
            f"({rate:,.0f} entries/s{processes}), "
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
            options = ReplayOptions(EngineConfig(), batch_size, jobs, progress_stream=progress_stream)
            summary = replay(journal, state, None, options, stop)
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


#: What changing the threshold takes: it is pinned per state (decision 13) and per app id on Kafka.
CHANGING: Final = (
    f"to run at another K, {REBUILD} and --review-threshold K "
    "(a worker: a new --app-id with --review-threshold K; docs/kafka.md, Rebuild from scratch)"
)


def table(body: dict[str, Any], configured: int = RECURRENCE_REVIEW_STREAK_THRESHOLD, from_state: bool = False) -> str:
    """The what-if for people: one row per threshold, the four counts, the share of flags that were premature;
    the threshold in force marked (``configured``: the state's with ``from_state``, else replay's default)."""
    header = ("threshold", "review proposals", "needing review", "flags", "flags then avoided", "premature")
    lines = [header]
    for row in body["thresholds"]:
        flags = row["flags"]
        premature = f"{row['flags_then_avoided'] / flags:.1%}" if flags else "-"
        lines.append(
            (
                str(row["threshold"]),
                f"{row['review_proposals']:,}",
                f"{row['needing_review']:,}",
                f"{flags:,}",
                f"{row['flags_then_avoided']:,}",
                premature,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    mark = f"  {MARK} {'the state' if from_state else 'default'}"
    text = [
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        + (mark if line is not header and line[0] == str(configured) else "")
        for line in lines
    ]
    scopes = len(body["thresholds"][0]["by_scope"]) if body["thresholds"] else 0
    note = (
        f"{scopes} scopes. review proposals: what replay --review-threshold K writes (experience_content "
        "records on their head revision); needing review: what stats then counts; flags: times a group's "
        "streak reached K (any repair surface, head or not); premature: the share of flags an avoided "
        "verdict later ended (the lesson began to work without a review)."
    )
    asked = any(row["threshold"] == configured for row in body["thresholds"])
    where = f"{MARK} marks it" if asked else "not among --thresholds"
    if from_state:
        running = f"The state runs at {configured} ({where}), fixed when it was built: {CHANGING}."
    else:
        running = (
            f"A replay runs at {configured} unless told otherwise ({where}); a state keeps the threshold "
            f"it was built with: {CHANGING}."
        )
    notes = (textwrap.fill(paragraph, 100, break_on_hyphens=False) for paragraph in (note, running))
    return "\n".join([*text, "", *notes]) + "\n"


#: The mark beside the threshold in force.
MARK: Final = "<-"


def state_what_if(path: Path, thresholds: Sequence[int]) -> tuple[dict[str, Any], int, list[str], int]:
    """The contract's section 5 body from a state's shadow counters (``whatif``; nothing read from a journal),
    the state's own threshold, the scopes whose counters are short, and the journal line it is as of."""
    store = open_state(path, must_exist=True)
    try:
        state = State(Transaction(store))
        scopes, incomplete = scope_shadows(state)
        configured = state_config(store).review_threshold
        raw = store.get(JOURNAL_KEY)
        line = JournalPosition.decode(raw).line if raw is not None else 0
        return {"thresholds": rows(scopes, thresholds)}, configured, incomplete, line
    finally:
        store.close()
