"""State format 1 to 2: the single store split, in place, into a main store and partition stores.

Every row goes where a state of format 2 keeps it (``statedir.home``): the runner's rows (the header,
the ledger mark, the journal position, the record index, dead-letter and pattern rows) to the main
store, each scope's engine rows to its partition's store, byte for byte. Beside them, what format 2
holds and a single store did not: in the main store the partition count, epoch 0, a clean mark at the
journal position and the state format; in each partition the header and ``applied`` at the
position. The next replay then resumes from the position as if it had written the state itself.
The ledger file is not touched: its mark moves with the main store.

Crash-safe (kill -9 anywhere, run again: the same state):

1. the new stores are built in ``STATE/.migrating`` (whatever an interrupted run left there is
   removed first), made durable and closed; the single store is only read (it is opened for writing
   only to hold its lock, so no replay of the earlier release writes it meanwhile);
2. ``.migrating/partitions`` is renamed to ``STATE/partitions``, then ``.migrating/main`` to
   ``STATE/main``: that rename is the commit. Before it the directory is a single store (a
   ``partitions`` folder beside the single store's files can only be step 2's, and the rerun
   removes it); after it, a state of format 2;
3. the single store's files are removed (``remove_leftovers``); a state whose main store exists and
   that still holds some is finished by the next ``migrate`` or ``replay``.
"""

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

from ..core.formats import STATE_FORMAT
from ..core.stateheader import CONFIG_KEY, FORMAT_KEY, ROW_LAYOUT
from ..exceptions import REBUILD, StateDirError
from ..host.journalfile import JournalPosition
from ..host.printable import shown
from ..store.rocksdb import RocksStore, rocks_options
from .ledgerfile import sync_directory
from .mainkeys import CLEAN_KEY, EPOCH_KEY, JOURNAL_KEY, LEDGER_KEY, MIGRATED_KEY, PARTITIONS_KEY, STATE_FORMAT_KEY
from .statedir import (
    APPLIED_KEY,
    MIGRATING,
    PARTITIONS,
    Applied,
    StateDir,
    Store,
    clean_mark,
    home,
    main_path,
    remove_leftovers,
    store_files,
)

#: Rows held per store before they are written (one write batch each).
_BATCH_ROWS: Final = 10_000
_EPOCH: Final = 0

Progress = Callable[[int], None]


@dataclass
class Split:
    """What a split moves (or, for a dry run, would move)."""

    rows: int = 0
    main_rows: int = 0
    partition_rows: dict[int, int] = field(default_factory=dict)
    position: JournalPosition | None = None
    single_store_bytes: int = 0


def _refuse(root: Path, why: str) -> StateDirError:
    return StateDirError(f"cannot migrate the state {shown(root)}: {why}; rebuild it: {REBUILD}")


def _checkpoint(root: Path, store: RocksStore) -> JournalPosition | None:
    """The single store's journal position, once its header shows one this release can continue."""
    layout = store.get(FORMAT_KEY)
    if layout != ROW_LAYOUT:
        shown_layout = "none" if layout is None else repr(layout.decode(errors="replace"))
        raise _refuse(root, f"its row layout is {shown_layout}, and this release reads {ROW_LAYOUT.decode()!r}")
    if store.get(CONFIG_KEY) is None:
        raise _refuse(root, "it holds no engine settings")
    if store.get(LEDGER_KEY) is None:
        raise _refuse(root, "it records no ledger mark (written by a recurrence older than the mark)")
    raw = store.get(JOURNAL_KEY)
    return None if raw is None else JournalPosition.decode(raw)


def _routed(
    store: RocksStore, count: int, split: Split, progress: Progress
) -> Iterator[tuple[int | None, bytes, bytes]]:
    for number, (row_key, value) in enumerate(store.iterate_prefix(b""), 1):
        partition = home(row_key, count)
        if partition is None:
            split.main_rows += 1
        else:
            split.partition_rows[partition] = split.partition_rows.get(partition, 0) + 1
        split.rows = number
        if not number % _BATCH_ROWS:
            progress(number)
        yield partition, row_key, value


def _store_bytes(root: Path) -> int:
    return sum((root / name).stat().st_size for name in store_files(root) if (root / name).is_file())


def estimated_rows(root: Path) -> int:
    store = RocksStore.open(root, read_only=True)
    try:
        return store.estimated_rows()
    finally:
        store.close()


def plan(root: Path, count: int, progress: Progress) -> Split:
    """What ``split`` would do (a dry run): the single store read, nothing written."""
    store = RocksStore.open(root, read_only=True)
    try:
        split = Split(position=_checkpoint(root, store), single_store_bytes=_store_bytes(root))
        for _ in _routed(store, count, split, progress):
            pass
    finally:
        store.close()
    return split


