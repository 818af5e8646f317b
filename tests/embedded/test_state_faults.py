"""A damaged state is refused in one line (exit 2), or gives exactly the intact state's answer: the fault suite.

One small state is built once (a journal's first lines replayed into it); each case copies it, damages the
copy by one class of fault (a flipped byte in a store's files, a part deleted, swapped in from an older copy
or from another state, an older main, a partition whose creation a crash cut short, foreign files, a read
that must leave every file as it was) and runs the commands an operator would: ``stats`` and the ``replay``
that resumes with the rest of the journal. Each must either refuse with one line naming what is wrong and
exit 2, or end with the intact run's statistics and ledger, byte for byte; never exit 0 with another answer,
never a traceback.
"""

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from devkit.fixtures import FIXTURES, unpack
from recurrence_ledger.processor.cli import main
from recurrence_ledger.processor.core.engine import Engine
from recurrence_ledger.processor.embedded.reading import open_state
from recurrence_ledger.processor.exceptions import StorageError
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.store.rocksdb import RocksStore
from tests.support.embedded_cli import Hook, cli, head, hook_env, journal, stats

#: Lines of the journal in the state every case starts from; the resuming replay reads all of them.
FIRST: Final = 1200
TOTAL: Final = 2000
#: Lines in the older backup of that state (``Built.older``) and in another state (``Built.other``).
OLDER: Final = 600


@dataclass(frozen=True)
class Built:
    journal: Path
    first: Path
    state: Path  # after the first lines
    ledger: Path
    stats: Any  # ``stats`` of that state
    resumed_ledger: bytes  # the ledger after the intact state resumed with the whole journal
    resumed_stats: Any
    older: Path  # the same state after its first OLDER lines: an older backup of it
    other: Path  # another state, of the same journal's first OLDER lines


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    base = tmp_path_factory.mktemp("faults")
    whole = journal(base / "journal.jsonl", entries=TOTAL, scopes=40, seed=3)
    first = head(whole, base / "first.jsonl", FIRST)
    state, ledger = base / "S", base / "L.jsonl"
    older = head(whole, base / "older.jsonl", OLDER)
    assert main(["replay", str(older), "--state", str(state), "--out", str(ledger), "--jobs", "1"]) == 0
    shutil.copytree(state, base / "older")
    argv = ["replay", str(first), "--state", str(state), "--out", str(ledger), "--jobs", "1"]
    assert main(argv) == 0
    argv = ["replay", str(older), "--state", str(base / "other"), "--out", str(base / "other.jsonl"), "--jobs", "1"]
    assert main(argv) == 0
    first_stats = stats(state)
    resumed = base / "resumed"
    shutil.copytree(state, resumed / "S")
    shutil.copy(ledger, resumed / "L.jsonl")
    argv = ["replay", str(whole), "--state", str(resumed / "S"), "--out", str(resumed / "L.jsonl"), "--jobs", "1"]
    assert main(argv) == 0
    resumed_ledger, resumed_stats = (resumed / "L.jsonl").read_bytes(), stats(resumed / "S")
    yield Built(whole, first, state, ledger, first_stats, resumed_ledger, resumed_stats, base / "older", base / "other")


def copy(built: Built, where: Path) -> tuple[Path, Path]:
    state, ledger = where / "S", where / "L.jsonl"
    shutil.copytree(built.state, state)
    shutil.copy(built.ledger, ledger)
    return state, ledger


def refused_or_intact(
    built: Built,
    state: Path,
    ledger: Path,
    capsys: pytest.CaptureFixture[str],
    resume: bool = True,
    jobs: int = 1,
) -> list[str]:
    """``stats`` then the resuming ``replay``: each refused in one line with exit 2, or the intact answer.
    The lines printed by the refusals."""
    lines = []
    code, out, err = _run(["stats", "--state", str(state)], capsys)
    if code == 0:
        assert json.loads(out) == built.stats
    else:
        lines.append(_one_refusal(code, err, "stats"))
    if not resume:
        return lines
    code, out, err = _run(
        ["replay", str(built.journal), "--state", str(state), "--out", str(ledger), "--jobs", str(jobs)], capsys
    )
    if code == 0:
        assert ledger.read_bytes() == built.resumed_ledger
        assert stats(state) == built.resumed_stats
    else:
        lines.append(_one_refusal(code, err, "replay"))
    return lines


