"""Opening a state for reading: its parts checked (``parts``), then one ``StateView`` over them.

Every read command (``stats``, ``patterns``, ``explain``, ``tune --state``, the repair loop) and ``serve``'s
follower open a state here; ``replay`` opens its stores itself (``runner``).
"""

import time
from contextlib import suppress
from pathlib import Path
from typing import Final

from ..core.formats import STATE_FORMAT
from ..exceptions import StateDirError, StorageError
from ..host.printable import shown
from ..store.base import StateStore
from ..store.rocksdb import RocksStore
from .parts import Expected, Header, check_parts, read_header
from .statedir import (
    StateView,
    check_state,
    existing_partitions,
    holds_store,
    is_single_store,
    main_path,
    partition_count,
    partition_path,
)
from .stateformat import newer, stamped_format

#: Attempts a follower makes to find every partition at the same batch (each a fresh set of views).
_CONSISTENT_TRIES: Final = 20


def open_view(root: Path, follower: bool = False) -> StateStore:
    """The state for reading: a ``StateView``, or the single store of an earlier layout.

    ``follower``: each store as a RocksDB secondary (``RocksStore.open_follower``), for a state a replay
    may be writing. The partitions are flushed one after the other, so a view is kept only when they
    all stand at the same batch (their ``applied`` rows agree; ``StateView.as_of``); the main store may
    be a batch or two ahead of them while a replay runs (its records index and counts, never the
    statistics). After ``_CONSISTENT_TRIES`` views caught between two flushes: StateDirError (a
    follower keeps the view it has and looks again).
    """
    if not follower:
        return _open_view(root, False)
    for attempt in range(_CONSISTENT_TRIES):
        view = _open_view(root, True)
        if not isinstance(view, StateView) or view.partitions_agree():
            return view
        view.close()
        time.sleep(0.01 * (attempt + 1))
    raise StateDirError(f"the state {shown(root)} is between two batches; look again")


def _open_view(root: Path, follower: bool) -> StateStore:
    def opened(path: Path) -> RocksStore:
        return RocksStore.open_follower(path) if follower else RocksStore.open(path, read_only=True)

    check_state(root)
    if is_single_store(root):
        return opened(root)
    main = opened(main_path(root))
    partitions: dict[int, StateStore] = {}

    def header_of(partition: int) -> Header | None:
        path = partition_path(root, partition)
        # A partition's folder exists a moment before its database does (a replay creating it, or
        # killed right then): it holds nothing yet, and opening it would write rocksdict's config there.
        if not holds_store(path):
            return None
        store = partitions.get(partition)
        if store is None:
            store = partitions[partition] = opened(path)
        return read_header(store)

    try:
        found = stamped_format(main.get, f"the state {shown(root)}")
        if found is not None and found > STATE_FORMAT:
            raise newer(found, f"the state {shown(root)}")
        count = partition_count(main)
        if count:
            try:
                parts = check_parts(Expected.read(root, main.get), existing_partitions(root), header_of, follower)
            except StorageError:
                raise
            except StateDirError:
                if follower:
                    raise
                # A replay may have committed a batch between main's open and its partitions' (main is
                # written first): a main opened after them is never behind them. Damage fails again.
                main.close()
                main = opened(main_path(root))
                parts = check_parts(Expected.read(root, main.get), existing_partitions(root), header_of, follower)
            # The partitions main never committed to hold nothing of the state: passed by.
            for partition in parts.again:
                store = partitions.pop(partition, None)
                if store is not None:
                    store.close()
    except BaseException:
        for store in [*partitions.values(), main]:
            with suppress(Exception):
                store.close()
        raise
    return StateView(main, partitions, count or 1)
