"""The commands acceptance suites call, end to end (contract section 4)."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recurrence.processor.cli import main
from recurrence.processor.synthetic import JournalSpec, write

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rfc-minimum.jsonl"
EXPECTED = json.loads((ROOT / "examples" / "rfc-minimum.expected-stats.json").read_text())


def stats(state: Path, *extra: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "recurrence.processor.cli", "stats", "--state", str(state), *extra],
        capture_output=True,
        check=True,
        text=True,
    )
    return json.loads(done.stdout)


def replay(
    journal: Path | str, state: Path, out: Path, *extra: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "recurrence.processor.cli",
            "replay",
            str(journal),
            "--state",
            str(state),
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        input=stdin,
        check=False,
    )


def test_rfc_minimum_example_end_to_end(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    first = replay(EXAMPLE, state, out)
    assert first.returncode == 0, first.stderr
    assert b"10 entries" in first.stderr
    assert stats(state) == EXPECTED
    lines = out.read_bytes().splitlines()
    assert [json.loads(line)["record"] for line in lines] == ["observation"] * 2 + ["match"] * 2 + [
        "observation"
    ] * 2 + ["observation", "match", "observation"]
    second = replay(EXAMPLE, state, out)
    assert second.returncode == 0
    assert out.read_bytes().splitlines() == lines  # a second replay appends nothing


def test_overlapping_window_appends_nothing_new(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    write(JournalSpec(entries=600, scopes=4, seed=3, garbage_ratio=0.05), str(journal))
    lines = journal.read_bytes().splitlines(keepends=True)
    head, tail = tmp_path / "head.jsonl", tmp_path / "tail.jsonl"
    head.write_bytes(b"".join(lines[:400]))
    tail.write_bytes(b"".join(lines[250:]))
    whole_state, whole_out = tmp_path / "s1", tmp_path / "l1.jsonl"
    assert replay(journal, whole_state, whole_out).returncode == 0
    split_state, split_out = tmp_path / "s2", tmp_path / "l2.jsonl"
    assert replay(head, split_state, split_out).returncode == 0
    assert replay(tail, split_state, split_out).returncode == 0
    non_dead = [line for line in split_out.read_bytes().splitlines() if b'"dead_letter"' not in line]
    assert non_dead == [line for line in whole_out.read_bytes().splitlines() if b'"dead_letter"' not in line]
    assert stats(split_state) == stats(whole_state)


def test_stdin_journal(tmp_path: Path) -> None:
    done = replay("-", tmp_path / "s", tmp_path / "l.jsonl", stdin=EXAMPLE.read_bytes())
    assert done.returncode == 0, done.stderr
    assert stats(tmp_path / "s") == EXPECTED


def test_stats_scope_and_top(tmp_path: Path) -> None:
    assert replay(EXAMPLE, tmp_path / "s", tmp_path / "l.jsonl").returncode == 0
    assert (
        stats(tmp_path / "s", "--scope", "rfc-minimum", "--top", "1")[0]["recurrence"]["top_revisions"]
        == EXPECTED[0]["recurrence"]["top_revisions"][:1]
    )
    assert stats(tmp_path / "s", "--scope", "nobody") == []


def test_crash_between_ledger_write_and_state_commit_is_repaired(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert replay(EXAMPLE, state, out).returncode == 0
    good = out.read_bytes()
    # Simulate a crash after the ledger got lines whose state change never committed.
    out.write_bytes(good + good.splitlines(keepends=True)[0])
    done = replay(EXAMPLE, state, out)
    assert done.returncode == 0
    assert b"recovered the ledger" in done.stderr
    assert out.read_bytes() == good


def test_unusable_inputs_exit_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["replay", str(tmp_path / "missing.jsonl"), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "o")])
        == 2
    )
    assert main(["stats", "--state", str(tmp_path / "nothing-here")]) == 2
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert main(["replay", str(EXAMPLE), "--state", str(not_a_dir), "--out", str(tmp_path / "o")]) == 2
    assert main(["replay", str(EXAMPLE), "--state", str(tmp_path / "s2"), "--out", str(tmp_path)]) == 2
    assert "recurrence replay:" in capsys.readouterr().err


def test_review_threshold_is_pinned_to_the_state(tmp_path: Path) -> None:
    assert replay(EXAMPLE, tmp_path / "s", tmp_path / "l.jsonl", "--review-threshold", "2").returncode == 0
    mismatch = replay(EXAMPLE, tmp_path / "s", tmp_path / "l.jsonl", "--review-threshold", "4")
    assert mismatch.returncode == 2
    assert b"review_threshold=2" in mismatch.stderr


def test_dead_letters_do_not_fail_the_run(tmp_path: Path) -> None:
    journal = tmp_path / "bad.jsonl"
    journal.write_bytes(b"{broken\n\n" + EXAMPLE.read_bytes())
    done = replay(journal, tmp_path / "s", tmp_path / "l.jsonl")
    assert done.returncode == 0
    assert b"dead letters: 1 (invalid_json=1)" in done.stderr
    assert stats(tmp_path / "s") == EXPECTED


def test_generate_is_seeded_and_replayable(tmp_path: Path) -> None:
    def generated(seed: int) -> bytes:
        return subprocess.run(
            [sys.executable, "-m", "recurrence.processor.cli", "generate", "--entries", "300", "--seed", str(seed)],
            capture_output=True,
            check=True,
        ).stdout

    first = generated(9)
    assert first == generated(9) != generated(10)
    assert len(first.splitlines()) == 300
    done = replay("-", tmp_path / "s", tmp_path / "l.jsonl", stdin=first)
    assert done.returncode == 0 and b"300 entries" in done.stderr
