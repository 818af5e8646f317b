"""``recurrence migrate --state DIR``: a state of an earlier format upgraded in place to the one this
release writes (``formats.STATE_FORMAT``); with ``--dry-run``, what would change, nothing written.

What each state needs:

* format 1 (the single store of every release before ``replay --jobs``): split into the main store
  and partition stores (``splitstore``), every row rewritten once;
* format 2 as 0.1.0 wrote it (no stamp): the stamp, one row (``replay`` adds it on its first run too,
  so this migration is also done automatically);
* format 2 with files an interrupted split left behind: they are removed (``replay`` does it too);
* a newer format: refused with one line (upgrade recurrence); format 2 with its stamp: nothing to do.

Every step is crash-safe: killed anywhere, ``migrate`` run again ends with the same state.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..core.formats import STATE_FORMAT
from ..core.stateheader import check_layout
from ..exceptions import ConfigMismatchError, StateDirError
from ..host.printable import shown
from ..host.progress import Progress
from ..store.rocksdb import RocksStore
from .header import NEW_STATE
from .splitstore import estimated_rows, plan, split
from .statedir import (
    DEFAULT_PARTITIONS,
    StateDir,
    is_single_store,
    leftovers,
    main_path,
    partition_count,
    refuse_part_of_state,
    remove_leftovers,
)
from .stateformat import SINGLE_STORE, check_state_format


@dataclass
class Report:
    """What a migration did, or (a dry run) would do: one line per change; none when the state is current."""

    found: int
    dry_run: bool
    changes: list[str] = field(default_factory=list)
    rows: int = 0
    seconds: float = 0.0


def migrate(
    root: Path, dry_run: bool = False, partitions: int | None = None, progress_stream: IO[str] | None = None
) -> Report:
    started = time.monotonic()
    if not root.is_dir():
        raise StateDirError(f"no state directory at {shown(root)}")
    refuse_part_of_state(root)
    if is_single_store(root):
        report = _split(root, dry_run, partitions or DEFAULT_PARTITIONS, progress_stream)
    elif main_path(root).is_dir():
        report = _current_layout(root, dry_run, partitions)
    else:
        raise StateDirError(f"{shown(root)} holds no recurrence state (neither a main store nor a single store)")
    report.seconds = time.monotonic() - started
    return report


def _split(root: Path, dry_run: bool, count: int, progress_stream: IO[str] | None) -> Report:
    report = Report(SINGLE_STORE, dry_run)
    progress = Progress(estimated_rows(root), progress_stream, unit="rows")
    try:

        def update(rows: int) -> None:
            progress.update(rows, rows)

        moved = plan(root, count, update) if dry_run else split(root, count, update)
        progress.update(moved.rows, moved.rows, force=True)
    finally:
        progress.close()
    report.rows = moved.rows
    verb = ("would split", "would remove") if dry_run else ("split", "removed")
    report.changes.append(
        f"state format {SINGLE_STORE} (a single store) -> {STATE_FORMAT}: {verb[0]} {moved.rows:,} rows into the main "
        f"store ({moved.main_rows:,} rows) and {len(moved.partition_rows)} of {count} partitions "
        f"({moved.rows - moved.main_rows:,} rows), resuming after journal line "
        f"{0 if moved.position is None else moved.position.line:,}; {verb[1]} the single store's files "
        f"({moved.single_store_bytes / 2**20:.1f} MiB); the ledger file is not touched"
    )
    return report


def _current_layout(root: Path, dry_run: bool, partitions: int | None) -> Report:
    where = f"the state {shown(root)}"
    store = RocksStore.open(main_path(root), read_only=True) if dry_run else StateDir(root).open_main()
    try:
        check_layout(store.get, where, NEW_STATE)
        stamp = check_state_format(store.get, where)
        count = partition_count(store)
        if partitions is not None and count is not None and partitions != count:
            raise ConfigMismatchError(
                f"{where} has {count} partitions (fixed when it was created), not {partitions}; leave --partitions out"
            )
        report = Report(STATE_FORMAT, dry_run)
        if stamp:
            if not dry_run:
                store.apply(stamp)
            report.changes.append(
                f"state format {STATE_FORMAT} as 0.1.0 wrote it: {'would stamp' if dry_run else 'stamped'} its format "
                "in the main store (one row)"
            )
    finally:
        store.close()
    found = leftovers(root)
    if found:
        count_removed = len(found) if dry_run else remove_leftovers(root)
        report.changes.append(
            f"{'would remove' if dry_run else 'removed'} {count_removed} files an interrupted migration left in "
            f"{shown(root)}"
        )
    return report
