"""``recurrence tune``: the review-threshold what-if over a journal, a dry run (contract section 5).

The journal goes through the engine ``recurrence replay`` runs (``Engine.process``
per entry, one ``Transaction`` per batch) into a scratch state that is removed
when the run ends, however it ends: no ledger, no ``--state``, nothing kept.
The scopes' shadow counters, kept by the engine itself, then answer every
threshold at once (``whatif``); the engine's own threshold changes none of
them, so it runs with the default.

The scratch state is RocksDB in a temporary directory (``TMPDIR``), written
without fsync: held in memory instead, a 200k-entry journal took ~1 GB of RSS
(every row of the journal's history as Python objects), against the flat
footprint of ``replay``'s state.
"""

import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .embedded import DEFAULT_BATCH
from .engine import Engine
from .engineconfig import EngineConfig
from .exceptions import StateDirError
from .gcpolicy import full_collections_between_batches
from .journalfile import JournalReader, Progress, shown
from .state import State, row_cache
from .store.base import StateStore, Transaction
from .store.rocksdb import RocksStore
from .tally import Tally
from .whatif import what_if


@dataclass
class TuneSummary(Tally):
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.entries / self.seconds if self.seconds > 0 else 0.0
        return (
            f"recurrence tune: {self.entries} entries in {self.seconds:.2f}s ({rate:,.0f} entries/s), "
            f"nothing written; at the default threshold the replay would write {self.describe()}"
        )


@contextmanager
def scratch_state() -> Iterator[StateStore]:
    """A state for one run, removed when the run ends; a full or failing disk names the place and the fix."""
    with tempfile.TemporaryDirectory(prefix="recurrence-tune-") as directory:
        store = RocksStore.open(Path(directory) / "state")
        try:
            yield store
        except StateDirError as error:
            raise StateDirError(
                f"{error} (the scratch state in {shown(directory)}, removed again); "
                "point TMPDIR at a disk with room for a state of this journal"
            ) from error
        finally:
            with suppress(Exception):  # rocksdict raises plain Exception; the directory goes anyway
                store.close()


def tune(
    journal: str,
    thresholds: Sequence[int],
    batch_size: int = DEFAULT_BATCH,
    progress_stream: IO[str] | None = None,
) -> tuple[dict[str, Any], TuneSummary]:
    """The contract's section 5 body for ``journal`` at ``thresholds``, and what the run did."""
    summary = TuneSummary()
    started = time.monotonic()
    cache = row_cache()
    config = EngineConfig()
    with (
        JournalReader(journal) as reader,
        scratch_state() as store,
        full_collections_between_batches() as collections,
    ):
        progress = Progress(reader.total_bytes, progress_stream)
        try:
            txn = Transaction(store, cache)
            engine = Engine(txn, config)
            pending = 0
            for line_number, entry in reader:
                for record in engine.process(entry, {"line": line_number}):
                    summary.record(record)
                summary.entries += 1
                pending += 1
                if pending >= batch_size:
                    txn.commit()
                    collections.between_batches()
                    txn = Transaction(store, cache)
                    engine = Engine(txn, config)
                    pending = 0
                    progress.update(summary.entries, reader.read_bytes)
            txn.commit()
        finally:
            progress.update(summary.entries, reader.read_bytes, force=True)
            progress.close()
        body = what_if(State(Transaction(store, cache)), thresholds)
    summary.seconds = time.monotonic() - started
    return body, summary


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
