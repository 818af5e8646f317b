"""The ledger is checked against its state on start; --out can never feed the journal or the state (issue 7, 3-4).

In process through ``cli.main`` (the same code path as the command, without
a subprocess per run).
"""

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from recurrence_ledger.processor.cli import main
from recurrence_ledger.processor.embedded.mainkeys import LEDGER_KEY
from recurrence_ledger.processor.embedded.statedir import main_path
from recurrence_ledger.processor.store.rocksdb import RocksStore
from tests.support.embedded_cli import Hook, hook_env, journal, one_line
from tests.support.embedded_cli import replay as cli_replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rfc-minimum.jsonl"


@dataclass
class Run:
    code: int
    err: str


def replay(capsys: pytest.CaptureFixture[str], journal_path: Path | str, state: Path, out: Path) -> Run:
    code = main(["replay", str(journal_path), "--state", str(state), "--out", str(out)])
    return Run(code, capsys.readouterr().err)


def refused(run: Run, *fragments: str) -> None:
    """Exit 2 with one line that says what is wrong and what to do."""
    lines = run.err.strip().splitlines()
    assert run.code == 2 and len(lines) == 1, run.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


REBUILD = "rebuild: replay the journal into a fresh --state with a fresh --out"


@pytest.fixture
def built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Path, bytes]:
    path = journal(tmp_path / "journal.jsonl", entries=300)
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert replay(capsys, path, state, out).code == 0
    return path, state, out, out.read_bytes()


