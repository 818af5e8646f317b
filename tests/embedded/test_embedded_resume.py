"""Resume from the journal position; dead letters never written twice (issue 7, item 5).

A replay of an unchanged or appended journal skips what the state already
applied (a seek, or read-and-discard for a pipe) and continues with the right
line numbers; any other journal is replayed whole, idempotently, and a line
that was already dead-lettered is not dead-lettered again.
"""

import io
import json
from pathlib import Path

import orjson
import pytest

from recurrence_ledger.processor.cli import main
from recurrence_ledger.processor.host import journalfile
from recurrence_ledger.processor.host.journalfile import JournalPosition, JournalReader
from tests.support.builders import Journal, check
from tests.support.embedded_cli import dead_letters, head, journal, replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rfc-minimum.jsonl"


def run(capsys: pytest.CaptureFixture[str], journal_path: Path | str, state: Path, out: Path) -> str:
    code = main(["replay", str(journal_path), "--state", str(state), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def test_replaying_the_same_journal_five_times_writes_no_dead_letter_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = journal(tmp_path / "j.jsonl", entries=600, seed=3, scopes=4, garbage=0.05)
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    run(capsys, path, state, out)
    first = out.read_bytes()
    letters = dead_letters(out)
    assert letters
    for _ in range(4):
        assert "resumed after line 600" in run(capsys, path, state, out)
    assert out.read_bytes() == first
    assert len({d["dead_letter_id"] for d in letters}) == len(letters)


def test_a_longer_journal_that_starts_with_the_old_one_writes_only_the_new_lines_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = journal(tmp_path / "whole.jsonl", entries=600, seed=4, scopes=4, garbage=0.05)
    start = head(whole, tmp_path / "start.jsonl", 350)
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    run(capsys, start, state, out)
    err = run(capsys, whole, state, out)
    assert "resumed after line 350" in err and "250 entries" in err
    once_state, once = tmp_path / "once", tmp_path / "once.jsonl"
    run(capsys, whole, once_state, once)
    # Same bytes as one run over the longer journal: dead letters included, with their line numbers.
    assert out.read_bytes() == once.read_bytes()


def _invalid_outcome_then_more() -> list[bytes]:
    """Line 1 is dead-lettered as invalid_source_content; line 2 then moves the scope past its position."""
    journal = Journal()
    bad = journal.outcome("O-bad", status="failed", receipt=None, checks=[check("x", "failed")])
    bad["source"]["content"] = '{"schema": "powercontext.task-outcome.v1"}'
    journal.evidence("ev-after")
    return journal.lines()


def test_a_dead_letters_code_never_changes_between_runs_because_its_line_is_not_reread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in _invalid_outcome_then_more()))
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    for _ in range(3):
        run(capsys, path, state, out)
    assert [(d["origin"], d["error"]) for d in dead_letters(out)] == [({"line": 1}, "invalid_source_content")]


