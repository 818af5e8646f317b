"""``replay --jobs N``: the same ledger bytes whatever N, across crashes and changes of N (issue 27).

The real CLI runs in subprocesses (workers are forked from a fresh process,
as in production). Journals are generated with every entry kind, garbage
lines, re-deliveries (identical and changed) and blank lines; each must give
the ledger, statistics and pattern listing of ``--jobs 1``, byte for byte.
Crashes are injected with the sitecustomize hooks of ``embedded_cli``: a
SIGKILL of the coordinator or of one worker at a chosen call, then a rerun.
"""

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recurrence_ledger.processor.core.partitioning import Router, assign, murmur2, partition_for
from recurrence_ledger.processor.embedded.reading import open_state
from recurrence_ledger.processor.embedded.runner import ReplayOptions
from recurrence_ledger.processor.embedded.runner import replay as replay_in_process
from recurrence_ledger.processor.embedded.statedir import MemoryState, StateView
from recurrence_ledger.processor.store.rocksdb import RocksStore
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.schemas.journal import JOURNAL_ENTRY
from tests.support.embedded_cli import Hook, cli, file_size_limit, hook_env, one_line, replay, stats


def _journal(path: Path, entries: int, scopes: int, seed: int) -> Path:
    lines = list(
        generate(JournalSpec(entries=entries, scopes=scopes, seed=seed, garbage_ratio=0.04, conflict_ratio=0.05))
    )
    # Blank lines count as lines (dead letters name line numbers): a few, anywhere.
    for at in range(7, len(lines), 97):
        lines.insert(at, b"")
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _patterns(state: Path) -> bytes:
    done = cli("patterns", "--state", state, "--all", "--json")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _outputs(state: Path, out: Path) -> tuple[bytes, Any, bytes]:
    return out.read_bytes(), stats(state), _patterns(state)


def _rerun(journal: Path, state: Path, out: Path) -> tuple[bytes, Any, bytes]:
    """The run again after a stop (``--jobs 2``, batches of 40): it completes; its outputs."""
    rerun = replay(journal, state, out, "--jobs", "2", "--batch", "40")
    assert rerun.returncode == 0, rerun.stderr
    return _outputs(state, out)


def _run(journal: Path, workdir: Path, *extra: str) -> tuple[bytes, Any, bytes]:
    state, out = workdir / "state", workdir / "ledger.jsonl"
    done = replay(journal, state, out, *extra)
    assert done.returncode == 0, done.stderr
    return _outputs(state, out)


@pytest.mark.parametrize(
    ("seed", "scopes", "partitions"),
    [(1, 1, "16"), (2, 3, "16"), (3, 7, "4"), (4, 20, "16"), (5, 2, "2")],
    ids=["one-scope", "three-scopes", "seven-scopes-4-partitions", "twenty-scopes", "two-partitions"],
)
def test_every_job_count_writes_the_ledger_of_one_process(
    tmp_path: Path, seed: int, scopes: int, partitions: str
) -> None:
    journal = _journal(tmp_path / "journal.jsonl", entries=500, scopes=scopes, seed=seed)
    one = _run(journal, tmp_path / "one", "--jobs", "1", "--batch", "40", "--partitions", partitions)
    assert one[0].count(b'"record":"dead_letter"') > 0 and one[0].count(b'"record":"admission"') > 0
    for jobs in ("2", "3"):  # more jobs than scopes, than partitions, for some cases
        assert (
            _run(journal, tmp_path / f"jobs{jobs}", "--jobs", jobs, "--batch", "40", "--partitions", partitions) == one
        ), f"--jobs {jobs}"


def test_the_in_process_api_writes_the_same_ledger_in_memory(tmp_path: Path) -> None:
    journal = _journal(tmp_path / "journal.jsonl", entries=400, scopes=5, seed=9)
    on_disk = _run(journal, tmp_path / "disk", "--jobs", "2", "--batch", "30")
    memory = MemoryState()
    replay_in_process(str(journal), memory, tmp_path / "memory.jsonl", ReplayOptions(batch_size=30))
    assert (tmp_path / "memory.jsonl").read_bytes() == on_disk[0]


def test_changing_jobs_between_runs_on_the_same_state(tmp_path: Path) -> None:
    journal = _journal(tmp_path / "journal.jsonl", entries=600, scopes=9, seed=11)
    whole = _run(journal, tmp_path / "whole", "--jobs", "1")
    lines = journal.read_bytes().splitlines(keepends=True)
    state, out = tmp_path / "grown" / "state", tmp_path / "grown" / "ledger.jsonl"
    grown = tmp_path / "grown.jsonl"
    for upto, jobs in ((150, "2"), (330, "1"), (470, "3"), (len(lines), "2")):
        grown.write_bytes(b"".join(lines[:upto]))  # the same journal, longer each time: resumed
        done = replay(grown, state, out, "--jobs", jobs, "--batch", "25")
        assert done.returncode == 0, done.stderr
    assert _outputs(state, out) == whole


