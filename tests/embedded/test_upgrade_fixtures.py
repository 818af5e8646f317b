"""A state and a ledger written by each earlier release, continued by this one (issue 35).

The fixtures (tests/fixtures/upgrade, made by ``make fixture RELEASE=<ref>``, ``devkit.fixtures``)
each hold the first 300 lines of one journal as a release replayed them. This release must carry each
on over the whole journal -- after ``recurrence migrate`` where the state's format is older than the
one it writes -- and end with the ledger a fresh run of this release writes, byte for byte, and the
same statistics and pattern listing.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devkit.fixtures import FIXTURES, fresh_run, journal_lines, unpack
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.formats import STATE_FORMAT
from recurrence_ledger.processor.core.patterns import listing
from recurrence_ledger.processor.embedded.mainkeys import STATE_FORMAT_KEY
from recurrence_ledger.processor.embedded.migration import migrate
from recurrence_ledger.processor.embedded.parts import main_identity, read_header
from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.embedded.runner import ReplayOptions, replay
from recurrence_ledger.processor.embedded.statedir import MIGRATING, existing_partitions, main_path, partition_path
from recurrence_ledger.processor.exceptions import StateDirError
from recurrence_ledger.processor.store.base import StateStore, Transaction
from recurrence_ledger.processor.store.rocksdb import RocksStore
from tests.support.embedded_cli import cli, one_line

RELEASES = sorted(path.parent for path in FIXTURES.glob("*/fixture.json"))


@dataclass(frozen=True)
class Fresh:
    journal: Path
    ledger: bytes
    statistics: Any
    patterns: Any


def _patterns(store: StateStore) -> Any:
    return listing(Transaction(store), EngineConfig().pattern_scopes, suggested_only=False)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Fresh:
    """This release over the whole journal, from nothing."""
    base = tmp_path_factory.mktemp("fresh")
    journal, ledger, memory = fresh_run(base)
    view = memory.view()
    return Fresh(journal, ledger, statistics(view, None, None), _patterns(view))


def _about(release: Path) -> dict[str, Any]:
    about: dict[str, Any] = json.loads((release / "fixture.json").read_text())
    return about


def _outputs(state: Path, ledger: Path) -> tuple[bytes, Any, Any]:
    store = open_state(state)
    try:
        return ledger.read_bytes(), statistics(store, None, None), _patterns(store)
    finally:
        store.close()


def _stamp(state: Path) -> bytes | None:
    main = RocksStore.open(main_path(state), read_only=True)
    try:
        return main.get(STATE_FORMAT_KEY)
    finally:
        main.close()


def test_the_fixtures_cover_the_single_store_and_the_previous_release() -> None:
    formats = {_about(release)["state_format"] for release in RELEASES}
    assert {1, 2} <= formats, [release.name for release in RELEASES]
    # Small enough to keep in the repository (a few hundred KB in all).
    assert sum(path.stat().st_size for path in FIXTURES.rglob("*") if path.is_file()) < 400_000


@pytest.mark.parametrize("release", RELEASES, ids=[release.name for release in RELEASES])
@pytest.mark.parametrize("tail", [False, True], ids=["committed", "uncommitted-tail"])
def test_a_release_state_continued_by_this_one_ends_with_the_ledger_of_a_fresh_run(
    fresh: Fresh, tmp_path: Path, release: Path, tail: bool
) -> None:
    about = _about(release)
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"
    unpack(release, state, ledger)
    # Killed after its ledger write and before its state commit: bytes the state never recorded.
    uncommitted = b'{"record":"match","scope_id":"cut-me' if tail else b""
    with ledger.open("ab") as handle:
        handle.write(uncommitted)
    if about["state_format"] < STATE_FORMAT:
        with pytest.raises(StateDirError, match=f"state format {about['state_format']}.*recurrence migrate --state"):
            replay(str(fresh.journal), state, ledger, ReplayOptions(jobs=1))
        report = migrate(state)
        assert report.found == about["state_format"] and len(report.changes) == 1
    summary = replay(str(fresh.journal), state, ledger, ReplayOptions(jobs=1))
    assert summary.resumed is not None and summary.resumed.line == about["journal_lines"]
    assert summary.truncated_bytes == len(uncommitted)
    assert _outputs(state, ledger) == (fresh.ledger, fresh.statistics, fresh.patterns)
    assert _stamp(state) == b"%d" % STATE_FORMAT  # the first replay stamps a 0.1.0 state
    assert _identities(state) == ("upgraded", {partition: partition for partition in existing_partitions(state)})
    assert migrate(state).changes == []


def _identities(state: Path) -> tuple[str, dict[int, int | None]]:
    """How main says the state got its id, and the number each partition carries with that id (``parts``)."""
    main = RocksStore.open(main_path(state), read_only=True)
    try:
        identity = main_identity(main.get)
    finally:
        main.close()
    assert identity is not None
    numbers: dict[int, int | None] = {}
    for partition in existing_partitions(state):
        store = RocksStore.open(partition_path(state, partition), read_only=True)
        try:
            header = read_header(store)
        finally:
            store.close()
        assert header.state_id == identity.id, partition
        numbers[partition] = header.number
    return identity.since, numbers


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(tmp_path: Path) -> None:
    release = next(r for r in RELEASES if _about(r)["state_format"] == 1)
    state = tmp_path / "state"
    unpack(release, state, tmp_path / "ledger.jsonl")

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(state)): p.read_bytes() for p in sorted(state.rglob("*")) if p.is_file()}

    before = files()
    report = migrate(state, dry_run=True)
    assert files() == before
    assert report.dry_run and report.rows > 0
    [change] = report.changes
    assert change.startswith(f"state format 1 (a single store) -> {STATE_FORMAT}: would split {report.rows:,} rows")
    assert "of 8 partitions" in change and "resuming after journal line 300" in change


def test_migrate_on_the_command_line_then_again(tmp_path: Path) -> None:
    release = next(r for r in RELEASES if _about(r)["state_format"] == 1)
    state = tmp_path / "state"
    unpack(release, state, tmp_path / "ledger.jsonl")
    done = cli("migrate", "--state", state, "--partitions", "4")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.decode().splitlines()
    assert "-> 2: split" in lines[0] and "of 4 partitions" in lines[0]
    assert lines[-1].startswith("recurrence migrate: done")
    assert sorted(p.name for p in state.iterdir()) == ["main", "partitions"]
    again = cli("migrate", "--state", state)
    assert again.returncode == 0
    assert (
        again.stderr.decode().strip() == f"recurrence migrate: the state is state format {STATE_FORMAT} already; "
        "nothing to do"
    )


def test_a_state_of_a_newer_release_is_refused_by_every_command_with_one_line(tmp_path: Path) -> None:
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"".join(journal_lines()[:50]))
    replay(str(journal), state, ledger, ReplayOptions(jobs=1))
    main = RocksStore.open(main_path(state))
    main.apply({STATE_FORMAT_KEY: b"%d" % (STATE_FORMAT + 1)})
    main.close()
    newer = f"was written by a newer recurrence (state format {STATE_FORMAT + 1}; this one writes {STATE_FORMAT}"
    commands: list[list[str | Path]] = [
        ["replay", journal, "--state", state, "--out", ledger],
        ["stats", "--state", state],
        ["migrate", "--state", state],
    ]
    for args in commands:
        done = cli(*args)
        assert done.returncode == 2, args
        assert newer in one_line(done.stderr) and "upgrade recurrence" in one_line(done.stderr)


def test_what_an_interrupted_migration_left_is_removed_by_the_next_replay(fresh: Fresh, tmp_path: Path) -> None:
    release = next(r for r in RELEASES if _about(r)["state_format"] == 1)
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"
    unpack(release, state, ledger)
    leftover = {p.name: p.read_bytes() for p in state.iterdir()}
    migrate(state)
    # As if killed during the clean-up: some of the single store's files, and the work folder.
    for name, data in leftover.items():
        (state / name).write_bytes(data)
    (state / MIGRATING).mkdir()
    replay(str(fresh.journal), state, ledger, ReplayOptions(jobs=1))
    assert sorted(p.name for p in state.iterdir()) == ["main", "partitions"]
    assert ledger.read_bytes() == fresh.ledger


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ({b'["format"]': b"1"}, "its row layout is '1', and this release reads '2'"),
        ({b'["format"]': b"2", b'["config"]': b"{}"}, "it records no ledger mark"),
    ],
    ids=["another-row-layout", "no-ledger-mark"],
)
def test_a_single_store_this_release_cannot_continue_is_not_migrated(
    tmp_path: Path, rows: dict[bytes, bytes], why: str
) -> None:
    state = tmp_path / "state"
    store = RocksStore.open(state)
    store.apply({**rows, b'["scope","a"]': b"[1,0,0,0,0]"})
    store.close()
    before = sorted(p.name for p in state.iterdir())
    done = cli("migrate", "--state", state)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"cannot migrate the state {state}: {why}" in line and "rebuild it" in line
    assert sorted(p.name for p in state.iterdir()) == before
