"""Stable dead-letter codes and how an entry that cannot be applied becomes a record.

Dead letters are diagnostics, never ledger records, but each keeps its own
identity: where it came from (``origin``) and ``dead_letter_id``, the digest
of the record. The raw entry is kept verbatim so nothing is lost. ``detail``
names locations and rules only: it never repeats a value from the entry (an
unknown key, an unknown tag, any text), because those may hold Experience or
Task Outcome content and end up in logs and dashboards.
"""

import base64
from types import ModuleType
from typing import Any, Final

import orjson
from pydantic import BaseModel, ValidationError

from ...schemas import base, journal, powercontext
from .records import Emitted, Origin, dead_letter

INVALID_ENCODING: Final = "invalid_encoding"
INVALID_JSON: Final = "invalid_json"
UNKNOWN_TYPE: Final = "unknown_type"
INVALID_ENTRY: Final = "invalid_entry"
INVALID_SOURCE_CONTENT: Final = "invalid_source_content"
POSITION_CONFLICT: Final = "position_conflict"
POSITION_OUT_OF_ORDER: Final = "position_out_of_order"
IMMUTABLE_CONFLICT: Final = "immutable_conflict"
INTERNAL_ERROR: Final = "internal_error"

CODES: Final = (
    INVALID_ENCODING,
    INVALID_JSON,
    UNKNOWN_TYPE,
    INVALID_ENTRY,
    INVALID_SOURCE_CONTENT,
    POSITION_CONFLICT,
    POSITION_OUT_OF_ORDER,
    IMMUTABLE_CONFLICT,
    INTERNAL_ERROR,
)

_MAX_DETAIL_ERRORS = 8


def _field_names(*modules: ModuleType) -> frozenset[str]:
    """Every field name, alias and union tag of the input models: the only strings a location may show."""
    names = {"source", "artifact", "candidate", "experience", "handoff", "other", "memory"}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel):
                for name, info in value.model_fields.items():
                    names.add(name)
                    if info.alias:
                        names.add(info.alias)
    return frozenset(names)


_KNOWN: Final = _field_names(base, journal, powercontext)


def _location(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) if isinstance(p, int) or p in _KNOWN else "<key>" for p in loc]
    return ".".join(parts)


def _message(detail: Any) -> str:
    kind = detail["type"]
    if kind == "union_tag_invalid":
        context = detail.get("ctx") or {}
        return f"unknown {context.get('discriminator', 'tag')}; expected one of {context.get('expected_tags', '?')}"
    if kind == "extra_forbidden":
        return "unknown field (not permitted)"
    if kind == "json_invalid":
        return "not valid JSON"
    message: str = detail["msg"]
    return message


def describe(error: ValidationError, prefix: str = "") -> str:
    """Locations and rules only: inputs may hold Experience or Outcome text."""
    parts = []
    details = error.errors(include_input=False, include_url=False)
    for detail in details[:_MAX_DETAIL_ERRORS]:
        location = _location(tuple(detail["loc"]))
        message = _message(detail)
        parts.append(f"{prefix}{location}: {message}" if location or prefix else message)
    if len(details) > _MAX_DETAIL_ERRORS:
        parts.append(f"... {len(details) - _MAX_DETAIL_ERRORS} more")
    return "; ".join(parts)


def classify(error: ValidationError) -> str:
    details = error.errors(include_input=False, include_url=False)
    types = {detail["type"] for detail in details}
    if "json_invalid" in types:
        return INVALID_JSON
    if "union_tag_invalid" in types and all(d["loc"] == () for d in details if d["type"] == "union_tag_invalid"):
        return UNKNOWN_TYPE
    return INVALID_ENTRY


def not_json(error: orjson.JSONDecodeError) -> str:
    return f"not JSON at line {error.lineno} column {error.colno} ({error.msg})"


def readable(raw: bytes) -> tuple[str | None, int | None]:
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


def raw_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode("ascii")


def rejected(
    raw: bytes,
    origin: Origin,
    error: str,
    detail: str,
    scope_id: str | None = None,
    position: int | None = None,
) -> Emitted:
    """The dead letter of one entry; scope and position are read from it when not given."""
    if scope_id is None and position is None:
        scope_id, position = readable(raw)
    return dead_letter(origin, scope_id, position, error, detail, raw_text(raw))
