"""A state's header, the same for both runners: the row layout's version and the pinned engine settings.

Every store that holds engine rows carries two header rows: ``["format"]``,
the version of the row layout (a store written in another layout is
refused), and ``["config"]``, the engine settings derived state depends on
(``EngineConfig.pinned``; another value later is refused, since streaks and
pattern suggestions built under one threshold mean nothing under another).
The embedded runner keeps them in its state directory, the Kafka worker in
each partition's state (so they travel in the changelog). Nothing is
stamped before every setting was checked (``engineconfig``): a header that
holds a value the engine refuses would make the state unusable for good.
"""

from collections.abc import Callable, Mapping
from typing import Final

import orjson
from pydantic import ValidationError

from ..exceptions import ConfigMismatchError, StateDirError
from .engineconfig import EngineConfig
from .formats import ROW_LAYOUT as ROW_LAYOUT_VERSION

#: Layout version of the engine's rows (``state``, ``formats.ROW_LAYOUT``); another layout is refused.
ROW_LAYOUT: Final = b"%d" % ROW_LAYOUT_VERSION
FORMAT_KEY: Final = b'["format"]'
CONFIG_KEY: Final = b'["config"]'
HEADER_KEYS: Final = frozenset({FORMAT_KEY, CONFIG_KEY})

Get = Callable[[bytes], bytes | None]


def check_layout(get: Get, where: str, advice: str) -> dict[bytes, bytes]:
    """Refuse a store written in another row layout; the row a store without a version must stamp.

    Rows without a version: the embedded runner always stamped, so for it they are another layout
    (it refuses them); Kafka partition states were not stamped before, and get the version now.
    """
    stamped = get(FORMAT_KEY)
    if stamped == ROW_LAYOUT:
        return {}
    if stamped is not None and stamped.isdigit() and int(stamped) > ROW_LAYOUT_VERSION:
        raise StateDirError(
            f"{where} was written by a newer recurrence (row layout {int(stamped)}; this one reads "
            f"{ROW_LAYOUT_VERSION}): upgrade recurrence to use it"
        )
    if stamped is not None:
        raise StateDirError(
            f"{where} was written by another version of recurrence (layout {stamped.decode(errors='replace')!r}, "
            f"this one reads {ROW_LAYOUT.decode()!r}); {advice}"
        )
    return {FORMAT_KEY: ROW_LAYOUT}


def stored_pinned(raw: bytes | None, where: str, advice: str) -> dict[str, int] | None:
    """The pinned settings a header holds (None: not stamped yet)."""
    if raw is None:
        return None
    try:
        stored = orjson.loads(raw)
        if not isinstance(stored, dict):
            raise TypeError
        EngineConfig(**stored)  # in range: a header is never written before its values are checked
    except (orjson.JSONDecodeError, TypeError, ValidationError):
        raise StateDirError(
            f"{where} has an unreadable settings header ({raw[:80].decode(errors='replace')!r}); {advice}"
        ) from None
    return {str(name): int(value) for name, value in stored.items()}


def check_pinned(get: Get, wanted: Mapping[str, int], where: str, advice: str) -> dict[bytes, bytes]:
    """Compare the wanted pinned settings with the header's; the row to stamp when there is none."""
    stored = stored_pinned(get(CONFIG_KEY), where, advice)
    if stored is None:
        return {CONFIG_KEY: orjson.dumps(dict(wanted))}
    for name, value in wanted.items():
        if stored.get(name, value) != value:
            raise ConfigMismatchError(f"{where} was built with {name}={stored[name]}, not {value}; {advice}")
    return {}


def config_of(get: Get, where: str, advice: str) -> EngineConfig:
    """The engine settings a state was built with (the defaults for those it does not pin)."""
    stored = stored_pinned(get(CONFIG_KEY), where, advice)
    return EngineConfig(**(stored or {}))
