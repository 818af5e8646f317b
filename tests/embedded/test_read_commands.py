"""The commands that read a state never write: a folder no replay wrote is refused with one line and left
exactly as it was, and a replay refused at the start leaves no state folder behind."""

import os
from pathlib import Path
from typing import Final

import pytest

from recurrence_ledger.processor.cli import main
from tests.support.tools import REPO

EXAMPLE: Final = REPO / "examples" / "rfc-minimum.jsonl"


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path under ``root`` (``root`` included): its kind, modification time and bytes."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        kind = "dir" if path.is_dir() else "file"
        found[str(path.relative_to(root))] = (kind, info.st_mtime_ns, b"" if kind == "dir" else path.read_bytes())
    return found


def readers(state: Path) -> list[list[str]]:
    where = ["--state", str(state)]
    return [
        ["stats", *where],
        ["stats", *where, "--table"],
        ["patterns", *where],
        ["explain", "experience/E7@1", *where],
        ["serve", *where, "--port", "0"],
        ["tune", *where],
    ]


def _not_a_state(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    if kind == "files":
        (folder / "notes.txt").write_text("someone's folder\n")
        (folder / "sub").mkdir()
    elif kind == "half":  # a main/ folder with no database in it
        (folder / "main").mkdir()
    return folder


@pytest.mark.parametrize("kind", ["empty", "files", "half"])
def test_a_folder_that_is_not_a_state_is_refused_and_left_untouched(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _not_a_state(tmp_path, kind)
    before = snapshot(folder)
    for argv in readers(folder):
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "", argv
        assert err.count("\n") == 1 and "is not a recurrence state" in err, (argv, err)
        assert err.startswith(f"recurrence {argv[0]}: "), err
        assert snapshot(folder) == before, argv  # no main/rocksdict-config.json, no LOCK, nothing


def test_reading_a_state_changes_none_of_its_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(tmp_path / "ledger.jsonl")]) == 0
    # A partition folder whose database was never created (a replay killed right then) holds nothing to read.
    empty_partition = state / "partitions" / "005"
    if empty_partition.exists():
        empty_partition = state / "partitions" / "004"
    empty_partition.mkdir()

    def data() -> dict[str, tuple[str, int, bytes]]:
        # Every file, its bytes and its modification time: a reader opens the stores through links of its own
        # (rocksdict rewrote its config file on every open), so a state on read-only media reads too.
        return snapshot(state)

    before = data()
    for argv in [*readers(state)[:-2], ["tune", "--state", str(state)]]:
        assert main(argv) == 0, argv
    capsys.readouterr()
    assert data() == before
    assert os.listdir(empty_partition) == []


def test_a_refused_replay_leaves_no_state_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "someone-elses-ledger.jsonl"
    ledger.write_bytes(EXAMPLE.read_bytes()[:100])
    # A ledger a new state cannot take: refused before the state (or any folder above it) is created.
    nested = tmp_path / "new" / "state"
    assert main(["replay", str(EXAMPLE), "--state", str(nested), "--out", str(ledger)]) == 2
    assert "already holds 100 bytes but the state is new" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "empty"
    existing.mkdir()
    assert main(["replay", str(EXAMPLE), "--state", str(existing), "--out", str(ledger)]) == 2
    assert os.listdir(existing) == []
    # Refused settings and journals were already refused before anything was created.
    for argv in (["replay", str(tmp_path / "absent.jsonl")], ["replay", str(EXAMPLE), "--review-threshold", "0"]):
        assert main([*argv, "--state", str(tmp_path / "s2"), "--out", str(tmp_path / "l2.jsonl")]) == 2
        assert not (tmp_path / "s2").exists() and not (tmp_path / "l2.jsonl").exists()
