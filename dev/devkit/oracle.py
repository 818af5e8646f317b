"""The embedded runner over a journal: the reference a Kafka deployment is compared with.

``Oracle.run`` replays in this process over a memory store (the tests: its ledger and its
statistics); ``embedded_ledger`` runs ``recurrence replay`` as a user does and times it (the
benchmarks' reference rate). Either ledger goes to ``recurrence.processor.verify.compare``.
"""

import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recurrence.processor.embedded import replay, statistics
from recurrence.processor.store.memory import MemoryStore
from recurrence.processor.verify import Grouped, by_scope

from .localrun import recurrence_command


@dataclass
class Oracle:
    """The embedded runner's ledger for a journal, and its state for statistics."""

    records: list[bytes]
    store: MemoryStore

    @classmethod
    def run(cls, journal: Path, workdir: Path) -> "Oracle":
        store = MemoryStore()
        out = workdir / f"oracle-{uuid.uuid4().hex[:8]}.jsonl"
        replay(str(journal), store, out)
        records = [line.rstrip(b"\n") for line in out.read_bytes().splitlines() if line.strip()]
        return cls(records, store)

    def statistics(self, scope_id: str | None = None, top: int | None = None) -> list[dict[str, Any]]:
        return statistics(self.store, scope_id, top)

    @property
    def grouped(self) -> Grouped:
        return by_scope(self.records)


def embedded_ledger(journal: Path, workdir: Path) -> tuple[list[bytes], float]:
    """``recurrence replay`` of ``journal`` into a fresh state: every ledger record, and the run's seconds
    (process start included)."""
    state, out = workdir / f"oracle-state-{journal.stem}", workdir / f"oracle-{journal.stem}.jsonl"
    started = time.perf_counter()
    subprocess.run(
        [*recurrence_command(), "replay", str(journal), "--state", str(state), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - started
    return [line for line in out.read_bytes().splitlines() if line.strip()], seconds
