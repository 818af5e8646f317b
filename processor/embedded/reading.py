"""The embedded state read back: statistics, and the files ``explain`` and ``serve`` read records from."""

from pathlib import Path
from typing import Any

from ..core.engine import Engine
from ..core.state import State
from ..core.stateheader import check_layout
from ..exceptions import StateDirError
from ..host.printable import shown
from ..host.regularfile import check_regular
from ..store.base import StateStore, Transaction
from .archive import FileArchive
from .header import NEW_STATE, state_config
from .ledgerfile import LedgerMark, check_ledger
from .mainkeys import LEDGER_KEY
from .views import open_view


def statistics(store: StateStore, scope_id: str | None, top: int | None) -> list[dict[str, Any]]:
    check_layout(store.get, "the state", NEW_STATE)
    config = state_config(store)
    engine = Engine(Transaction(store), config)
    return [s.model_dump(mode="json") for s in engine.statistics(scope_id, top)]


def listed_scopes(store: StateStore) -> list[str]:
    """The scopes ``statistics`` lists (those with an accepted entry), in order."""
    state = State(Transaction(store))
    return [s for s in sorted(state.scope_ids()) if (meta := state.scope(s)) is not None and meta.last_position > 0]


def open_archive(store: StateStore, ledger: Path | None = None, journal: Path | None = None) -> FileArchive:
    """The ledger and journal that ``explain`` and ``serve`` read back, checked before anything is read.

    Each must be a regular file (given, or the one the state last wrote and read); the ledger must be the
    state's, by the same mark ``replay`` checks: a ledger that is shorter than the state recorded, or differs
    before that length, is refused (LedgerMismatchError). A missing one is not an error: the explanation then
    says what the state alone can (the records it names are shown as not readable).
    """
    archive = FileArchive(store, ledger, journal)
    for path, given, what in ((archive.ledger, ledger, "--out"), (archive.journal, journal, "--journal")):
        if path is not None:
            check_regular(path, what if given else f"the state's {what[2:]}", must_exist=False)
    if archive.ledger is not None and archive.ledger.exists():
        raw = store.get(LEDGER_KEY)
        check_ledger(archive.ledger, None if raw is None else LedgerMark.decode(raw))
    return archive


def open_state(path: Path, must_exist: bool = False) -> StateStore:
    """The state for reading (``StateView``): every command but ``replay``, which opens its stores itself."""
    if must_exist and not path.exists():
        raise StateDirError(f"no state directory at {shown(path)}; run 'recurrence replay' first")
    return open_view(path)
