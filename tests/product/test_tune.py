"""``recurrence tune`` (contract section 5): the review-threshold what-if agrees with real replays.

For every threshold k, ``review_proposals`` must be the ``review_proposal``
records ``replay --review-threshold k`` writes and ``needing_review`` what
``stats`` then prints, per scope and in total. ``flags`` and
``flags_then_avoided`` are checked against the ledger's own observations
(each group's verdicts folded in ledger order), and ``flags =
needing_review + flags_then_avoided`` must hold.
"""

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devkit.localrun import recurrence_command
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.state import SHADOW_STREAKS, State
from recurrence_ledger.processor.core.whatif import parse_thresholds, scope_shadows, what_if
from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.embedded.runner import ReplayOptions, replay
from recurrence_ledger.processor.embedded.statedir import MemoryState
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.tune import table, tune
from tests.support.builders import Journal, Runner, avoided, linked_setup, recurrence

THRESHOLDS = (1, 2, 3, 4, 5, 6)
COUNTS = ("review_proposals", "needing_review", "flags", "flags_then_avoided")


def write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def replayed(journal: Path, k: int, work: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ledger records and ``stats`` of a real replay at threshold k (a fresh state and ledger)."""
    ledger = work / f"ledger-{k}.jsonl"
    state = MemoryState()
    replay(str(journal), state, ledger, ReplayOptions(EngineConfig(review_threshold=k)))
    records = [orjson.loads(line) for line in ledger.read_bytes().splitlines()]
    return records, statistics(state.view(), None, None)


def flags_from_ledger(records: list[dict[str, Any]], k: int) -> tuple[Counter[str], Counter[str]]:
    """Per scope: times a group's streak reached k, and those an avoided later ended (from observations)."""
    streaks: dict[tuple[str, str, str], int] = {}
    flags: Counter[str] = Counter()
    then_avoided: Counter[str] = Counter()
    for record in records:
        if record["record"] != "observation" or record["event"] == "selected":
            continue
        group = (record["scope_id"], orjson.dumps(record["artifact_ref"]).decode(), record["signature_key"])
        if record["event"] == "recurred":
            streaks[group] = streaks.get(group, 0) + 1
            if streaks[group] == k:
                flags[record["scope_id"]] += 1
        else:
            if streaks.get(group, 0) >= k:
                then_avoided[record["scope_id"]] += 1
            streaks[group] = 0
    return flags, then_avoided


def assert_agrees(journal: Path, work: Path, thresholds: tuple[int, ...] = THRESHOLDS) -> dict[str, Any]:
    body, _ = tune(str(journal), thresholds)
    assert [row["threshold"] for row in body["thresholds"]] == list(thresholds)
    for row in body["thresholds"]:
        k = row["threshold"]
        records, stats = replayed(journal, k, work)
        assert [s["scope_id"] for s in row["by_scope"]] == [s["scope_id"] for s in stats]
        proposals = Counter(r["scope_id"] for r in records if r["record"] == "review_proposal")
        flags, then_avoided = flags_from_ledger(records, k)
        for scope, stat in zip(row["by_scope"], stats, strict=True):
            scope_id = scope["scope_id"]
            assert scope["review_proposals"] == proposals[scope_id], (k, scope_id)
            assert scope["needing_review"] == stat["recurrence"]["needing_review"], (k, scope_id)
            assert scope["flags"] == flags[scope_id], (k, scope_id)
            assert scope["flags_then_avoided"] == then_avoided[scope_id], (k, scope_id)
            assert scope["flags"] == scope["needing_review"] + scope["flags_then_avoided"]
        for name in COUNTS:
            assert row[name] == sum(scope[name] for scope in row["by_scope"])
        assert row["review_proposals"] == sum(proposals.values())
    return body


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    scopes=st.integers(1, 5),
    entries=st.integers(200, 900),
    experiences=st.sampled_from([None, 2, 4]),
    garbage=st.sampled_from([0.0, 0.03]),
    conflicts=st.sampled_from([0.0, 0.03]),
)
def test_tune_agrees_with_a_replay_at_every_threshold(
    tmp_path: Path, seed: int, scopes: int, entries: int, experiences: int | None, garbage: float, conflicts: float
) -> None:
    work = tmp_path / f"run-{seed}-{scopes}-{entries}-{experiences}-{garbage}-{conflicts}"
    work.mkdir()
    spec = JournalSpec(
        entries=entries,
        scopes=scopes,
        seed=seed,
        garbage_ratio=garbage,
        experiences_per_scope=experiences,
        conflict_ratio=conflicts,
    )
    assert_agrees(write(work / "journal.jsonl", list(generate(spec))), work)


