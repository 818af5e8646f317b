"""Stable dead-letter codes and how an unreadable entry becomes a record.

Dead letters are diagnostics, never ledger records: the raw entry is kept
verbatim so nothing is lost, and a replay may write them again.
"""

import base64
from typing import Any, Final

import orjson
from pydantic import ValidationError

from recurrence.schemas.records import DeadLetterRecord

INVALID_ENCODING: Final = "invalid_encoding"
INVALID_JSON: Final = "invalid_json"
UNKNOWN_TYPE: Final = "unknown_type"
INVALID_ENTRY: Final = "invalid_entry"
INVALID_SOURCE_CONTENT: Final = "invalid_source_content"
POSITION_CONFLICT: Final = "position_conflict"
POSITION_OUT_OF_ORDER: Final = "position_out_of_order"
IMMUTABLE_CONFLICT: Final = "immutable_conflict"

CODES: Final = (
    INVALID_ENCODING,
    INVALID_JSON,
    UNKNOWN_TYPE,
    INVALID_ENTRY,
    INVALID_SOURCE_CONTENT,
    POSITION_CONFLICT,
    POSITION_OUT_OF_ORDER,
    IMMUTABLE_CONFLICT,
)

_MAX_DETAIL_ERRORS = 8


def describe(error: ValidationError, prefix: str = "") -> str:
    """Locations and messages only: inputs may hold Experience or Outcome text."""
    parts = []
    details = error.errors(include_input=False, include_url=False)
    for detail in details[:_MAX_DETAIL_ERRORS]:
        location = ".".join(str(p) for p in detail["loc"])
        parts.append(f"{prefix}{location}: {detail['msg']}" if location or prefix else detail["msg"])
    if len(details) > _MAX_DETAIL_ERRORS:
        parts.append(f"... {len(details) - _MAX_DETAIL_ERRORS} more")
    return "; ".join(parts)


def classify(error: ValidationError) -> str:
    types = {detail["type"] for detail in error.errors(include_input=False, include_url=False)}
    if "json_invalid" in types:
        return INVALID_JSON
    if "union_tag_invalid" in types and all(
        d["loc"] == () for d in error.errors(include_input=False) if d["type"] == "union_tag_invalid"
    ):
        return UNKNOWN_TYPE
    return INVALID_ENTRY


def _readable(raw: bytes) -> tuple[str | None, int | None]:
    """Best-effort scope and position of an entry that failed validation."""
    try:
        value: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    scope = value.get("scope_id")
    position = value.get("position")
    return (
        scope if isinstance(scope, str) else None,
        position if type(position) is int and -(2**63) <= position < 2**63 else None,
    )


def raw_text(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode("ascii"), False


def dead_letter(
    raw: bytes, error: str, detail: str, scope_id: str | None = None, position: int | None = None
) -> DeadLetterRecord:
    if scope_id is None and position is None:
        scope_id, position = _readable(raw)
    text, _ = raw_text(raw)
    return DeadLetterRecord(scope_id=scope_id, position=position, error=error, detail=detail, raw=text)
