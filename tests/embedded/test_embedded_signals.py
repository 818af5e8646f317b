"""Clean stops and clear errors (issue 7, item 6): signals, closed stdin, odd paths, pipes.

The CLI runs in a subprocess; signals come from a generated sitecustomize
(at an exact entry or fsync) or from the test itself while the runner waits
on stdin.
"""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from recurrence_ledger.processor.exceptions import EXIT_INTERRUPTED, EXIT_TERMINATED
from tests.support.embedded_cli import Hook, head, hook_env, journal, one_line, replay

BATCH = "100"


@dataclass(frozen=True)
class Clean:
    journal: Path
    ledger: bytes
    first_100: bytes
    first_150: bytes
    first_200: bytes


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Clean:
    base = tmp_path_factory.mktemp("clean")
    path = journal(base / "journal.jsonl", entries=450)
    ledgers = []
    sources = [("all", path)] + [(str(n), head(path, base / f"{n}.jsonl", n)) for n in (100, 150, 200)]
    for name, source in sources:
        out = base / f"{name}.jsonl.out"
        assert replay(source, base / f"state-{name}", out).returncode == 0
        ledgers.append(out.read_bytes())
    return Clean(path, *ledgers)


def _stderr_lines(stderr: bytes) -> list[str]:
    lines = stderr.decode().strip().splitlines()
    assert not any("Traceback" in line for line in lines), lines
    return lines


def _rerun_completes(clean: Clean, state: Path, out: Path, resumed_at: int) -> bytes:
    rerun = replay(clean.journal, state, out, "--batch", BATCH)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resumed after line {resumed_at} ".encode() in rerun.stderr
    assert out.read_bytes() == clean.ledger
    return rerun.stderr


@pytest.mark.parametrize(
    ("number", "code"), [(signal.SIGTERM, EXIT_TERMINATED), (signal.SIGINT, EXIT_INTERRUPTED)], ids=["TERM", "INT"]
)
def test_a_signal_finishes_the_entry_commits_the_batch_so_far_and_exits_128_plus_n(
    clean: Clean, tmp_path: Path, number: int, code: int
) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    env = hook_env(tmp_path / "hooks", [Hook("process", "before", 150, (number,))])
    stopped = replay(clean.journal, state, out, "--batch", BATCH, env=env)
    assert stopped.returncode == code
    summary, stop = _stderr_lines(stopped.stderr)
    # The batch in progress (entries 101-200, read before the signal) finishes and is made durable.
    assert summary.startswith("recurrence replay: 200 entries")
    assert stop == f"recurrence replay: stopped by signal {number}; run again to resume"
    assert out.read_bytes() == clean.first_200  # entries 101-200 were made durable, not dropped
    _rerun_completes(clean, state, out, resumed_at=200)


def test_a_second_signal_abandons_the_batch_at_once(clean: Clean, tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    env = hook_env(tmp_path / "hooks", [Hook("process", "before", 150, (signal.SIGTERM, signal.SIGTERM))])
    stopped = replay(clean.journal, state, out, "--batch", BATCH, env=env)
    assert stopped.returncode == EXIT_TERMINATED
    assert "the batch in progress was abandoned; run again to resume" in _stderr_lines(stopped.stderr)[-1]
    assert out.read_bytes() == clean.first_100
    _rerun_completes(clean, state, out, resumed_at=100)


def test_a_second_signal_while_committing_leaves_a_tail_the_rerun_cuts(clean: Clean, tmp_path: Path) -> None:
    """The first signal's commit is cut short after the ledger fsync, before the state commit."""
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    hooks = [Hook("process", "before", 150, (signal.SIGINT,)), Hook("fsync", "after", 3, (signal.SIGINT,))]
    stopped = replay(clean.journal, state, out, "--batch", BATCH, env=hook_env(tmp_path / "hooks", hooks))
    assert stopped.returncode == 130
    assert "abandoned" in _stderr_lines(stopped.stderr)[-1]
    assert out.read_bytes() == clean.first_200  # on disk, but the state only recorded 100 entries
    rerun = _rerun_completes(clean, state, out, resumed_at=100)
    assert f"recovered the ledger ({len(clean.first_200) - len(clean.first_100):,} uncommitted".encode() in rerun


def test_a_signal_while_waiting_for_stdin_stops_at_once(clean: Clean, tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    lines = clean.journal.read_bytes().splitlines(keepends=True)
    command = [sys.executable, "-m", "recurrence_ledger.processor.cli", "replay", "-", "--state", str(state)]
    process = subprocess.Popen(
        [*command, "--out", str(out), "--batch", "1"], stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdin is not None
    process.stdin.write(b"".join(lines[:150]))
    process.stdin.flush()
    deadline = time.monotonic() + 60
    while (not out.exists() or out.stat().st_size < len(clean.first_150)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # now blocked reading line 151
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=10)  # the stdin pipe is still open: the read itself was ended
    assert process.returncode == 130
    assert _stderr_lines(stderr)[-1] == "recurrence replay: stopped by signal 2; run again to resume"
    assert out.read_bytes() == clean.first_150
    _rerun_completes(clean, state, out, resumed_at=150)


def test_replay_from_a_closed_stdin_exits_2_with_one_line(tmp_path: Path) -> None:
    closed = replay("-", tmp_path / "state", tmp_path / "ledger.jsonl", preexec_fn=lambda: os.close(0))
    assert closed.returncode == 2
    assert "standard input is closed" in one_line(closed.stderr)


def test_a_non_utf8_out_path_works_resumes_and_is_shown_escaped(clean: Clean, tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = os.fsencode(tmp_path) + b"/ledger-\xff.jsonl"
    assert replay(clean.journal, state, out).returncode == 0
    with open(out, "rb") as handle:
        assert handle.read() == clean.ledger
    assert replay(clean.journal, state, out).returncode == 0
    os.unlink(out)
    missing = replay(clean.journal, state, out)
    assert missing.returncode == 2 and "ledger-\\xff.jsonl is missing" in one_line(missing.stderr)


@pytest.mark.skipif(shutil.which("bash") is None, reason="process substitution needs bash")
def test_a_pipe_given_as_a_path_is_read_as_a_stream(clean: Clean, tmp_path: Path) -> None:
    """``replay <(cat j)``: /dev/fd/N is not a regular file; no size, no seek, resume by discarding."""
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    command = (
        f"{shlex.quote(sys.executable)} -m recurrence_ledger.processor.cli "
        f"replay <(cat {shlex.quote(str(clean.journal))}) "
        f"--state {shlex.quote(str(state))} --out {shlex.quote(str(out))}"
    )
    first = subprocess.run(["bash", "-c", command], capture_output=True, check=False)
    assert first.returncode == 0, first.stderr
    assert out.read_bytes() == clean.ledger
    again = subprocess.run(["bash", "-c", command], capture_output=True, check=False)
    assert again.returncode == 0 and b"resumed after line 450 " in again.stderr
    assert out.read_bytes() == clean.ledger