def test_a_journal_with_every_kind_of_flag_agrees(tmp_path: Path) -> None:
    # A guard against a vacuous pass: proposals, flags that stayed and flags an avoided ended, at several k.
    journal = write(
        tmp_path / "journal.jsonl", list(generate(JournalSpec(entries=3000, scopes=4, seed=3, experiences_per_scope=4)))
    )
    body = assert_agrees(journal, tmp_path, (1, 2, 3, 4))
    for row in body["thresholds"][:3]:
        assert row["review_proposals"] > 0 and row["needing_review"] > 0 and row["flags_then_avoided"] > 0, row
    # Not every flag is a proposal: other repair surfaces and superseded revisions are flagged too.
    assert any(row["flags"] > row["review_proposals"] for row in body["thresholds"])


def test_streaks_longer_than_the_counters_tell_apart_stay_exact_up_to_their_last_slot(tmp_path: Path) -> None:
    journal = linked_setup()
    for n in range(SHADOW_STREAKS + 3):
        recurrence(journal, f"O{n}", linked=True)
    avoided(journal, "A1")
    for n in range(2):
        recurrence(journal, f"P{n}", linked=True)
    path = write(tmp_path / "journal.jsonl", journal.lines())
    body = assert_agrees(path, tmp_path, (1, 2, SHADOW_STREAKS - 1, SHADOW_STREAKS))
    top = body["thresholds"][-1]
    assert (top["review_proposals"], top["needing_review"], top["flags"], top["flags_then_avoided"]) == (1, 0, 1, 1)
    second = body["thresholds"][1]
    assert (second["review_proposals"], second["needing_review"], second["flags"], second["flags_then_avoided"]) == (
        2,
        1,
        2,
        1,
    )


def test_the_state_of_a_replay_keeps_the_same_counters_tune_computes(tmp_path: Path) -> None:
    journal = write(
        tmp_path / "journal.jsonl", list(generate(JournalSpec(entries=1500, scopes=3, seed=5, experiences_per_scope=3)))
    )
    replay(
        str(journal),
        tmp_path / "state",
        tmp_path / "ledger.jsonl",
        ReplayOptions(EngineConfig(review_threshold=4), batch_size=97, jobs=2),
    )
    store = open_state(tmp_path / "state")
    try:
        state = State(Transaction(store))
        kept = what_if(state, THRESHOLDS)
        scopes, incomplete = scope_shadows(state)
        assert incomplete == [] and len(scopes) == 3
    finally:
        store.close()
    assert kept == tune(str(journal), THRESHOLDS)[0]


