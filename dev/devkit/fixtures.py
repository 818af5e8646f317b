"""Upgrade fixtures: a state and a ledger written by an earlier release, kept under tests/fixtures/upgrade.

Every fixture is the same journal (``journal.jsonl.gz``, kept beside them so no generator change can
move it) replayed by a release up to line ``LINES``; ``tests/embedded/test_upgrade_fixtures.py`` continues each
with today's code over the whole journal and wants the ledger a fresh run writes, byte for byte. One
command makes the fixture of a release (``make fixture RELEASE=<git ref>``, which runs
``python -m devkit.fixtures REF``); it lands in ``tests/fixtures/upgrade/<version>-<commit>/``:

* ``state.tar.gz``: the state directory (RocksDB's info logs and lock left out);
* ``ledger.jsonl.gz``: the ledger the release wrote;
* ``fixture.json``: the release, its version, the state format it wrote, the lines it replayed.
"""

import argparse
import gzip
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

from recurrence_ledger.processor.core.formats import STATE_FORMAT
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.embedded.statedir import MemoryState, is_single_store, main_path
from recurrence_ledger.processor.embedded.stateformat import SINGLE_STORE, stamped_format
from recurrence_ledger.processor.store.rocksdb import RocksStore

from .localrun import REPO
from .releases import PREVIOUS, ReleaseUnavailableError, build

FIXTURES = REPO / "tests" / "fixtures" / "upgrade"
JOURNAL = FIXTURES / "journal.jsonl.gz"
#: Lines of the journal a release replays (the whole journal has twice as many).
LINES = 300
#: RocksDB files a state does not need to open: info logs (tens of KB each) and the lock.
_SKIPPED = ("LOG", "LOCK")


def journal_bytes() -> bytes:
    return gzip.decompress(JOURNAL.read_bytes())


def journal_lines() -> list[bytes]:
    return journal_bytes().splitlines(keepends=True)


def fresh_run(base: Path) -> tuple[Path, bytes, MemoryState]:
    """This release over the whole fixture journal, from nothing: the journal (written to ``base``), the
    ledger's bytes and the state, in memory: what every continued fixture must end with."""
    journal = base / "journal.jsonl"
    journal.write_bytes(journal_bytes())
    memory = MemoryState()
    replay(str(journal), memory, base / "ledger.jsonl")
    return journal, (base / "ledger.jsonl").read_bytes(), memory


def pack(state: Path) -> bytes:
    """The state directory as a gzipped tar, names sorted and times zeroed (no byte depends on when)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder, dirs, files in sorted(os.walk(state)):
            dirs.sort()
            for name in sorted(files):
                if name.startswith(_SKIPPED):
                    continue
                path = Path(folder) / name
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(state)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
    return gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)


def unpack(fixture: Path, state: Path, ledger: Path) -> None:
    """The fixture's state and ledger, into ``state`` (created) and ``ledger``."""
    state.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress((fixture / "state.tar.gz").read_bytes()))) as tar:
        tar.extractall(state, filter="data")
    ledger.write_bytes(gzip.decompress((fixture / "ledger.jsonl.gz").read_bytes()))


def state_format(state: Path) -> int:
    """The state format of a state directory, as this release tells it (``embedded.stateformat``)."""
    if is_single_store(state):
        return SINGLE_STORE
    main = RocksStore.open(main_path(state), read_only=True)
    try:
        return stamped_format(main.get, str(state)) or STATE_FORMAT
    finally:
        main.close()


def make(ref: str) -> Path:
    release = build(ref)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        head = work / "journal.jsonl"
        head.write_bytes(b"".join(journal_lines()[:LINES]))
        state, ledger = work / "state", work / "ledger.jsonl"
        release.run("replay", head, "--state", state, "--out", ledger)
        found = state_format(state)
        target = FIXTURES / f"{release.version}-{release.commit[:7]}"
        target.mkdir(parents=True, exist_ok=True)
        (target / "state.tar.gz").write_bytes(pack(state))
        (target / "ledger.jsonl.gz").write_bytes(gzip.compress(ledger.read_bytes(), compresslevel=9, mtime=0))
    about = {
        "release": release.commit,
        "version": release.version,
        "state_format": found,
        "journal_lines": LINES,
        "made_by": f"make fixture RELEASE={ref}",
    }
    (target / "fixture.json").write_text(json.dumps(about, indent=2) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description="write the upgrade fixture of a release (tests/fixtures/upgrade)")
    parser.add_argument("ref", nargs="?", default=PREVIOUS, help="git ref of the release (default: the previous one)")
    ref = parser.parse_args().ref
    try:
        target = make(ref)
    except ReleaseUnavailableError as missing:
        sys.exit(f"fixtures: {missing}")
    size = sum(path.stat().st_size for path in target.iterdir())
    print(f"{ref}: {target.relative_to(REPO)} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
