"""The HTTP read surface's shared parts, for the worker's Faust views and ``recurrence serve`` alike.

Both servers answer the same paths with the same bodies (docs/web.md); what
differs is only where the state is (one embedded store, or partitions spread
over workers). So everything that is not routing lives here: query parsing,
content negotiation for ``/explain``, narrowing an explanation to a scope,
the page's static files and the bodies of ``/dead-letters`` and ``/patterns``.
No web framework is imported: each server turns these values into responses.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from ...schemas.constants import DEFAULT_TOP_REVISIONS
from ..core.deadletters import CODES
from ..explain import NotFoundError, render
from ..host.printable import echoed

MAX_TOP: Final = 1000
JSON: Final = "application/json"
TEXT: Final = "text/plain; charset=utf-8"

Format = Literal["json", "text"]
#: The two servers of the read surface: a Kafka worker, and ``recurrence serve`` over an embedded state.
Server = Literal["worker", "embedded"]

#: The statistics page: one HTML file, one script, one style sheet; no build step, nothing fetched from elsewhere.
UI_DIR: Final = Path(__file__).resolve().parent / "ui"
UI_FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.ico": "image/vnd.microsoft.icon",
}


def parse_top(query: Mapping[str, str]) -> int:
    raw = query.get("top")
    if raw is None or raw == "":
        return DEFAULT_TOP_REVISIONS
    try:
        top = int(raw)
    except ValueError:
        raise ValueError("top must be an integer") from None
    if not 0 <= top <= MAX_TOP:
        raise ValueError(f"top must be between 0 and {MAX_TOP}")
    return top


def explain_format(query: Mapping[str, str], accept: str | None) -> Format:
    """``?format=json|text`` wins; else JSON when the client accepts JSON and not plain text; else text."""
    wanted = query.get("format")
    if wanted == "json":
        return "json"
    if wanted == "text":
        return "text"
    if wanted:
        raise ValueError("format must be json or text")
    accept = (accept or "").lower()
    if "application/json" in accept and "text/plain" not in accept:
        return "json"
    return "text"


def explain_body(explanation: dict[str, Any], fmt: Format) -> tuple[bytes, str]:
    """The body and content type: the same JSON as ``recurrence explain --json``, or the same text."""
    if fmt == "json":
        return orjson.dumps(explanation), JSON
    return render(explanation).encode(), TEXT


def narrow(explanation: dict[str, Any], scope_id: str | None) -> dict[str, Any]:
    """Only what belongs to ``scope_id`` (when given): a revision's cards in that scope, or the record if it is
    that scope's (an unkeyed dead letter belongs to none and is always shown)."""
    if scope_id is None:
        return explanation
    if explanation["kind"] == "revision":
        cards = [card for card in explanation["cards"] if card["scope_id"] == scope_id]
        if not cards:
            raise NotFoundError(f"scope {echoed(scope_id)} holds no revision {echoed(explanation['id'])}")
        return {**explanation, "cards": cards}
    if explanation.get("scope_id") not in (None, scope_id):
        raise NotFoundError(f"{explanation['id']} is not a record of scope {echoed(scope_id)}")
    return explanation


def merge_revisions(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One revision explanation from several partitions' (each lists the scopes it holds)."""
    cards = sorted((card for part in parts for card in part["cards"]), key=lambda card: str(card["scope_id"]))
    return {**parts[0], "cards": cards}


def dead_letters_body(counts: Mapping[str, int]) -> dict[str, Any]:
    return {"total": sum(counts.values()), "by_code": dict(sorted(counts.items()))}


#: Dead letters one ``/dead-letters/{code}`` lists at most, by default, and each raw entry's characters shown.
MAX_LISTED: Final = 1000
DEFAULT_LISTED: Final = 100
RAW_SHOWN: Final = 2000


def parse_limit(query: Mapping[str, str]) -> int:
    raw = query.get("limit")
    if raw is None or raw == "":
        return DEFAULT_LISTED
    if not (raw.isascii() and raw.isdecimal() and len(raw) <= len(str(MAX_LISTED))) or not 1 <= int(raw) <= MAX_LISTED:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LISTED}")
    return int(raw)


def check_code(code: str) -> None:
    """A dead-letter code there can be (``deadletters.CODES``), or NotFoundError listing them."""
    if code not in CODES:
        raise NotFoundError(f"no dead-letter code {echoed(code)}; the codes are {', '.join(CODES)}")


def listed_dead_letter(record: Mapping[str, Any]) -> dict[str, Any]:
    """A dead-letter record as the listing shows it: everything but the raw entry past ``RAW_SHOWN``."""
    raw = str(record.get("raw", ""))
    return {
        "dead_letter_id": record["dead_letter_id"],
        "origin": record.get("origin") or {},
        "scope_id": record.get("scope_id"),
        "position": record.get("position"),
        "error": record["error"],
        "detail": record.get("detail", ""),
        "raw": raw[:RAW_SHOWN],
        "raw_cut": len(raw) > RAW_SHOWN,
    }


def dead_letter_listing(code: str, listed: list[dict[str, Any]], total: int, limit: int) -> dict[str, Any]:
    """``/dead-letters/{code}``'s body: the first ``limit`` of the code's ``total`` dead letters."""
    shown = listed[:limit]
    return {"code": code, "total": total, "dead_letters": shown, "more": max(0, total - len(shown))}


def patterns_body(rows: list[dict[str, Any]], min_scopes: int) -> dict[str, Any]:
    """Every pattern row (``recurrence patterns --all --json``), in ``patterns.listing`` order."""
    return {"available": True, "note": None, "min_scopes": min_scopes, "patterns": rows}


def ui_file(name: str) -> tuple[bytes, str] | None:
    content_type = UI_FILES.get(name)
    if content_type is None:
        return None
    return (UI_DIR / name).read_bytes(), content_type


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