def test_tune_state_answers_from_the_counters_without_the_journal(tmp_path: Path) -> None:
    journal = write(
        tmp_path / "journal.jsonl", list(generate(JournalSpec(entries=1500, scopes=3, seed=5, experiences_per_scope=3)))
    )
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"
    replay(str(journal), state, ledger, ReplayOptions(EngineConfig(review_threshold=4), jobs=1))
    # The journal is gone: nothing is replayed, the counters the state kept answer.
    expected = tune(str(journal), (4, 2, 3))[0]
    journal.unlink()
    result = subprocess.run(
        [*recurrence_command(), "tune", "--state", str(state), "--thresholds", "4,2,3", "--json"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert orjson.loads(result.stdout) == expected
    assert b"no journal read" in result.stderr and b"as of journal line 1,500" in result.stderr
    text = subprocess.run(
        [*recurrence_command(), "tune", "--state", str(state), "--thresholds", "2,3,4,5"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    # The state's own threshold is marked, and what changing it takes is said.
    marked = [line.split()[0] for line in text.splitlines() if line.endswith("<- the state")]
    assert marked == ["4"]
    assert "The state runs at 4" in text and "fresh --state with a fresh --out and --review-threshold K" in text
    assert text == table(tune_state_body(state, (2, 3, 4, 5)), 4, from_state=True)
    # A journal and --state, or neither: one line, exit 2.
    for extra in (["--state", str(state), str(ledger)], []):
        done = subprocess.run(
            [*recurrence_command(), "tune", *extra], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2 and done.stdout == "" and len(done.stderr.splitlines()) == 1, done


def tune_state_body(state: Path, thresholds: tuple[int, ...]) -> dict[str, Any]:
    from recurrence_ledger.processor.tune import state_what_if

    return state_what_if(state, thresholds)[0]


def test_the_table_marks_the_default_threshold_for_a_journal() -> None:
    body: dict[str, Any] = {
        "thresholds": [
            {
                "threshold": k,
                "review_proposals": 0,
                "needing_review": 0,
                "flags": 0,
                "flags_then_avoided": 0,
                "by_scope": [],
            }
            for k in (2, 3, 4)
        ]
    }
    text = table(body)
    assert [line.split()[0] for line in text.splitlines() if line.endswith("<- default")] == ["3"]
    assert "A replay runs at 3 unless told otherwise" in text
    assert "not among --thresholds" in table({"thresholds": body["thresholds"][:1]})


def test_a_state_replayed_without_counters_says_which_scopes_they_miss() -> None:
    store = MemoryStore()
    journal = linked_setup()
    recurrence(journal, "O1", linked=True)
    other = Journal()
    other.evidence("ev-1", scope="team-b")
    lines = journal.lines() + other.lines()
    Runner(store).feed(lines)
    store.apply({b'["tune","team-a"]': None})  # as a state written before the counters were kept
    scopes, incomplete = scope_shadows(State(Transaction(store)))
    assert [s for s, _ in scopes] == ["team-a", "team-b"]
    assert incomplete == ["team-a"]


def test_a_state_written_before_the_counters_goes_on_with_every_group_where_it_stands(tmp_path: Path) -> None:
    """A state of a release before the counters (78d47b4's, migrated) has none: the first verdict that
    grows a streak once dead-lettered its entry as an internal error. They now start from the groups'
    streaks: the ledger is a fresh run's, the streak histogram too; the scopes stay incomplete."""
    lines = list(generate(JournalSpec(entries=1200, scopes=3, seed=5, experiences_per_scope=3)))
    journal, head = tmp_path / "journal.jsonl", tmp_path / "head.jsonl"
    write(journal, lines)
    write(head, lines[:600])
    fresh = MemoryState()
    replay(str(journal), fresh, tmp_path / "fresh.jsonl")
    old = MemoryState()
    replay(str(head), old, tmp_path / "old.jsonl")
    for store in old.partitions.values():
        store.apply({row_key: None for row_key, _ in store.iterate_prefix(b'["tune",')})
    replay(str(journal), old, tmp_path / "old.jsonl")
    assert (tmp_path / "old.jsonl").read_bytes() == (tmp_path / "fresh.jsonl").read_bytes()
    (fresh_scopes, _), (old_scopes, incomplete) = (scope_shadows(State(Transaction(s.view()))) for s in (fresh, old))
    assert [s for s, _ in old_scopes] == [s for s, _ in fresh_scopes] and incomplete == [s for s, _ in old_scopes]
    for (_, kept), (_, rebuilt) in zip(fresh_scopes, old_scopes, strict=True):
        assert kept is not None and rebuilt is not None
        assert rebuilt.streaks == kept.streaks and 0 < rebuilt.verdicts < kept.verdicts


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "2,,3",
        "a",
        "0",
        "-1",
        "2.5",
        "1e2",
        f"{SHADOW_STREAKS + 1}",
        "\uff13",
        "2;3",
        ",".join(["3"] * (SHADOW_STREAKS + 1)),
        "9" * 5000,
        "0" * 5000,
    ],
)
def test_bad_thresholds_are_refused_with_one_line(text: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        parse_thresholds(text)
    journal = write(tmp_path / "journal.jsonl", linked_setup().lines())
    result = subprocess.run(
        [*recurrence_command(), "tune", str(journal), "--thresholds", text],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("recurrence tune: --thresholds")


def test_thresholds_keep_the_order_given() -> None:
    assert parse_thresholds(" 5, 2,3 ") == [5, 2, 3]
    assert parse_thresholds("3,3") == [3, 3]  # a row per value given
    assert parse_thresholds("0003," + "0" * 5000 + "7") == [3, 7]
    assert parse_thresholds(str(SHADOW_STREAKS)) == [SHADOW_STREAKS]


def test_tune_prints_the_contract_json_and_writes_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    journal = write(
        work / "journal.jsonl", list(generate(JournalSpec(entries=800, scopes=3, seed=11, experiences_per_scope=3)))
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    before = sorted(os.listdir(work))
    result = subprocess.run(
        [*recurrence_command(), "tune", str(journal), "--thresholds", "4,2,3", "--json"],
        capture_output=True,
        cwd=work,
        check=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    # Nothing kept: not beside the journal, not in the scratch place (its state is removed at the end).
    assert sorted(os.listdir(work)) == before
    assert os.listdir(scratch) == []
    body = orjson.loads(result.stdout)
    assert list(body) == ["thresholds"]
    assert [row["threshold"] for row in body["thresholds"]] == [4, 2, 3]
    for row in body["thresholds"]:
        assert list(row) == ["threshold", *COUNTS, "by_scope"]
        assert all(list(scope) == ["scope_id", *COUNTS] for scope in row["by_scope"])
    assert body == tune(str(journal), (4, 2, 3))[0]
    assert b"nothing kept" in result.stderr
    # The table: one row per threshold with the four counts and the premature share, in the order given.
    text = subprocess.run(
        [*recurrence_command(), "tune", str(journal), "--thresholds", "4,2,3"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert text == table(body)
    rows = text.splitlines()[1:4]
    for line, row in zip(rows, body["thresholds"], strict=True):
        cells = line.split()
        assert cells[:5] == [str(row["threshold"]), *(f"{row[name]:,}" for name in COUNTS)]
        share = row["flags_then_avoided"] / row["flags"] if row["flags"] else None
        assert cells[5] == (f"{share:.1%}" if share is not None else "-")


def test_an_unreadable_journal_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [*recurrence_command(), "tune", str(tmp_path / "missing.jsonl")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("recurrence tune: ")


def test_the_usage_doc_shows_a_real_run(tmp_path: Path) -> None:
    # docs/usage.md's transcript is this command's output on the journal its generate line writes.
    usage = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    start = usage.index("$ recurrence tune big.jsonl --thresholds 2,3,4,5\n")
    shown = usage[start:].split("\n", 1)[1].split("```", 1)[0]
    spec = JournalSpec(entries=50_000, scopes=50, seed=1, experiences_per_scope=40, recent_window=50)
    assert (
        "recurrence generate --entries 50000 --scopes 50 --seed 1 --experiences-per-scope 40 --recent-window 50"
        in usage
    )
    journal = write(tmp_path / "big.jsonl", list(generate(spec)))
    assert shown == table(tune(str(journal), (2, 3, 4, 5))[0])


def test_tune_is_the_same_whatever_the_number_of_processes(tmp_path: Path) -> None:
    # --jobs N runs replay's shards in N processes over a partitioned scratch state: only the speed changes.
    journal = write(
        tmp_path / "journal.jsonl",
        list(generate(JournalSpec(entries=2500, scopes=9, seed=17, experiences_per_scope=4))),
    )
    one, summary = tune(str(journal), THRESHOLDS, jobs=1)
    assert summary.run.processes == 1
    for jobs in (2, 3):
        many, summary = tune(str(journal), THRESHOLDS, jobs=jobs, batch_size=200)
        assert summary.run.processes == jobs
        assert many == one
    assert any(row["review_proposals"] for row in one["thresholds"])
    result = subprocess.run(
        [
            *recurrence_command(),
            "tune",
            str(journal),
            "--jobs",
            "2",
            "--json",
            "--thresholds",
            ",".join(map(str, THRESHOLDS)),
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert orjson.loads(result.stdout) == one
    assert b"in 2 processes" in result.stderr


def test_a_stopped_tune_says_nothing_was_kept(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # A journal that never ends: tune waits for more lines on its stdin until the signal comes.
    process = subprocess.Popen(
        [*recurrence_command(), "tune", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert process.stdin is not None
    process.stdin.write(b"".join(line + b"\n" for line in linked_setup().lines()))
    process.stdin.flush()
    deadline = time.monotonic() + 30
    while not os.listdir(scratch) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    process.stdin.close()
    assert process.returncode == 130, stderr
    assert stdout == b""
    assert stderr.decode().splitlines() == ["recurrence tune: stopped by signal 2; nothing was kept"]
    assert os.listdir(scratch) == []
