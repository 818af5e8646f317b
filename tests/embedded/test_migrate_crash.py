"""``recurrence migrate`` killed anywhere: the rerun ends with the same state (issue 35).

The single-store fixture of 78d47b4 is migrated by the real CLI, killed with SIGKILL at a chosen
write, rename, file removal or fsync by the sitecustomize hooks of ``embedded_cli`` (as
``test_embedded_crash`` kills a replay). Right after the kill every reader still sees the state the
release wrote; ``migrate`` run again succeeds, and the migrated state, continued over the whole
journal, ends with the ledger a fresh run writes, byte for byte.
"""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devkit.fixtures import FIXTURES, fresh_run, unpack
from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.embedded.runner import ReplayOptions, replay
from tests.support.embedded_cli import Hook, Target, When, call_counts, cli, hook_env

SINGLE_STORE = FIXTURES / "0.1.0-78d47b4"

# (target, when, n) over one migration of the fixture: 6 store writes (the main store and each partition
# the fixture's scopes fall in), 8 directory fsyncs of the new stores, the two renames (partitions, then
# main: the commit), the fsyncs after them, then the single store's files removed one by one.
POINTS: dict[str, tuple[Target, When, int]] = {
    "before the first write": ("apply", "before", 1),
    "amid the new stores' writes": ("apply", "after", 3),
    "before the partitions move": ("rename", "before", 1),
    "after the partitions moved": ("rename", "after", 1),
    "after the main store moved (the commit)": ("rename", "after", 2),
    "amid removing the old files": ("unlink", "after", 6),
    "before the last fsync": ("fsync", "before", 11),
}


@dataclass(frozen=True)
class Expected:
    journal: Path
    ledger: bytes
    before: Any  # the statistics of the fixture as the release left it
    after: Any  # ... and of a fresh run over the whole journal


def _statistics(state: Path) -> Any:
    store = open_state(state)
    try:
        return statistics(store, None, None)
    finally:
        store.close()


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> Expected:
    base = tmp_path_factory.mktemp("expected")
    journal, ledger, memory = fresh_run(base)
    unpack(SINGLE_STORE, base / "state", base / "fixture-ledger.jsonl")
    return Expected(journal, ledger, _statistics(base / "state"), statistics(memory.view(), None, None))


def test_the_points_are_where_the_migration_calls_them(tmp_path: Path) -> None:
    unpack(SINGLE_STORE, tmp_path / "state", tmp_path / "ledger.jsonl")
    calls = call_counts(
        tmp_path / "hooks", ["migrate", "--state", tmp_path / "state"], ["apply", "fsync", "rename", "unlink"]
    )
    assert calls == {"apply-before": 6, "fsync-before": 11, "rename-before": 2, "unlink-before": 11}


def _kill_and_rerun(expected: Expected, workdir: Path, point: tuple[Target, When, int]) -> Iterator[str]:
    """What went wrong after a SIGKILL at ``point`` and a rerun (nothing: the point holds)."""
    state, ledger = workdir / "state", workdir / "ledger.jsonl"
    unpack(SINGLE_STORE, state, ledger)
    killed = cli("migrate", "--state", state, env=hook_env(workdir / "hooks", [Hook(*point)]))
    if killed.returncode != -9:
        yield f"not killed: exit {killed.returncode} {killed.stderr[-300:]!r}"
        return
    if _statistics(state) != expected.before:
        yield "a reader saw another state right after the kill"
    rerun = cli("migrate", "--state", state)
    if rerun.returncode != 0:
        yield f"rerun exit {rerun.returncode}: {rerun.stderr[-300:]!r}"
        return
    if sorted(p.name for p in state.iterdir()) != ["main", "partitions"]:
        yield f"left behind: {sorted(p.name for p in state.iterdir())}"
    replay(str(expected.journal), state, ledger, ReplayOptions(jobs=1))
    if ledger.read_bytes() != expected.ledger:
        yield f"ledger differs: {ledger.stat().st_size} bytes, want {len(expected.ledger)}"
    if _statistics(state) != expected.after:
        yield "statistics differ"


def test_kill_9_anywhere_in_a_migration_is_repaired_by_the_rerun(expected: Expected, tmp_path: Path) -> None:
    def run(name: str) -> list[str]:
        return list(_kill_and_rerun(expected, tmp_path / name.replace(" ", "-"), POINTS[name]))

    with ThreadPoolExecutor(2) as pool:
        failures = {name: found for name, found in zip(POINTS, pool.map(run, POINTS), strict=True) if found}
    assert not failures
