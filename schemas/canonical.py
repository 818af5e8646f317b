"""Canonical JSON and ``sha256:`` digests exactly as contract section 2 defines them."""

import hashlib
from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    """UTF-8 JSON, sorted keys, no whitespace, non-ASCII unescaped."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()