class _Writer:
    """The new stores under construction, each written in batches of ``_BATCH_ROWS`` rows."""

    def __init__(self, work: Path, header: dict[bytes, bytes]) -> None:
        location = StateDir(work)
        self.main: Store = location.open_main(durable=False)  # synced once, in ``finish``
        self._open = location.opener()
        self._header = header  # every partition's first rows
        self.partitions: dict[int, Store] = {}
        self._pending: dict[int | None, dict[bytes, bytes | None]] = {}

    def put(self, partition: int | None, row_key: bytes, value: bytes) -> None:
        if partition is not None and partition not in self.partitions:
            self.partitions[partition] = self._open(partition)
            self._pending[partition] = dict(self._header)
        rows = self._pending.setdefault(partition, {})
        rows[row_key] = value
        if len(rows) >= _BATCH_ROWS:
            self._write(partition)

    def _write(self, partition: int | None) -> None:
        rows = self._pending.pop(partition, None)
        if rows:
            (self.main if partition is None else self.partitions[partition]).apply(rows)

    def finish(self) -> None:
        """Every row written and durable, every store closed."""
        for partition in list(self._pending):
            self._write(partition)
        for store in [*self.partitions.values(), self.main]:
            store.sync()
            store.close()

    def abort(self) -> None:
        for store in [*self.partitions.values(), self.main]:
            with suppress(Exception):  # the run already failed: that error is the one to report
                store.close()


def _sync_tree(work: Path) -> None:
    for folder, _, _ in os.walk(work, topdown=False):
        sync_directory(Path(folder))


def split(root: Path, count: int, progress: Progress) -> Split:
    """Split the single store in ``root`` into ``count`` partitions in place (see the module docstring)."""
    probe = RocksStore.open(root, read_only=True)  # a store refused below is left exactly as it was
    try:
        _checkpoint(root, probe)
    finally:
        probe.close()
    found = store_files(root)
    # For writing only to hold the lock (nothing is written to it), and before anything is touched: a second
    # migrate of the same state is refused here, not after it removed the first one's work folder. Its info
    # log goes to a scratch folder: RocksDB rotates the log before it takes the lock, so a second migrate
    # refused by the lock would leave a LOG.old file in the state that no one recorded.
    scratch = Path(tempfile.mkdtemp(prefix="recurrence-migrate-"))
    options = rocks_options()
    options.set_db_log_dir(str(scratch))
    try:
        store = RocksStore.open(root, options=options)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    work = root / MIGRATING
    try:
        if work.exists():
            shutil.rmtree(work)  # an interrupted run's: built again from the start
        result = Split(position=_checkpoint(root, store), single_store_bytes=_store_bytes(root))
        position = result.position
        at = (0, 0) if position is None else (position.offset, position.line)
        header = {FORMAT_KEY: ROW_LAYOUT, APPLIED_KEY: Applied(_EPOCH, *at).encode()}
        config = store.get(CONFIG_KEY)
        assert config is not None  # _checkpoint refused a store without one
        header[CONFIG_KEY] = config
        writer = _Writer(work, header)
        try:
            for partition, row_key, value in _routed(store, count, result, progress):
                writer.put(partition, row_key, value)
            main_rows: dict[bytes, bytes] = {
                PARTITIONS_KEY: b"%d" % count,
                EPOCH_KEY: b"%d" % _EPOCH,
                STATE_FORMAT_KEY: b"%d" % STATE_FORMAT,
                # What the clean-up may remove: the files found now and those the open above added.
                MIGRATED_KEY: orjson.dumps(sorted({*found, *store_files(root)})),
            }
            if position is not None:
                # Every partition stands at the position: the next replay need not look at them.
                main_rows[CLEAN_KEY] = clean_mark(_EPOCH, position)
            for row_key, value in main_rows.items():
                writer.put(None, row_key, value)
            writer.finish()
        except BaseException:
            writer.abort()
            raise
        # The single store stays until every row read from it is read back from the new stores.
        _check_written(root, work, result, len(main_rows), len(header))
    finally:
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)
    _sync_tree(work)
    _commit(root, work)
    remove_leftovers(root)
    return result


def _count(path: Path) -> int:
    store = RocksStore.open(path, read_only=True)
    try:
        return sum(1 for _ in store.iterate_prefix(b""))
    finally:
        store.close()


def _check_written(root: Path, work: Path, result: Split, main_extra: int, header: int) -> None:
    """Every store built counts the rows read for it (plus the rows a migration adds), else nothing is moved."""
    expected = {main_path(work): result.main_rows + main_extra}
    for partition, rows in result.partition_rows.items():
        expected[work / PARTITIONS / f"{partition:03d}"] = rows + header
    for path, rows in expected.items():
        found = _count(path)
        if found != rows:
            raise _refuse(
                root,
                f"the new store {shown(path)} holds {found:,} rows where {rows:,} were written; the single store is "
                "left as it was",
            )


def _commit(root: Path, work: Path) -> None:
    partitions = root / PARTITIONS
    if partitions.exists():
        shutil.rmtree(partitions)  # moved here by an interrupted run, which never reached the commit
    if (work / PARTITIONS).exists():
        os.rename(work / PARTITIONS, partitions)
    sync_directory(root)
    os.rename(main_path(work), main_path(root))  # the commit: from here on the state has format 2
    sync_directory(root)