def test_journals_that_alternate_are_replayed_whole_and_no_line_is_dead_lettered_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A, then B (not a continuation of A), then A again: A is re-read, and its line 1 would now be
    position_out_of_order; the state remembers that line was dead-lettered already."""
    first = tmp_path / "a.jsonl"
    first.write_bytes(b"".join(line + b"\n" for line in _invalid_outcome_then_more()))
    other = tmp_path / "b.jsonl"
    other.write_bytes(EXAMPLE.read_bytes())
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    run(capsys, first, state, out)
    run(capsys, other, state, out)
    err = run(capsys, first, state, out)
    assert "replayed it whole" in err and "1 dead letters already written by an earlier run were not repeated" in err
    assert [d["error"] for d in dead_letters(out)] == ["invalid_source_content"]


def test_an_overlapping_window_is_replayed_whole_and_idempotently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = journal(tmp_path / "whole.jsonl", entries=500, seed=5, scopes=4)
    lines = whole.read_bytes().splitlines(keepends=True)
    window = tmp_path / "window.jsonl"
    window.write_bytes(b"".join(lines[200:]))
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    run(capsys, head(whole, tmp_path / "start.jsonl", 300), state, out)
    assert "replayed it whole" in run(capsys, window, state, out)
    once_state, once = tmp_path / "once", tmp_path / "once.jsonl"
    run(capsys, whole, once_state, once)
    assert out.read_bytes() == once.read_bytes()


def test_stdin_resumes_by_reading_and_discarding_the_applied_prefix(tmp_path: Path) -> None:
    whole = journal(tmp_path / "whole.jsonl", entries=400, seed=6, garbage=0.05)
    start = head(whole, tmp_path / "start.jsonl", 250).read_bytes()
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert replay("-", state, out, input=start).returncode == 0
    again = replay("-", state, out, input=whole.read_bytes())
    assert again.returncode == 0 and b"resumed after line 250" in again.stderr and b"150 entries" in again.stderr
    once_state, once = tmp_path / "once", tmp_path / "once.jsonl"
    assert replay(whole, once_state, once).returncode == 0
    assert out.read_bytes() == once.read_bytes()


def test_stdin_with_another_prefix_is_replayed_whole_from_the_spooled_prefix(tmp_path: Path) -> None:
    whole = journal(tmp_path / "whole.jsonl", entries=400, seed=7, garbage=0.05)
    lines = whole.read_bytes().splitlines(keepends=True)
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert replay("-", state, out, input=b"".join(lines[:300])).returncode == 0
    changed = b"\n" + b"".join(lines[:300]) + b"".join(lines[300:])  # one blank line first: every line moves
    again = replay("-", state, out, input=changed)
    assert again.returncode == 0 and b"replayed it whole" in again.stderr and b" 400 entries" in again.stderr
    non_dead = [line for line in out.read_bytes().splitlines() if b'"dead_letter"' not in line]
    once_state, once = tmp_path / "once", tmp_path / "once.jsonl"
    assert replay(whole, once_state, once).returncode == 0
    assert non_dead == [line for line in once.read_bytes().splitlines() if b'"dead_letter"' not in line]


def test_an_unfinished_last_line_is_held_back_and_dead_lettered_only_once_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(EXAMPLE.read_bytes() + b"{broken")
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert "the journal's last line (11, 7 bytes) has no line end and is not JSON yet: held back" in run(
        capsys, path, state, out
    )
    assert "held back" in run(capsys, path, state, out)
    assert dead_letters(out) == []
    path.write_bytes(path.read_bytes() + b" and now longer\n")
    assert "held back" not in run(capsys, path, state, out)
    assert [(d["origin"]["line"], d["raw"]) for d in dead_letters(out)] == [(11, "{broken and now longer")]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_half_written_last_line_completed_later_gives_the_ledger_of_one_run(tmp_path: Path, jobs: str) -> None:
    whole = journal(tmp_path / "whole.jsonl", entries=300, seed=6, scopes=4, garbage=0.05)
    data = whole.read_bytes()
    last = data.rindex(b"\n", 0, len(data) - 1) + 1
    cut = last + (len(data) - last) // 2
    path = tmp_path / "j.jsonl"
    path.write_bytes(data[:cut])
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    first = replay(path, state, out, "--jobs", jobs)
    assert first.returncode == 0, first.stderr
    said = f"recurrence replay: the journal's last line (300, {cut - last:,} bytes) has no line end and is not JSON"
    assert said.encode() in first.stderr
    path.write_bytes(data)  # its writer finished the line
    second = replay(path, state, out, "--jobs", jobs)
    assert second.returncode == 0, second.stderr
    assert b"held back" not in second.stderr and b"resumed after line 299" in second.stderr
    once_state, once = tmp_path / "once", tmp_path / "once.jsonl"
    assert replay(whole, once_state, once, "--jobs", jobs).returncode == 0
    assert out.read_bytes() == once.read_bytes()


def test_a_last_line_without_its_newline_that_parses_is_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(EXAMPLE.read_bytes().rstrip(b"\n"))
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert "held back" not in run(capsys, path, state, out)
    once_state, once = tmp_path / "once", tmp_path / "once.jsonl"
    run(capsys, EXAMPLE, once_state, once)
    assert out.read_bytes() == once.read_bytes()


# -- the reader's position ---------------------------------------------------------------


def test_the_checkpoint_covers_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"b": 2}\n{"c": 3}')
    with JournalReader(str(path)) as reader:
        assert [n for n, _ in reader] == [1, 3, 4]
        mark = reader.position()
    assert (mark.offset, mark.line) == (len(b'{"a": 1}\n\n{"b": 2}\n'), 3)
    with JournalReader(str(path)) as reader:
        assert reader.resume(mark)
        assert list(reader) == [(4, b'{"c": 3}')]


def test_resume_refuses_a_prefix_that_differs_and_reads_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"one\ntwo\nthree\n")
    with JournalReader(str(path)) as reader:
        next(iter(reader))
        mark = reader.position()
    path.write_bytes(b"One\ntwo\nthree\n")
    with JournalReader(str(path)) as reader:
        assert not reader.resume(mark)
        assert [n for n, _ in reader] == [1, 2, 3]
    assert not JournalReader(str(path)).resume(JournalPosition(10**9, 5, mark.sha256))  # longer than the file


def test_a_pipe_prefix_that_differs_is_replayed_from_the_spool_even_past_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journalfile, "_SPOOL_IN_MEMORY", 16)
    monkeypatch.setattr(journalfile, "_CHUNK", 7)
    data = b"".join(b'{"n": %d}\n' % i for i in range(50))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(b"x" + data))))
    mark = JournalPosition(len(data) // 2, 25, "0" * 64)
    with JournalReader("-") as reader:
        assert not reader.resume(mark)
        got = list(reader)
    assert got[0] == (1, b"x" + b'{"n": 0}') and len(got) == 50
    assert [json.loads(entry)["n"] for _, entry in got[1:]] == list(range(1, 50))
    assert orjson.loads(got[-1][1]) == {"n": 49}