def _survivors(marker: Path) -> list[int]:
    """Processes whose command line names ``marker`` (a worker is a fork of its coordinator)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if os.fsencode(marker) in command:
                found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def crash_journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[bytes, Any, bytes]]:
    base = tmp_path_factory.mktemp("crash")
    journal = _journal(base / "journal.jsonl", entries=420, scopes=6, seed=21)
    return journal, _run(journal, base / "clean", "--jobs", "1", "--batch", "40")


# Batches of 40 over ~430 lines: 11. The coordinator's commit k (main store), a shard's flush k.
COORDINATOR_POINTS = {
    "first commit, before": Hook("commit", "before", 1),
    "first commit, after (partitions behind)": Hook("commit", "after", 1),
    "middle commit, after": Hook("commit", "after", 5),
    "middle ledger fsync, after": Hook("fsync", "after", 6),
    "last commit, after": Hook("commit", "after", 11),
}


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("point", list(COORDINATOR_POINTS))
def test_kill_9_of_the_coordinator_resumes_byte_identical_and_leaves_no_worker(
    crash_journal: tuple[Path, tuple[bytes, Any, bytes]], tmp_path: Path, point: str, jobs: str
) -> None:
    journal, clean = crash_journal
    workdir = tmp_path / "run"
    state, out = workdir / "state", workdir / "ledger.jsonl"
    killed = replay(
        journal,
        state,
        out,
        "--jobs",
        jobs,
        "--batch",
        "40",
        env=hook_env(workdir / "hooks", [COORDINATOR_POINTS[point]]),
    )
    assert killed.returncode == -9, killed.stderr
    deadline = time.monotonic() + 5
    while _survivors(state) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _survivors(state), "a worker outlived its coordinator"
    rerun = replay(journal, state, out, "--jobs", "2", "--batch", "40")
    assert rerun.returncode == 0, rerun.stderr
    if jobs == "2" and "commit, after" in point:
        # The shards were still running (and flushing) batches the main store had committed.
        assert b"again for partitions a crash left behind the ledger" in rerun.stderr
    # Warnings included, every line reads like the command's own (no logging format).
    assert all(line.startswith(b"recurrence replay: ") for line in rerun.stderr.splitlines()), rerun.stderr
    assert _outputs(state, out) == clean


WORKER_POINTS = {
    "first flush, before": Hook("shard", "before", 1),
    "third flush, after": Hook("shard", "after", 3),
    "mid-batch engine": Hook("process", "before", 90),
}


@pytest.mark.parametrize("point", list(WORKER_POINTS))
def test_kill_9_of_a_worker_stops_the_run_with_one_line_and_the_rerun_is_byte_identical(
    crash_journal: tuple[Path, tuple[bytes, Any, bytes]], tmp_path: Path, point: str
) -> None:
    journal, clean = crash_journal
    workdir = tmp_path / "run"
    hook = WORKER_POINTS[point]
    hook = Hook(hook.target, hook.when, hook.n, once=str(tmp_path / "fired"))
    state, out = workdir / "state", workdir / "ledger.jsonl"
    killed = replay(journal, state, out, "--jobs", "2", "--batch", "40", env=hook_env(workdir / "hooks", [hook]))
    assert (tmp_path / "fired").exists()
    assert killed.returncode == 2, killed.stderr
    line = one_line(killed.stderr)
    assert "was killed by signal 9" in line and "run again to resume" in line
    assert _rerun(journal, state, out) == clean


def test_a_state_of_the_single_store_layout_is_refused_by_replay_and_still_read(tmp_path: Path) -> None:
    journal = _journal(tmp_path / "journal.jsonl", entries=300, scopes=4, seed=5)
    new = _run(journal, tmp_path / "new", "--jobs", "1")
    # The earlier layout: every row of the state in one RocksDB directly in the directory.
    memory = MemoryState()
    replay_in_process(str(journal), memory, tmp_path / "memory.jsonl")
    old = tmp_path / "old"
    store = RocksStore.open(old)
    view = memory.view()
    store.apply(dict(view.iterate_prefix(b"")))
    store.close()
    refused = replay(journal, old, tmp_path / "memory.jsonl")
    assert refused.returncode == 2
    message = one_line(refused.stderr)
    assert "state format 1" in message and f"recurrence migrate --state {old}" in message
    assert stats(old) == new[1]
    assert _patterns(old) == new[2]


def test_a_view_sends_each_row_to_its_store_and_merges_scans_in_key_order(tmp_path: Path) -> None:
    journal = _journal(tmp_path / "journal.jsonl", entries=400, scopes=12, seed=3)
    memory = MemoryState()
    replay_in_process(str(journal), memory, tmp_path / "ledger.jsonl")
    view = memory.view()
    assert isinstance(view, StateView) and len(memory.partitions) > 2
    rows = list(view.iterate_prefix(b""))
    assert [k for k, _ in rows] == sorted(k for k, _ in rows)
    every = {k: v for store in (memory.main, *memory.partitions.values()) for k, v in store.iterate_prefix(b"")}
    assert dict(rows) == every
    for row_key, value in list(every.items())[::7]:
        assert view.get(row_key) == value
    scopes = [k for k, _ in view.iterate_prefix(b'["scope",')]
    assert len(scopes) == 12 and scopes == sorted(scopes)
    state = tmp_path / "disk"
    assert replay(journal, state, tmp_path / "disk.jsonl", "--jobs", "2").returncode == 0
    disk = open_state(state)
    try:
        assert list(disk.iterate_prefix(b'["scope",')) == list(view.iterate_prefix(b'["scope",'))
    finally:
        disk.close()


_SOURCE = (
    b'"position":1,"type":"source","source_ref":{"source_type":"content","source_id":"ev-1"},'
    b'"source":{"name":"content","materialization":"captured","metadata":%s,"content":"x"}'
)


@pytest.mark.parametrize(
    "line",
    [
        b'{"scope_id":"a",' + _SOURCE % b"{}" + b"}",
        b"{" + _SOURCE % b"{}" + b',"scope_id":"b"}',
        b'{"scope_id":"a",' + _SOURCE % b'{"scope_id":"c"}' + b"}",
        b'{"scope_id":"a",' + _SOURCE % b"{}" + b',"scope\\u005fid":"d"}',
        b'{"scope_id":"a",' + _SOURCE % b"{}" + b',"\\u0073cope_i\\u0064":"e"}',
        b'{"scope_id":"a",' + _SOURCE % b"{}" + b',"scope\\u005Fid":"f"}',
        b'{"scope_id":"a\\u00e9",' + _SOURCE % b"{}" + b"}",
        b'{"scope_id":"q\\"uote",' + _SOURCE % b"{}" + b"}",
        b'{"scope_id" : "spaced",' + _SOURCE % b"{}" + b"}",
        b'{"scope_id":"big",' + _SOURCE % b'{"n":123456789012345678901234567890}' + b"}",
        b'{"scope_id":"dup",' + _SOURCE % b"{}" + b',"scope_id":"last"}',
    ],
)
def test_the_router_puts_every_accepted_entry_in_its_scopes_partition(line: bytes) -> None:
    """The fast path reads the scope without decoding; wherever it could be fooled it decodes."""
    entry = JOURNAL_ENTRY.validate_json(line)
    assert Router(16).partition(line) == partition_for(entry.scope_id, 16)


def _busiest(owned: list[list[int]], weights: dict[int, int]) -> int:
    return max(sum(weights.get(p, 0) for p in parts) for parts in owned)


def _optimum(weights: dict[int, int], partitions: int, shards: int) -> int:
    """Every placement tried: the lightest busiest shard there is."""
    best: int | None = None
    for placement in range(shards**partitions):
        loads = [0] * shards
        rest = placement
        for partition in range(partitions):
            loads[rest % shards] += weights.get(partition, 0)
            rest //= shards
        best = max(loads) if best is None else min(best, max(loads))
    assert best is not None
    return best


def test_assign_finds_the_split_greedy_misses() -> None:
    # Heaviest first onto the lightest: 3 | 3, then 2, 2, 2 -> 7 | 5; the best split is 3+3 | 2+2+2.
    weights = {0: 3, 1: 3, 2: 2, 3: 2, 4: 2}
    owned = assign(weights, 5, 2)
    assert _busiest(owned, weights) == 6
    assert sorted(p for parts in owned for p in parts) == [0, 1, 2, 3, 4]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda partitions: st.tuples(
            st.just(partitions),
            st.dictionaries(st.integers(0, partitions - 1), st.integers(0, 500)),
            st.integers(1, 4),
        )
    )
)
def test_assign_gives_each_partition_one_shard_and_the_lightest_busiest_shard(
    case: tuple[int, dict[int, int], int],
) -> None:
    partitions, weights, shards = case
    owned = assign(weights, partitions, shards)
    assert len(owned) == shards
    assert sorted(p for parts in owned for p in parts) == list(range(partitions))
    assert _busiest(owned, weights) == _optimum(weights, partitions, shards)


def test_murmur2_is_kafkas() -> None:
    from aiokafka.partitioner import murmur2 as reference

    for data in (b"", b"a", b"ab", b"abc", b"abcd", b"scope-007", "ü-scope".encode(), bytes(range(256))):
        assert murmur2(data) == reference(data)


@pytest.mark.parametrize("limit", [60_000, 150_000])
def test_a_full_disk_under_jobs_exits_2_with_one_line_and_the_rerun_is_byte_identical(
    crash_journal: tuple[Path, tuple[bytes, Any, bytes]], tmp_path: Path, limit: int
) -> None:
    """``RLIMIT_FSIZE`` holds for the workers too: the ledger, the main store or a partition fills first."""
    journal, clean = crash_journal
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    full = replay(journal, state, out, "--jobs", "2", "--batch", "40", preexec_fn=file_size_limit(limit))
    assert full.returncode == 2, full.stderr
    line = one_line(full.stderr)
    assert "run again" in line and "File too large" in line
    assert _rerun(journal, state, out) == clean