def _one_refusal(code: int, err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"recurrence {command}: "), lines
    return lines[0]


def flip(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x5A]))


def _store_files(built: Built) -> list[tuple[str, float]]:
    cases = []
    for part in ("main", "partitions/003"):
        for path in sorted((built.state / part).iterdir()):
            if path.suffix in {".sst", ".log"} or path.name.startswith(("MANIFEST", "CURRENT")):
                cases += [(f"{part}/{path.name}", at) for at in (0.05, 0.3, 0.6, 0.95)]
    return cases


# -- 1. storage errors are never data ----------------------------------------------------------------------


def test_flipped_bytes_in_any_store_file_are_refused_or_change_nothing(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _store_files(built)
    assert any(name.endswith(".sst") for name, _ in cases)
    refused = 0
    for number, (name, at) in enumerate(cases):
        state, ledger = copy(built, tmp_path / str(number))
        target = state / name
        size = target.stat().st_size
        if not size:
            continue
        flip(target, min(size - 1, int(size * at)))
        lines = refused_or_intact(built, state, ledger, capsys)
        for line in lines:
            assert "cannot be read back" in line and "restore the whole state folder" in line, line
            assert "recurrence-read-" not in line, line  # named where it is, not by a reader's link
        refused += bool(lines)
    assert refused  # a flip inside a data block or the manifest is always found


def test_a_corrupt_block_ends_a_scan_with_an_error_naming_the_file_never_early(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = RocksStore.open(path)
    store.apply({b"k%06d" % n: b"v" * 40 for n in range(20_000)})
    store.close()
    (table,) = path.glob("*.sst")
    flip(table, table.stat().st_size // 2)
    store = RocksStore.open(path, read_only=True)
    try:
        seen = 0
        with pytest.raises(StorageError, match=rf"{table.name}.*restore the whole state folder"):
            for _ in store.iterate_prefix(b"k"):
                seen += 1
        assert 0 < seen < 20_000
        failures = 0
        for n in range(20_000):
            try:
                assert store.get(b"k%06d" % n) == b"v" * 40
            except StorageError:
                failures += 1
        assert failures  # the rows of the damaged block: an error, never "absent"
    finally:
        store.close()


def test_a_missing_table_file_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = RocksStore.open(path)
    store.apply({b"k%06d" % n: b"v" for n in range(1000)})
    store.close()
    (table,) = path.glob("*.sst")
    table.unlink()
    with pytest.raises(StorageError, match="cannot be read back"):
        RocksStore.open(path, read_only=True)


class _FailingStore(MemoryStore):
    def get(self, key: bytes) -> bytes | None:
        raise StorageError("the state store X cannot be read back (Corruption: block checksum mismatch)")


def test_the_engine_never_dead_letters_an_entry_because_the_store_failed(built: Built) -> None:
    entry = built.journal.read_bytes().splitlines()[0]
    engine = Engine(Transaction(_FailingStore()))
    with pytest.raises(StorageError):
        engine.process(entry, {"line": 1})


# -- 2. a state knows its parts ----------------------------------------------------------------------------

RESTORE: Final = (
    "restore the whole state folder from one backup, or rebuild it: replay the journal into a fresh --state with "
    "a fresh --out"
)


def _replace(target: Path, source: Path) -> None:
    shutil.rmtree(target)
    shutil.copytree(source, target)


def _damage_deleted(built: Built, state: Path) -> None:
    shutil.rmtree(state / "partitions/005")


def _damage_older_partition(built: Built, state: Path) -> None:
    _replace(state / "partitions/005", built.older / "partitions/005")


def _damage_older_main(built: Built, state: Path) -> None:
    _replace(state / "main", built.older / "main")


def _damage_foreign(built: Built, state: Path) -> None:
    _replace(state / "partitions/005", built.other / "partitions/005")


def _damage_swapped(built: Built, state: Path) -> None:
    parts = state / "partitions"
    (parts / "005").rename(parts / "x")
    (parts / "006").rename(parts / "005")
    (parts / "x").rename(parts / "006")


def _partition_rows(state: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    rows = {}
    for folder in sorted((state / "partitions").iterdir()):
        store = RocksStore.open(folder, read_only=True)
        try:
            rows[folder.name] = list(store.iterate_prefix(b""))
        finally:
            store.close()
    return rows


PART_FAULTS: Final = {
    "deleted": (_damage_deleted, f"partition 005 of the state {{state}} is missing: {RESTORE}"),
    "older-partition": (
        _damage_older_partition,
        f"partition 005 of the state {{state}} is from an older copy of it (journal line {OLDER}, main at line "
        f"{FIRST:,}): {RESTORE}",
    ),
    "older-main": (
        _damage_older_main,
        f"the main store of the state {{state}} ({{state}}/main) is older than its partitions (main at journal line "
        f"{OLDER}, partition 000 at line {FIRST:,}): {RESTORE}",
    ),
    "foreign": (_damage_foreign, "partition 005 of the state {state} belongs to another state (id "),
    "swapped": (
        _damage_swapped,
        f"{{state}}/partitions/005 holds partition 006 of the state {{state}} (folders moved or swapped): {RESTORE}",
    ),
}


@pytest.mark.parametrize(
    ("fault", "jobs"), [*((fault, 1) for fault in sorted(PART_FAULTS)), ("deleted", 2), ("older-main", 2)]
)
def test_a_part_deleted_older_foreign_or_swapped_is_refused_naming_it(
    fault: str, jobs: int, built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = copy(built, tmp_path)
    damage, expected = PART_FAULTS[fault]
    damage(built, state)
    before = _partition_rows(state), ledger.read_bytes()
    lines = refused_or_intact(built, state, ledger, capsys, jobs=jobs)
    wanted = expected.format(state=state)
    assert [line.split(": ", 1)[1][: len(wanted)] for line in lines] == [wanted, wanted], lines
    assert "this state's is" in lines[0] or fault != "foreign"
    # Refused before a row was written (a store opened for writing may have its files tidied by RocksDB).
    assert (_partition_rows(state), ledger.read_bytes()) == before
    for argv in (["patterns"], ["tune"]):
        code, _, err = _run([*argv, "--state", str(state)], capsys)
        assert _one_refusal(code, err, argv[0]).endswith(lines[0].split(": ", 1)[1])


def test_a_deleted_main_is_refused_and_not_made_again_over_the_partitions(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = copy(built, tmp_path)
    shutil.rmtree(state / "main")
    stats_line, replay_line = refused_or_intact(built, state, ledger, capsys)
    assert "is not a recurrence state (no main/CURRENT in it)" in stats_line, stats_line
    assert "already holds" in replay_line and "but the state is new" in replay_line, replay_line
    # With a fresh --out the new main would be made over partitions that hold rows: refused too.
    code, _, err = _run(
        ["replay", str(built.journal), "--state", str(state), "--out", str(tmp_path / "new.jsonl")], capsys
    )
    line = _one_refusal(code, err, "replay")
    assert f"the main store of the state {state} ({state}/main) is older than its partitions" in line, line


def test_after_a_crash_a_partition_older_than_the_last_clean_end_is_refused(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = copy(built, tmp_path)
    # Killed after its second batch's main commit: main at line FIRST + 200, the partitions behind it, the
    # state not clean; FIRST is where every partition stood at the last clean end.
    env = hook_env(tmp_path / "hooks", [Hook("commit", "after", 2)])
    killed = cli("replay", built.journal, "--state", state, "--out", ledger, "--batch", "100", "--jobs", "1", env=env)
    assert killed.returncode == -9, killed.stderr
    _replace(state / "partitions/005", built.older / "partitions/005")
    lines = refused_or_intact(built, state, ledger, capsys)
    wanted = f"partition 005 of the state {state} is from an older copy of it (journal line {OLDER}, main at line "
    assert [line.split(": ", 1)[1][: len(wanted)] for line in lines] == [wanted, wanted], lines


@dataclass(frozen=True)
class Young:
    """A state of a few lines in many partitions, most of which main never committed to."""

    state: Path
    ledger: Path
    stats: Any
    resumed_ledger: bytes
    resumed_stats: Any
    journal: Path


@pytest.fixture(scope="module")
def young(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Young:
    base = tmp_path_factory.mktemp("young")
    few = head(built.journal, base / "few.jsonl", 1)
    journal = head(built.journal, base / "journal.jsonl", 300)
    state, ledger = base / "S", base / "L.jsonl"
    argv = ["replay", str(few), "--state", str(state), "--out", str(ledger), "--jobs", "1", "--partitions", "8"]
    assert main(argv) == 0
    resumed = base / "resumed"
    shutil.copytree(state, resumed / "S")
    shutil.copy(ledger, resumed / "L.jsonl")
    argv = ["replay", str(journal), "--state", str(resumed / "S"), "--out", str(resumed / "L.jsonl")]
    assert main([*argv, "--jobs", "1"]) == 0
    return Young(state, ledger, stats(state), (resumed / "L.jsonl").read_bytes(), stats(resumed / "S"), journal)


def _header_only(state: Path, partition: int, ahead: bool) -> None:
    """A partition store as a crash leaves one that was created for a batch main never committed: its header
    (taken from a partition main did commit to, renumbered), no rows; ``ahead``: applied past main."""
    (source,) = [p for p in sorted((state / "partitions").iterdir())][:1]
    store = RocksStore.open(source, read_only=True)
    try:
        rows = {key: value for key, value in store.iterate_prefix(b"") if key in HEADER}
    finally:
        store.close()
    identity = json.loads(rows[b'["identity"]'])
    rows[b'["identity"]'] = json.dumps({"id": identity["id"], "partition": partition}).encode()
    if ahead:
        epoch, offset, line = json.loads(rows[b'["applied"]'])
        rows[b'["applied"]'] = json.dumps([epoch, offset + 10_000, line + 20]).encode()
    target = RocksStore.open(state / "partitions" / f"{partition:03d}")
    target.apply(rows)
    target.close()


HEADER: Final = frozenset({b'["format"]', b'["config"]', b'["applied"]', b'["identity"]'})


def _empty_store(path: Path) -> None:
    RocksStore.open(path).close()


def _config_only(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "rocksdict-config.json").write_text("{}")


CREATION_CRASHES: Final[dict[str, Callable[[Path, int], None]]] = {
    "empty-folder": lambda state, partition: (state / "partitions" / f"{partition:03d}").mkdir(),
    "rocksdict-config-only": lambda state, partition: _config_only(state / "partitions" / f"{partition:03d}"),
    "empty-store": lambda state, partition: _empty_store(state / "partitions" / f"{partition:03d}"),
    "header-only": lambda state, partition: _header_only(state, partition, ahead=False),
    "header-only-ahead": lambda state, partition: _header_only(state, partition, ahead=True),
}


@pytest.mark.parametrize(
    ("crash", "jobs"), [*((crash, 1) for crash in sorted(CREATION_CRASHES)), ("header-only-ahead", 2)]
)
def test_a_partition_main_never_committed_to_is_created_again(
    crash: str, jobs: int, young: Young, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = tmp_path / "S", tmp_path / "L.jsonl"
    shutil.copytree(young.state, state)
    shutil.copy(young.ledger, ledger)
    present = {int(path.name) for path in (state / "partitions").iterdir()}
    partition = min(set(range(8)) - present)
    CREATION_CRASHES[crash](state, partition)
    code, out, err = _run(["stats", "--state", str(state)], capsys)
    assert code == 0 and json.loads(out) == young.stats, err
    argv = ["replay", str(young.journal), "--state", str(state), "--out", str(ledger), "--jobs", str(jobs)]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    assert ledger.read_bytes() == young.resumed_ledger
    assert stats(state) == young.resumed_stats


def test_a_partition_main_never_committed_to_that_holds_rows_means_an_older_main(
    built: Built, young: Young, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = tmp_path / "S", tmp_path / "L.jsonl"
    shutil.copytree(young.state, state)
    shutil.copy(young.ledger, ledger)
    argv = ["replay", str(young.journal), "--state", str(state), "--out", str(ledger), "--jobs", "1"]
    assert main(argv) == 0
    capsys.readouterr()
    _replace(state / "main", young.state / "main")  # main from when most partitions did not exist
    lines = refused_or_intact(built, state, ledger, capsys, resume=False)
    assert len(lines) == 1 and "is older than its partitions (partition" in lines[0], lines


def test_a_partition_folder_that_holds_files_not_a_stores_is_not_removed(
    young: Young, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = tmp_path / "S", tmp_path / "L.jsonl"
    shutil.copytree(young.state, state)
    shutil.copy(young.ledger, ledger)
    present = {int(path.name) for path in (state / "partitions").iterdir()}
    folder = state / "partitions" / f"{min(set(range(8)) - present):03d}"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    code, _, err = _run(["replay", str(young.journal), "--state", str(state), "--out", str(ledger)], capsys)
    line = _one_refusal(code, err, "replay")
    assert "never committed to" in line and "notes.txt" in line, line
    assert (folder / "notes.txt").read_text() == "mine\n"


# -- 6. read commands write nothing ------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        str(path.relative_to(root)): (path.stat().st_mode, path.stat().st_mtime_ns, path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_read_commands_leave_every_file_as_it_was(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, _ = copy(built, tmp_path)
    before = _tree(state)
    for argv in (["stats"], ["stats", "--table"], ["patterns"], ["tune"]):
        code, _, err = _run([*argv, "--state", str(state)], capsys)
        assert code == 0, err
    assert _tree(state) == before


@pytest.mark.parametrize("part", ["main", "partitions/003"])
def test_a_part_of_a_state_is_refused_naming_the_state(
    part: str, built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = copy(built, tmp_path)
    before = _tree(state)
    for argv in (
        ["stats", "--state", str(state / part)],
        ["patterns", "--state", str(state / part)],
        ["migrate", "--state", str(state / part)],
        ["replay", str(built.journal), "--state", str(state / part), "--out", str(ledger)],
    ):
        code, _, err = _run(argv, capsys)
        line = _one_refusal(code, err, argv[0])
        assert f"is part of the state {state}" in line and f"pass --state {state}" in line, line
    assert _tree(state) == before


# -- 5. a run deletes only what it created -----------------------------------------------------------------


def test_files_beside_the_stores_that_the_state_does_not_own_stay(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = copy(built, tmp_path)
    foreign = {"LOG": b"an operator's log\n", "CURRENT": b"MANIFEST-000001\n", "notes.txt": b"mine\n", "7.blob": b"x"}
    for name, body in foreign.items():
        (state / name).write_bytes(body)
    assert refused_or_intact(built, state, ledger, capsys) == []
    assert {name: (state / name).read_bytes() for name in foreign} == foreign


# -- 3. migrate never loses a row --------------------------------------------------------------------------

SINGLE_STORE: Final = FIXTURES / "0.1.0-78d47b4"


def _single_store_rows(state: Path) -> Any:
    store = RocksStore.open(state, read_only=True)
    try:
        return list(store.iterate_prefix(b""))
    finally:
        store.close()


def test_a_single_store_with_a_flipped_byte_is_not_migrated_and_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    unpack(SINGLE_STORE, state, tmp_path / "ledger.jsonl")
    (table,) = state.glob("*.sst")
    flip(table, table.stat().st_size // 3)
    damaged = table.read_bytes()
    code, _, err = _run(["migrate", "--state", str(state)], capsys)
    line = _one_refusal(code, err, "migrate")
    assert f"{table.name}" in line and "cannot be read back" in line, line
    assert table.read_bytes() == damaged and not (state / "main").exists()  # the old store, as it was
    code, _, err = _run(["migrate", "--state", str(state), "--dry-run"], capsys)
    assert "cannot be read back" in _one_refusal(code, err, "migrate")


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_a_second_migrate_is_refused_while_the_first_runs_and_the_first_ends_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = tmp_path / "reference"
    unpack(SINGLE_STORE, reference, tmp_path / "reference.jsonl")
    assert main(["migrate", "--state", str(reference)]) == 0
    capsys.readouterr()
    state = tmp_path / "state"
    unpack(SINGLE_STORE, state, tmp_path / "ledger.jsonl")
    rows = _single_store_rows(state)
    # The first migrate stops itself (SIGSTOP) amid writing the new stores, holding the lock.
    env = hook_env(tmp_path / "hooks", [Hook("apply", "before", 3, (signal.SIGSTOP,))])
    first = subprocess.Popen(
        [sys.executable, "-m", "recurrence_ledger.processor.cli", "migrate", "--state", str(state)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):
            if first.poll() is not None or _stopped(first.pid):
                break
            time.sleep(0.05)
        assert first.poll() is None and _stopped(first.pid), first.returncode
        code, _, err = _run(["migrate", "--state", str(state)], capsys)
        line = _one_refusal(code, err, "migrate")
        assert "in use by another recurrence process" in line, line
    finally:
        first.send_signal(signal.SIGCONT)
        _, err_bytes = first.communicate(timeout=120)
    assert first.returncode == 0, err_bytes
    assert sorted(path.name for path in state.iterdir()) == ["main", "partitions"]
    assert stats(state) == stats(reference)
    view = open_state(state)
    try:
        assert sum(1 for _ in view.iterate_prefix(b"")) >= len(rows) - 1
    finally:
        view.close()
