"""The embedded runner over a journal: the reference a Kafka deployment is compared with.

``Oracle.run`` replays in this process over a memory store (the tests: its ledger and its
statistics); ``embedded_ledger`` runs ``recurrence replay`` as a user does and times it (the
benchmarks' reference rate). Either ledger goes to ``recurrence_ledger.processor.verify.compare``.
"""

import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recurrence_ledger.processor.embedded.reading import statistics
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.embedded.statedir import MemoryState
from recurrence_ledger.processor.store.base import StateStore
from recurrence_ledger.processor.verify import Grouped, by_scope

from .localrun import replay_command


@dataclass
class Oracle:
    """The embedded runner's ledger for a journal, and its state for statistics."""

    records: list[bytes]
    store: StateStore

    @classmethod
    def run(cls, journal: Path, workdir: Path) -> "Oracle":
        state = MemoryState()
        out = workdir / f"oracle-{uuid.uuid4().hex[:8]}.jsonl"
        replay(str(journal), state, out)
        records = [line.rstrip(b"\n") for line in out.read_bytes().splitlines() if line.strip()]
        return cls(records, state.view())

    def statistics(self, scope_id: str | None = None, top: int | None = None) -> list[dict[str, Any]]:
        return statistics(self.store, scope_id, top)

    @property
    def grouped(self) -> Grouped:
        return by_scope(self.records)


def embedded_ledger(journal: Path, workdir: Path) -> tuple[list[bytes], float]:
    """``recurrence replay --jobs 1`` of ``journal`` into a fresh state: every ledger record, and the run's
    seconds (process start included; one process, the reference a worker is compared with)."""
    state, out = workdir / f"oracle-state-{journal.stem}", workdir / f"oracle-{journal.stem}.jsonl"
    started = time.perf_counter()
    subprocess.run(replay_command(journal, state, out, "--jobs", "1"), check=True, capture_output=True)
    seconds = time.perf_counter() - started
    return [line for line in out.read_bytes().splitlines() if line.strip()], seconds