def test_a_deleted_ledger_is_refused(built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    path, state, out, good = built
    out.unlink()
    refused(replay(capsys, path, state, out), "is missing", f"recorded {len(good):,} bytes", "restore", REBUILD)
    assert not out.exists()  # nothing was written (the file its lock created is removed again)


def test_a_ledger_truncated_mid_line_is_refused(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, state, out, good = built
    out.write_bytes(good[: len(good) // 2])
    refused(replay(capsys, path, state, out), "fewer than", REBUILD)
    assert out.read_bytes() == good[: len(good) // 2]


def test_a_ledger_cut_mid_line_then_appended_past_its_length_is_refused(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, state, out, good = built
    tampered = good[: len(good) - 50] + good  # longer than recorded, but not the recorded bytes
    out.write_bytes(tampered)
    refused(replay(capsys, path, state, out), "is not the one the state wrote", REBUILD)
    assert out.read_bytes() == tampered


def test_another_file_of_the_same_length_is_refused(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, state, out, good = built
    out.write_bytes(good[:-1] + b" ")
    refused(replay(capsys, path, state, out), "is not the one the state wrote", REBUILD)


def test_a_non_empty_ledger_given_to_a_fresh_state_is_refused(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, _, out, good = built
    fresh = tmp_path / "fresh-state"
    refused(replay(capsys, path, fresh, out), "the state is new", "written a second time", "fresh --state")
    assert out.read_bytes() == good


def test_an_empty_ledger_file_is_fine_for_a_fresh_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ledger.jsonl"
    out.write_bytes(b"")
    assert replay(capsys, EXAMPLE, tmp_path / "state", out).code == 0
    assert len(out.read_bytes().splitlines()) == 9


def test_a_longer_ledger_whose_recorded_part_matches_is_cut_and_regenerated(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, state, out, good = built
    partial = b'{"record":"match","half a lin'
    out.write_bytes(good + partial)
    run = replay(capsys, path, state, out)
    assert run.code == 0 and f"recovered the ledger ({len(partial):,} uncommitted bytes regenerated)" in run.err
    assert out.read_bytes() == good


def test_a_moved_or_copied_ledger_with_the_same_bytes_is_accepted(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, state, out, good = built
    moved = tmp_path / "elsewhere" / "moved.jsonl"
    moved.parent.mkdir()
    shutil.move(out, moved)
    longer = journal(tmp_path / "longer.jsonl", entries=400)
    assert replay(capsys, longer, state, moved).code == 0
    copy = tmp_path / "copy.jsonl"
    shutil.copy(moved, copy)
    assert replay(capsys, longer, state, copy).code == 0
    assert copy.read_bytes() == moved.read_bytes() and copy.read_bytes().startswith(good)


def test_a_state_without_a_ledger_mark_is_refused(
    built: tuple[Path, Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, state, out, _ = built
    store = RocksStore.open(main_path(state))
    store.apply({LEDGER_KEY: None})  # as an older recurrence left it
    store.close()
    refused(replay(capsys, path, state, out), "no ledger mark", REBUILD)


# -- paths -----------------------------------------------------------------------------------


def _nothing_written(state: Path, files: dict[Path, bytes]) -> None:
    assert not state.exists()
    for path, content in files.items():
        assert path.read_bytes() == content


def test_out_equal_to_the_journal_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.jsonl"
    shutil.copy(EXAMPLE, path)
    link, hard = tmp_path / "link.jsonl", tmp_path / "hard.jsonl"
    link.symlink_to(path)
    os.link(path, hard)
    for out in (path, link, hard):
        refused(replay(capsys, path, tmp_path / "state", out), "is the journal itself")
    refused(replay(capsys, link, tmp_path / "state", hard), "is the journal itself")
    _nothing_written(tmp_path / "state", {path: EXAMPLE.read_bytes()})


def test_out_inside_or_equal_to_the_state_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    assert replay(capsys, EXAMPLE, state, tmp_path / "ledger.jsonl").code == 0
    files = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    via_link = tmp_path / "state-link"
    via_link.symlink_to(state)
    hard = tmp_path / "hard-current"
    os.link(state / "main" / "CURRENT", hard)
    hard_partition = tmp_path / "hard-partition-current"
    os.link(next(state.glob("partitions/*/CURRENT")), hard_partition)
    for out in (state / "main" / "CURRENT", state / "new.jsonl", state, via_link / "x.jsonl", hard, hard_partition):
        refused(replay(capsys, EXAMPLE, state, out), "overlap", "outside the state directory")
    refused(replay(capsys, EXAMPLE, via_link, state / "main" / "LOG"), "overlap")
    for path, content in files.items():
        if path.name != "LOG":  # RocksDB's own info log
            assert path.read_bytes() == content


def test_a_state_directory_inside_out_or_a_journal_inside_the_state_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused(replay(capsys, EXAMPLE, tmp_path / "out" / "state", tmp_path / "out"), "overlap")
    state = tmp_path / "s"
    state.mkdir()
    inside = state / "j.jsonl"
    shutil.copy(EXAMPLE, inside)
    refused(replay(capsys, inside, state, tmp_path / "l.jsonl"), "inside --state")
    assert not (tmp_path / "l.jsonl").exists() and not (tmp_path / "out").exists()


def test_out_that_is_not_a_regular_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(replay(capsys, EXAMPLE, tmp_path / "state", Path(os.devnull)), "not a regular file")
    refused(replay(capsys, EXAMPLE, tmp_path / "state", tmp_path), "overlap")  # a directory holding the state
    other = tmp_path / "dir"
    other.mkdir()
    refused(replay(capsys, EXAMPLE, tmp_path / "state", other), "not a regular file")
    assert not (tmp_path / "state").exists()


def test_an_unreadable_journal_is_refused_before_the_state_or_the_ledger_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    refused(replay(capsys, tmp_path / "missing.jsonl", state, out), "cannot read journal", "No such file")
    refused(replay(capsys, tmp_path, state, out), "cannot read journal", "is a directory")
    assert not state.exists() and not out.exists()


# -- one run per ledger file (issue 40, 4) --------------------------------------------------------


def _stopped_at_first_commit(tmp_path: Path, path: Path, state: Path, out: Path) -> "subprocess.Popen[bytes]":
    """A replay stopped (SIGSTOP) just before its first batch commits: it holds the ledger, mid-run."""
    env = hook_env(tmp_path / "hooks", [Hook("commit", "before", 1, (signal.SIGSTOP,))])
    command = [sys.executable, "-m", "recurrence_ledger.processor.cli", "replay", str(path)]
    run = subprocess.Popen([*command, "--state", str(state), "--out", str(out), "--batch", "50"], env=env)
    _, status = os.waitpid(run.pid, os.WUNTRACED)  # returns once it has stopped (or ended)
    assert os.WIFSTOPPED(status), status
    return run


def test_a_second_run_on_the_same_ledger_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    path = journal(tmp_path / "journal.jsonl", entries=300)
    one_shot = tmp_path / "one-shot.jsonl"
    assert cli_replay(path, tmp_path / "one-shot-state", one_shot).returncode == 0
    state, other_state, out = tmp_path / "state", tmp_path / "other", tmp_path / "ledger.jsonl"
    first = _stopped_at_first_commit(tmp_path, path, state, out)
    try:
        second = cli_replay(path, other_state, out)
        assert second.returncode == 2
        assert "is being written by another run" in one_line(second.stderr)
        assert not other_state.exists()  # refused before the state was created
    finally:
        first.kill()  # the kernel drops the lock of a killed run
        first.wait()
    resumed = cli_replay(path, state, out)
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == one_shot.read_bytes()
