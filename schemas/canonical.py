"""Canonical JSON and ``sha256:`` digests exactly as contract section 2 defines them.

canonical_json is UTF-8 JSON with sorted keys, separators ``,`` and ``:``,
non-ASCII unescaped. orjson writes exactly that, except that it refuses
integers outside 64 bits; the contract keeps such integers exactly in
free-form places (``source.metadata``, other Sources' content, other artifact
families, candidate proposals) and writes them in decimal, so those are
spliced in as pre-serialized fragments. Nothing else differs, which is why the
fallback only runs when orjson refuses a value.
"""

import hashlib
from typing import Any, Final

import orjson

_SORTED: Final = orjson.OPT_SORT_KEYS
_I64_MIN: Final = -(2**63)
_U64_MAX: Final = 2**64 - 1


def _exact_integers(value: Any) -> Any:
    """``value`` with every integer orjson cannot write replaced by its decimal fragment."""
    if type(value) is int:
        return value if _I64_MIN <= value <= _U64_MAX else orjson.Fragment(str(value).encode())
    if isinstance(value, dict):
        return {key: _exact_integers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_exact_integers(item) for item in value]
    return value


def dumps(value: Any, option: int | None = None) -> bytes:
    """orjson.dumps that also writes integers of any size exactly (decimal)."""
    try:
        return orjson.dumps(value, option=option)
    except TypeError:
        # orjson.JSONEncodeError is a TypeError; only out-of-range integers get here
        # from validated input, and any other refusal raises again below.
        return orjson.dumps(_exact_integers(value), option=option)


def canonical_json(value: Any) -> bytes:
    """UTF-8 JSON, sorted keys, no whitespace, non-ASCII unescaped."""
    return dumps(value, _SORTED)


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    return digest_bytes(canonical_json(value))
