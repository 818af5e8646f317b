"""The state format of a ``--state`` directory, checked against the formats this release reads.

Format 1 is the single store (every row in one RocksDB directly in the directory), which carries no
stamp of its own: ``statedir.is_single_store`` tells it by its files. Format 2 and later are stamped
in the main store (``STATE_FORMAT_KEY``) by the first run of a release that knows the stamp; a main
store without it was written by 0.1.0, whose partitioned layout is format 2 (the stamp is added then:
one row, nothing else changes). A newer format is refused with one line, never read.
"""

from collections.abc import Callable
from typing import Final

from ..core.formats import OLDEST_STATE_FORMAT, STATE_FORMAT
from ..exceptions import StateDirError
from .mainkeys import STATE_FORMAT_KEY

#: The single store's format (``migration`` upgrades it).
SINGLE_STORE: Final = 1

Get = Callable[[bytes], bytes | None]


def stamped_format(get: Get, where: str) -> int | None:
    """The format a main store is stamped with (None: not stamped, i.e. 0.1.0's format 2)."""
    raw = get(STATE_FORMAT_KEY)
    if raw is None:
        return None
    if not raw.isdigit():
        raise StateDirError(f"{where} has an unreadable state format ({raw[:20]!r}); it was not written by recurrence")
    return int(raw)


def newer(found: int, where: str) -> StateDirError:
    return StateDirError(
        f"{where} was written by a newer recurrence (state format {found}; this one writes {STATE_FORMAT} and reads "
        f"{OLDEST_STATE_FORMAT} to {STATE_FORMAT}): upgrade recurrence to use it"
    )


def check_state_format(get: Get, where: str) -> dict[bytes, bytes]:
    """Refuse a main store of a newer format; the stamp to write when it has none yet."""
    found = stamped_format(get, where)
    if found is None:
        return {STATE_FORMAT_KEY: b"%d" % STATE_FORMAT}
    if found > STATE_FORMAT:
        raise newer(found, where)
    if found < STATE_FORMAT:
        raise StateDirError(f"{where} has state format {found}: upgrade it once with 'recurrence migrate --state DIR'")
    return {}
