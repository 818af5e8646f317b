"""A state directory's header, checked and stamped: the row layout and the pinned engine settings.

``core.stateheader`` says what a header holds; this is where the embedded runner and its readers apply
it to a store, with the advice a user of ``--state`` needs.
"""

from itertools import islice
from typing import Final

from ..core.engineconfig import EngineConfig
from ..core.stateheader import HEADER_KEYS, ROW_LAYOUT, check_layout, check_pinned, config_of
from ..exceptions import REBUILD, StateDirError
from ..store.base import StateStore
from .stateformat import check_state_format

NEW_STATE: Final = f"rebuild it: {REBUILD}"


_KEEP_SETTING: Final = "use a fresh --state directory to change it"


def check_format(store: StateStore, stamps: dict[bytes, bytes] | None = None) -> None:
    """Refuse a main store written in another row layout or a newer state format; stamp a new one, and a
    state of 0.1.0 with the state format it has (``stateformat``), into ``stamps`` if given."""
    rows = check_layout(store.get, "the state", NEW_STATE)
    if rows and next(store.iterate_prefix(b""), None) is not None:
        raise StateDirError(
            f"the state was written by another version of recurrence (no layout version, this one reads "
            f"{ROW_LAYOUT.decode()!r}); {NEW_STATE}"
        )
    rows.update(check_state_format(store.get, "the state"))
    _stamp(store, stamps, rows)


def bind_config(
    store: StateStore, config: EngineConfig | None, stamps: dict[bytes, bytes] | None = None
) -> EngineConfig:
    """Pin the engine configuration to the state: derived views depend on it (None: the state's own)."""
    if config is None:
        return state_config(store)
    _stamp(store, stamps, check_pinned(store.get, config.pinned(), "the state", _KEEP_SETTING))
    return config


def state_config(store: StateStore) -> EngineConfig:
    """The engine configuration a state was built with (read only; a fresh state's defaults)."""
    return config_of(store.get, "the state", NEW_STATE)


def _stamp(store: StateStore, stamps: dict[bytes, bytes] | None, rows: dict[bytes, bytes]) -> None:
    if stamps is None:
        store.apply(rows)
    else:
        stamps.update(rows)


def has_engine_rows(store: StateStore) -> bool:
    # Keys are sorted and only two stamps can come first, so three rows decide it.
    return any(row_key not in HEADER_KEYS for row_key, _ in islice(store.iterate_prefix(b""), 3))
