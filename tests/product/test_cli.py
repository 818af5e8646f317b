"""The commands acceptance suites call, end to end (contract section 4)."""

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devkit.localrun import replay_command
from recurrence_ledger import __version__
from recurrence_ledger.processor.cli import build_parser, main
from recurrence_ledger.processor.core.formats import OLDEST_STATE_FORMAT, ROW_LAYOUT, STATE_FORMAT
from recurrence_ledger.processor.exceptions import (
    ConfigMismatchError,
    Interrupted,
    LedgerMismatchError,
    StateDirError,
    TransactionStateError,
    exit_code,
)
from recurrence_ledger.processor.synthetic import RECENT_REVISIONS, JournalSpec, generate, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rfc-minimum.jsonl"
EXPECTED = json.loads((ROOT / "examples" / "rfc-minimum.expected-stats.json").read_text())

#: The command line as a module run (not the installed script).
CLI = [sys.executable, "-m", "recurrence_ledger.processor.cli"]


def stats(state: Path, *extra: str) -> Any:
    done = subprocess.run(
        [*CLI, "stats", "--state", str(state), *extra],
        capture_output=True,
        check=True,
        text=True,
    )
    return json.loads(done.stdout)


def replay(
    journal: Path | str, state: Path, out: Path, *extra: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    argv = replay_command(journal, state, out, *extra, command=CLI)
    return subprocess.run(argv, capture_output=True, input=stdin, check=False)


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
    # A misspelled scope is not an empty answer: one line naming the nearest scopes, exit 2, nothing on stdout.
    for scope, hint in (("rfc-minimun", "did you mean 'rfc-minimum'?"), ("nobody", "1 scope: recurrence stats")):
        done = subprocess.run(
            [*CLI, "stats", "--state", str(tmp_path / "s"), "--scope", scope],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.startswith(f"recurrence stats: no scope {scope!r} in this state") and hint in done.stderr
        assert len(done.stderr.splitlines()) == 1


def test_stats_table_is_the_json_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.jsonl"
    write(JournalSpec(entries=3000, scopes=12, seed=5), str(journal))
    assert replay(journal, tmp_path / "s", tmp_path / "l.jsonl").returncode == 0
    assert main(["stats", "--state", str(tmp_path / "s")]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert main(["stats", "--state", str(tmp_path / "s"), "--table"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    fields = ("selected", "recurred", "avoided", "unknown", "unlinked_handoff_citations", "needing_review")
    assert lines[0].split()[:1] == ["scope"] and lines[0].endswith("unknown share")
    # A row per scope in the JSON's order, every count thousands-separated, then the total over them.
    for line, scope in zip(lines[1:], listed, strict=False):
        cells = line.split()
        assert cells[0] == scope["scope_id"]
        assert cells[1:7] == [f"{scope['recurrence'][f]:,}" for f in fields]
    total = lines[1 + len(listed)].split()
    assert total[:3] == ["all", "12", "scopes"]
    assert total[3:9] == [f"{sum(s['recurrence'][f] for s in listed):,}" for f in fields]
    assert any("," in cell for cell in total[3:9])  # this journal's totals pass a thousand
    # The generator's Outcomes rarely verify: most selections end unknown, and the table says so.
    assert total[-1] == "!" and "! marks a large unknown share" in text
    # One scope: its row, no total, and its top revisions.
    scope = listed[0]
    assert main(["stats", "--state", str(tmp_path / "s"), "--scope", scope["scope_id"], "--table"]) == 0
    one = capsys.readouterr().out
    assert not any(line.startswith("all ") for line in one.splitlines())
    assert f"top revisions of {scope['scope_id']}" in one
    for item in scope["recurrence"]["top_revisions"]:
        ref = item["artifact_ref"]
        assert f"{ref['family']}/{ref['artifact_id']}@{ref['revision']}" in one


def test_stats_json_on_a_terminal_names_the_table(tmp_path: Path) -> None:
    import os
    import pty

    journal = tmp_path / "j.jsonl"
    write(JournalSpec(entries=300, scopes=3, seed=5), str(journal))
    assert replay(journal, tmp_path / "s", tmp_path / "l.jsonl").returncode == 0
    # --top 0: a short answer, well within what the terminal holds unread
    command = [*CLI, "stats", "--state", str(tmp_path / "s"), "--top", "0"]
    piped = subprocess.run(command, capture_output=True, text=True, check=True)
    assert piped.stderr == ""  # what a suite reads: the JSON alone
    leader, follower = pty.openpty()
    try:
        shown = subprocess.run(command, stdout=follower, stderr=subprocess.PIPE, text=True, check=True)
    finally:
        os.close(follower)
        os.close(leader)
    assert shown.stderr == "recurrence stats: 3 scopes; --table prints them as a table\n"


def test_the_unknown_share_is_flagged_by_one_rule() -> None:
    from recurrence_ledger.processor.statstable import unknown_flagged

    assert not unknown_flagged({"selected": 0, "unknown": 0})
    assert not unknown_flagged({"selected": 19, "unknown": 19})  # too few selections to say anything
    assert not unknown_flagged({"selected": 20, "unknown": 9})
    assert unknown_flagged({"selected": 20, "unknown": 10})
    assert unknown_flagged({"selected": 2000, "unknown": 1900})
    # The page flags by the same two numbers (its own copy, in the script).
    from recurrence_ledger.processor.statstable import UNKNOWN_FLAG_MIN_SELECTED, UNKNOWN_FLAG_SHARE

    script = (ROOT / "processor" / "web" / "ui" / "app.js").read_text()
    assert f"const UNKNOWN_FLAG_SHARE = {UNKNOWN_FLAG_SHARE};" in script
    assert f"const UNKNOWN_FLAG_MIN_SELECTED = {UNKNOWN_FLAG_MIN_SELECTED};" in script


def test_crash_between_ledger_write_and_state_commit_is_repaired(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert replay(EXAMPLE, state, out).returncode == 0
    good = out.read_bytes()
    # Simulate a crash after the ledger got lines whose state change never committed.
    out.write_bytes(good + good.splitlines(keepends=True)[0])
    done = replay(EXAMPLE, state, out)
    assert done.returncode == 0
    assert b"recovered the ledger" in done.stderr
    assert all(line.startswith(b"recurrence replay: ") for line in done.stderr.splitlines()), done.stderr
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
            [*CLI, "generate", "--entries", "300", "--seed", str(seed)],
            capture_output=True,
            check=True,
        ).stdout

    first = generated(9)
    assert first == generated(9) != generated(10)
    assert len(first.splitlines()) == 300
    done = replay("-", tmp_path / "s", tmp_path / "l.jsonl", stdin=first)
    assert done.returncode == 0 and b"300 entries" in done.stderr


# -- command-line surface (issue 10, for replay / stats / generate) --------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"recurrence {__version__}"
    # The state format it writes and the oldest it reads (docs/upgrading.md), then the other formats.
    assert lines[1].startswith(f"state format {STATE_FORMAT} (reads {OLDEST_STATE_FORMAT} to {STATE_FORMAT};")
    assert lines[2].startswith(f"row layout {ROW_LAYOUT} (reads {ROW_LAYOUT}), changelog change sets")


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_is_accepted_before_or_after_the_subcommand(tmp_path: Path, where: str) -> None:
    journal = tmp_path / "bad.jsonl"
    journal.write_bytes(b"{broken\n")
    args = ["replay", str(journal), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "l.jsonl")]
    done = subprocess.run(
        [*CLI, *(["-v", *args] if where == "before" else [*args, "-v"])],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b"DEBUG recurrence.embedded: dead letter invalid_json at line 1" in done.stderr
    assert b"broken" not in done.stderr  # logs carry codes and positions, never entry text


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = commands.choices[name]
    return sub


@pytest.mark.parametrize("name", ["replay", "stats", "generate"])
def test_every_flag_has_help(name: str) -> None:
    undocumented = [a.dest for a in _subcommand(name)._actions if not a.help]
    assert undocumented == []


def test_generate_experiences_per_scope_bounds_the_working_set() -> None:
    done = subprocess.run(
        [*CLI, "generate", "--entries", "400", "--scopes", "2", "--seed", "4", "--experiences-per-scope", "3"],
        capture_output=True,
        check=True,
    )
    spec = JournalSpec(entries=400, scopes=2, seed=4, experiences_per_scope=3)
    assert done.stdout == b"".join(line + b"\n" for line in generate(spec))
    experiences: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        entry = json.loads(line)
        if entry["type"] == "artifact" and entry["artifact"]["family"] == "experience":
            experiences.setdefault(entry["scope_id"], set()).add(entry["artifact"]["artifact_id"])
    assert experiences and all(len(ids) <= 3 for ids in experiences.values())


def test_generate_recent_window_cites_only_recent_entries() -> None:
    window = 5
    spec_flags = ["--entries", "3000", "--scopes", "2", "--seed", "5", "--experiences-per-scope", "3"]
    done = subprocess.run(
        [*CLI, "generate", *spec_flags, "--recent-window", str(window)],
        capture_output=True,
        check=True,
    )
    spec = JournalSpec(entries=3000, scopes=2, seed=5, experiences_per_scope=3, recent_window=window)
    assert done.stdout == b"".join(line + b"\n" for line in generate(spec))
    # Per scope and kind, the order in which sources and Handoffs were published, and each
    # Experience's head revision: every citation must reach at most ``window`` back.
    published: dict[tuple[str, str], list[str]] = {}
    heads: dict[tuple[str, str], int] = {}
    cited_any = 0

    def recent(scope: str, kind: str, ident: str) -> bool:
        return ident in published.get((scope, kind), [])[-window:]

    for line in done.stdout.splitlines():
        entry = json.loads(line)
        scope = entry["scope_id"]
        if entry["type"] == "source":
            content = json.loads(entry["source"]["content"])
            kind = entry["source"]["metadata"]["kind"]
            if kind == "task-outcome":
                for item in [*content["checks"], *content["observations"]]:
                    for citation in item["evidence"]:
                        ident = citation["source_ref"]["source_id"]
                        cited_any += 1
                        assert ident == "missing-evidence" or recent(scope, "git-change", ident)
                receipt = content["handoff_receipt_ref"]
                assert receipt is None or recent(scope, "handoff-receipt", receipt["source_id"])
            if kind == "handoff-receipt":
                assert recent(scope, "handoff", content["selected_revision"]["artifact_id"])
            published.setdefault((scope, kind), []).append(entry["source_ref"]["source_id"])
        elif entry["type"] == "artifact":
            artifact = entry["artifact"]
            if artifact["family"] == "handoff":
                for citation in artifact["content"]["state"][0]["citations"]:
                    ref = citation["artifact_ref"]
                    assert heads[(scope, ref["artifact_id"])] - ref["revision"] < min(window, RECENT_REVISIONS)
                published.setdefault((scope, "handoff"), []).append(artifact["artifact_id"])
            else:
                heads[(scope, artifact["artifact_id"])] = artifact["revision"]
    assert cited_any > 100


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Interrupted(2), 130),
        (Interrupted(15), 143),
        (LedgerMismatchError("x"), 2),
        (StateDirError("x"), 2),
        (ConfigMismatchError("x"), 2),
        (OSError(28, "No space left on device"), 2),
        (BrokenPipeError(), 0),
        (KeyboardInterrupt(), 130),
        (TransactionStateError("x"), 1),
        (ValueError("x"), 1),
    ],
)
def test_exit_codes_come_from_one_mapping(error: BaseException, code: int) -> None:
    assert exit_code(error) == code


def _warning(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [line for line in result.stderr.decode().splitlines() if "warning:" in line]


def test_a_replay_that_dead_lettered_every_entry_ends_with_a_warning_naming_the_top_code(tmp_path: Path) -> None:
    # The wrong file: a gzip'ed journal (binary), and a ledger given where the journal goes.
    compressed = tmp_path / "journal.jsonl.gz"
    compressed.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    done = replay(compressed, tmp_path / "s1", tmp_path / "l1.jsonl")
    assert done.returncode == 0, done.stderr  # dead letters are not a failure (contract section 4)
    (warning,) = _warning(done)
    assert warning.startswith("recurrence replay: warning: every entry (") and "was dead-lettered, most as " in warning
    top = json.loads((tmp_path / "l1.jsonl").read_text().splitlines()[0])["error"]
    assert f"most as {top} (" in warning and str(compressed) in warning
    assert done.stderr.decode().rstrip().endswith(warning)

    assert replay(EXAMPLE, tmp_path / "s2", tmp_path / "ledger.jsonl").returncode == 0
    wrong = replay(tmp_path / "ledger.jsonl", tmp_path / "s3", tmp_path / "l3.jsonl")
    assert wrong.returncode == 0 and len(_warning(wrong)) == 1
    codes = [json.loads(line)["error"] for line in (tmp_path / "l3.jsonl").read_text().splitlines()]
    assert f"most as {max(set(codes), key=codes.count)} ({max(map(codes.count, codes))})" in _warning(wrong)[0]


def test_a_replay_that_applied_something_has_no_warning(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    write(JournalSpec(entries=300, scopes=4, seed=3, garbage_ratio=0.3), str(journal))
    done = replay(journal, tmp_path / "state", tmp_path / "ledger.jsonl")
    assert done.returncode == 0 and b"dead letters: " in done.stderr and _warning(done) == []
    only_garbage = tmp_path / "garbage.jsonl"
    only_garbage.write_bytes(b"not json\n" * 3)
    again = replay(only_garbage, tmp_path / "state", tmp_path / "ledger.jsonl")  # same state: dead letters only
    assert len(_warning(again)) == 1
