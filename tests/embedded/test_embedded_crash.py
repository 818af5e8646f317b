"""A crash or a full disk at any durability point duplicates nothing and loses nothing (issue 7, item 2).

The real CLI runs in a subprocess; a generated sitecustomize kills it with
SIGKILL at the Nth ``os.fsync``, main-store commit or partition flush (before or after the
call), and ``RLIMIT_FSIZE`` makes writes fail with EFBIG (Python ignores
SIGXFSZ). The rerun, without the fault, must leave exactly the ledger an
uninterrupted run writes, byte for byte, and the same statistics.
"""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.embedded_cli import (
    Hook,
    Target,
    When,
    call_counts,
    file_size_limit,
    hook_env,
    journal,
    one_line,
    records,
    replay,
    stats,
)

BATCH = "100"  # 450 entries: batches of 100, 100, 100, 100 and 50


@dataclass(frozen=True)
class Clean:
    journal: Path
    ledger: bytes
    stats: Any
    calls: dict[str, int]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Clean:
    base = tmp_path_factory.mktemp("clean")
    path = journal(base / "journal.jsonl", entries=450)
    state, out = base / "state", base / "ledger.jsonl"
    args: list[str | Path] = ["replay", path, "--state", state, "--out", out, "--batch", BATCH]
    calls = call_counts(base / "hooks", args, ["fsync", "commit", "shard"])
    # fsync: the new ledger's directory, then the ledger once per batch; commit: the main store once per
    # batch; shard: the partitions flush each committed batch (at the next batch, and at the end).
    assert calls == {"fsync-before": 6, "commit-before": 5, "shard-before": 5}
    return Clean(path, out.read_bytes(), stats(state), calls)


def _no_duplicates(ledger: Path) -> None:
    keys: Counter[Any] = Counter()
    for record in records(ledger):  # every line parses: no broken line
        if record["record"] == "observation":
            keys[record["observation_id"]] += 1
        elif record["record"] == "match":
            keys[(record["scope_id"], str(record["task_outcome_ref"]), str(record["failure_ref"]))] += 1
    assert not [k for k, n in keys.items() if n > 1]


# (target, when, n): fsync call 1 syncs the new ledger's directory; call k+1 ends batch k. The main
# store commits batch k after that fsync (commit k), the partitions flush it after that (shard k; the
# first shard call flushes batch 1 when batch 2 begins, the last one at the end of the run).
POINTS: dict[str, dict[str, tuple[Target, When, int]]] = {
    "first": {
        "after the ledger's creation": ("fsync", "after", 1),
        "after the ledger write": ("fsync", "before", 2),
        "after the fsync": ("fsync", "after", 2),
        "after the state commit": ("commit", "after", 1),
        "after the partitions flushed it": ("shard", "after", 1),
    },
    "middle": {
        "after the ledger write": ("fsync", "before", 4),
        "after the fsync": ("fsync", "after", 4),
        "after the state commit": ("commit", "after", 3),
        "after the partitions flushed it": ("shard", "after", 3),
    },
    "last": {
        "after the ledger write": ("fsync", "before", 6),
        "after the fsync": ("fsync", "after", 6),
        "after the state commit": ("commit", "after", 5),
        "after the partitions flushed it": ("shard", "after", 5),
    },
}


def _kill_and_rerun(clean: Clean, workdir: Path, point: tuple[Target, When, int]) -> str | None:
    """SIGKILL at ``point``, rerun without it; what went wrong, or None."""
    state, out = workdir / "state", workdir / "ledger.jsonl"
    env = hook_env(workdir / "hooks", [Hook(*point)])
    killed = replay(clean.journal, state, out, "--batch", BATCH, env=env)
    if killed.returncode != -9:
        return f"not killed: exit {killed.returncode} {killed.stderr[-300:]!r}"
    rerun = replay(clean.journal, state, out, "--batch", BATCH)
    if rerun.returncode != 0:
        return f"rerun exit {rerun.returncode}: {rerun.stderr[-300:]!r}"
    _no_duplicates(out)
    if out.read_bytes() != clean.ledger:
        return f"ledger differs: {out.stat().st_size} bytes, want {len(clean.ledger)}"
    if stats(state) != clean.stats:
        return "statistics differ"
    return None


def _failures(clean: Clean, tmp_path: Path, points: dict[str, tuple[Target, When, int]]) -> dict[str, str]:
    """Each point killed and run again, two at a time (each is two CLI processes): what failed, by name."""

    def run(name: str) -> str | None:
        return _kill_and_rerun(clean, tmp_path / name.replace(" ", "-"), points[name])

    with ThreadPoolExecutor(2) as pool:
        outcomes = pool.map(run, points)
        return {name: failure for name, failure in zip(points, outcomes, strict=True) if failure}


@pytest.mark.parametrize("batch", list(POINTS))
def test_kill_9_at_every_durability_point_of_a_batch_is_repaired_by_the_rerun(
    clean: Clean, tmp_path: Path, batch: str
) -> None:
    """First, a middle and the last batch; two points at a time (each is two CLI processes)."""
    assert _failures(clean, tmp_path, POINTS[batch]) == {}


# A store write: the first run's stamps of the new main store (1), then each new partition's header, written
# once its store is created and before any row of it (2, 3): a kill there leaves a partition folder with a
# store that holds nothing, which main never committed to.
CREATION_POINTS: dict[str, tuple[Target, When, int]] = {
    "before the first partition's header": ("apply", "before", 2),
    "after the first partition's header": ("apply", "after", 2),
    "before the second partition's header": ("apply", "before", 3),
}


def test_kill_9_while_a_partition_store_is_created_is_repaired_by_the_rerun(clean: Clean, tmp_path: Path) -> None:
    assert _failures(clean, tmp_path, CREATION_POINTS) == {}


def test_a_full_disk_while_a_partition_store_is_created_exits_2_and_the_rerun_completes(
    clean: Clean, tmp_path: Path
) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    env = hook_env(tmp_path / "hooks", [Hook(*CREATION_POINTS["before the first partition's header"], "enospc")])
    full = replay(clean.journal, state, out, "--batch", BATCH, env=env)
    assert full.returncode == 2, full.stderr
    assert "No space left on device" in one_line(full.stderr)
    rerun = replay(clean.journal, state, out, "--batch", BATCH)
    assert rerun.returncode == 0, rerun.stderr
    assert out.read_bytes() == clean.ledger
    assert stats(state) == clean.stats


@pytest.mark.parametrize(("batch", "limit"), [("1000", 60_000), ("100", 120_000)], ids=["first-batch", "middle-batch"])
def test_ledger_disk_full_exits_2_with_one_line_and_the_rerun_completes_the_exact_ledger(
    clean: Clean, tmp_path: Path, batch: str, limit: int
) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    full = replay(clean.journal, state, out, "--batch", batch, preexec_fn=file_size_limit(limit))
    assert full.returncode == 2
    line = one_line(full.stderr)
    assert f"cannot write the ledger {out}: File too large" in line and "run again" in line
    assert out.stat().st_size == limit  # the write stopped mid-line
    rerun = replay(clean.journal, state, out, "--batch", batch)
    assert rerun.returncode == 0, rerun.stderr
    assert b"recovered the ledger" in rerun.stderr
    assert out.read_bytes() == clean.ledger
    assert stats(state) == clean.stats


def test_ledger_fsync_failing_with_enospc_exits_2_and_the_rerun_completes(clean: Clean, tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    env = hook_env(tmp_path / "hooks", [Hook("fsync", "before", 3, "enospc")])
    full = replay(clean.journal, state, out, "--batch", BATCH, env=env)
    assert full.returncode == 2
    line = one_line(full.stderr)
    assert f"cannot write the ledger {out}: No space left on device" in line
    assert replay(clean.journal, state, out, "--batch", BATCH).returncode == 0
    assert out.read_bytes() == clean.ledger


def _evidence_journal(path: Path, entries: int) -> Path:
    """Entries that only grow the state (no ledger lines): the state's disk fills first."""
    lines = [
        orjson.dumps(
            {
                "scope_id": "s",
                "position": i,
                "type": "source",
                "source_ref": {"source_type": "content", "source_id": f"ev-{i}"},
                "source": {
                    "name": "content",
                    "materialization": "captured",
                    "metadata": {"kind": "git-change"},
                    "content": "x" * 200,
                },
            }
        )
        + b"\n"
        for i in range(1, entries + 1)
    ]
    path.write_bytes(b"".join(lines))
    return path


def test_state_disk_full_exits_2_with_one_line_naming_the_state_and_the_rerun_completes(tmp_path: Path) -> None:
    path = _evidence_journal(tmp_path / "journal.jsonl", 3000)
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert replay(empty, state, out).returncode == 0  # RocksDB's own files exist before the limit
    full = replay(path, state, out, preexec_fn=file_size_limit(200_000))
    assert full.returncode == 2
    line = one_line(full.stderr)
    assert "cannot write the state" in line and str(state) in line and "run again" in line
    rerun = replay(path, state, out)
    assert rerun.returncode == 0, rerun.stderr
    whole_state = tmp_path / "whole"
    assert replay(path, whole_state, tmp_path / "whole.jsonl").returncode == 0
    assert stats(state) == stats(whole_state)
