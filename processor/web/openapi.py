"""``/openapi.json``: an OpenAPI 3.1 document of the read surface, response schemas from the pydantic models.

One generator for both servers; ``worker`` adds what only a worker has
(``/metrics``, the ``local`` fan-out parameter, 503 while a partition has no
ready owner). The schemas are the models' own JSON Schemas
(``models_json_schema``), so a model change changes the document, and the
tests run schemathesis against live servers with it.
"""

from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ... import __version__
from ...schemas.constants import DEFAULT_TOP_REVISIONS, MAX_SCOPE_ID_LENGTH
from ...schemas.readsurface import (
    ArtifactHistory,
    DeadLetterCounts,
    DeadLetterListing,
    ErrorBody,
    Explanation,
    PatternSuggestions,
    ProbeBody,
    Progress,
    RetirementSuggestions,
    ThresholdWhatIf,
    Trends,
)
from ...schemas.statistics import ScopeStatistics
from ..core.history import REPAIR_MIN_SELECTIONS
from ..core.retirement import MAX_RULE_THRESHOLD, RetirementRules
from ..core.trends import DEFAULT_TREND_WINDOW, MAX_TREND_WINDOW, MAX_TREND_WINDOWS
from ..core.whatif import MAX_THRESHOLD, MAX_THRESHOLDS
from .httpapi import DEFAULT_LISTED, MAX_LISTED, MAX_TOP, UI_FILES, Server

MODELS: Final[tuple[type[BaseModel], ...]] = (
    ScopeStatistics,
    Explanation,
    DeadLetterCounts,
    DeadLetterListing,
    PatternSuggestions,
    ThresholdWhatIf,
    ProbeBody,
    ErrorBody,
    Progress,
    ArtifactHistory,
    RetirementSuggestions,
    Trends,
)
_REF: Final = "#/components/schemas/{model}"


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref(ErrorBody), description)


def _text(description: str, media: str = "text/plain") -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": {"type": "string"}}}}


TOP: Final = {
    "name": "top",
    "in": "query",
    "required": False,
    "description": f"bound on top_revisions (default {DEFAULT_TOP_REVISIONS})",
    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_TOP},
}


_THRESHOLD: Final = f"({MAX_THRESHOLD}|[1-9][0-9]?)"
assert MAX_THRESHOLD == 100 and MAX_THRESHOLDS == 100, "the pattern below spells both limits"
THRESHOLDS: Final = {
    "name": "thresholds",
    "in": "query",
    "required": False,
    "description": f"review thresholds to compare, comma-separated, 1..{MAX_THRESHOLD}, at most {MAX_THRESHOLDS}, "
    "one row each in this order (default: 1..10 and two past the state's own threshold)",
    "schema": {"type": "string", "pattern": f"^{_THRESHOLD}(,{_THRESHOLD}){{0,{MAX_THRESHOLDS - 1}}}$"},
}


def _get(summary: str, responses: dict[str, Any], parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if parameters:
        operation["parameters"] = parameters
    return {"get": operation}


def document(server: Server, routes: Sequence[tuple[str, bool]], token: bool = False) -> dict[str, Any]:
    """The document of ``routes`` (each path as documented, and whether it is public), in their order.

    The paths are the server's route table (``routes.routes_of``): a route without an operation here is a
    KeyError, so the document cannot leave out a path the server answers. With ``token`` (the server has one)
    every operation but the public ones requires the bearer scheme and may answer 401."""
    worker = server == "worker"
    _, defs = models_json_schema([(m, "serialization") for m in MODELS], ref_template=_REF)
    unavailable = (
        {"503": _error("a partition has no ready owner here (rebalancing, restoring); retry")} if worker else {}
    )
    probe = {"200": _json(_ref(ProbeBody), "ok"), "503": _json(_ref(ProbeBody), "not ok, with the reasons")}
    # a worker's fan-out parameter (its own call to the other owners)
    local = (
        [
            {
                "name": "local",
                "in": "query",
                "required": False,
                "description": "1: only this worker's partitions (the fan-out's own call)",
                "schema": {"type": "string", "enum": ["0", "1"]},
            }
        ]
        if worker
        else []
    )
    statistics_params = [TOP, *local]
    scope_path = {
        "name": "scope_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SCOPE_ID_LENGTH, "pattern": "^[^/]+$"},
    }
    explain_params = [
        {
            "name": "id",
            "in": "path",
            "required": True,
            "description": "an observation_id, match_digest or dead_letter_id, or family/artifact_id@revision",
            "schema": {"type": "string", "minLength": 1},
        },
        {
            "name": "scope",
            "in": "query",
            "required": False,
            "description": "only this scope (a worker asks the scope's partition owner directly)",
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SCOPE_ID_LENGTH},
        },
        {
            "name": "format",
            "in": "query",
            "required": False,
            "description": "json or text (default: text, or JSON when Accept asks for it)",
            "schema": {"type": "string", "enum": ["json", "text"]},
        },
    ]

    def number(name: str, description: str, default: int, top: int = MAX_RULE_THRESHOLD) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "description": f"{description} (default {default})",
            "schema": {"type": "integer", "minimum": 1, "maximum": top},
        }

    stale = {
        "409": _error(
            "the state's yield marks do not cover its counters (built by a release before them): rebuild the state"
        )
    }
    rules = RetirementRules()
    operations: dict[str, Any] = {
        "/": {"get": {"summary": "the page (a redirect to /ui)", "responses": {"302": {"description": "to /ui"}}}},
        "/statistics": _get(
            "RecurrenceStatistics of every scope, ordered by scope_id",
            {
                "200": _json({"type": "array", "items": _ref(ScopeStatistics)}, "every scope"),
                "400": _error("bad parameter"),
                **unavailable,
            },
            statistics_params,
        ),
        "/scopes/{scope_id}/statistics": _get(
            "RecurrenceStatistics of one scope",
            {
                "200": _json(_ref(ScopeStatistics), "the scope"),
                "400": _error("bad parameter"),
                "404": _error("no accepted entry for this scope"),
                **unavailable,
            },
            [scope_path, TOP],
        ),
        "/explain/{id}": _get(
            "why was this counted? the evidence chain of a record, or a revision's yield card",
            {
                "200": {
                    "description": "the explanation",
                    "content": {
                        "application/json": {"schema": _ref(Explanation)},
                        "text/plain": {"schema": {"type": "string"}},
                    },
                },
                "400": _error("bad parameter"),
                "404": _error("no such record or revision"),
                "409": _error(
                    "what the state indexed is not what the ledger, topic or journal holds (replaced, "
                    "edited, cut): the state's files must be restored or the state rebuilt"
                ),
                **unavailable,
            },
            explain_params,
        ),
        "/dead-letters": _get(
            "distinct dead letters by code",
            {"200": _json(_ref(DeadLetterCounts), "counts"), **unavailable},
        ),
        "/dead-letters/{code}": _get(
            "the dead letters of one code in journal order (the raw entry cut to 2,000 characters): "
            "`/explain/{dead_letter_id}` opens one",
            {
                "200": _json(_ref(DeadLetterListing), "the first `limit`, and how many more"),
                "400": _error("bad parameter"),
                "404": _error("no such code"),
                "409": _error("the ledger or the topic holding the dead letters cannot be read"),
                **unavailable,
            },
            [
                {
                    "name": "code",
                    "in": "path",
                    "required": True,
                    "description": "a stable dead-letter code",
                    "schema": {"type": "string", "minLength": 1},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": f"at most this many (default {DEFAULT_LISTED})",
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LISTED},
                },
            ],
        ),
        "/patterns": _get(
            "cross-scope pattern rows (suggested and below the threshold), as `recurrence patterns --all --json`",
            {"200": _json(_ref(PatternSuggestions), "every pattern row, most scopes first"), **unavailable},
            local,
        ),
        "/progress": _get(
            "how far the served state is (journal checkpoint and commit time; a worker's partitions, lag and "
            "readiness), with an ETag: If-None-Match answers 304 while it has not moved",
            {
                "200": _json(_ref(Progress), "how far"),
                "304": {"description": "not moved since the tag given"},
                **unavailable,
            },
        ),
        "/tune": _get(
            "the review-threshold what-if of `recurrence tune --json` for the state served, from the shadow "
            "counters its replay kept (contract section 5)",
            {
                "200": _json(_ref(ThresholdWhatIf), "per threshold: the totals and every scope's counts"),
                "400": _error("bad parameter"),
                **unavailable,
            },
            [THRESHOLDS, *local],
        ),
        "/scopes/{scope_id}/history/{family}/{artifact_id}": _get(
            "an artifact's revisions in order: yield, streak, head positions, review proposals, and the repair "
            "effect of each revision that followed a proposal",
            {
                "200": _json(_ref(ArtifactHistory), "the history"),
                "400": _error("bad parameter"),
                "404": _error("no accepted entry for this scope, or no revision of the artifact in it"),
                **stale,
                **unavailable,
            },
            [
                scope_path,
                {"name": "family", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}},
                {"name": "artifact_id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}},
                number("min_selections", "selections each side of a repair needs", REPAIR_MIN_SELECTIONS),
            ],
        ),
        "/scopes/{scope_id}/suggestions": _get(
            "retirement suggestions for the scope's failure-bearing heads (suggestions only: nothing changes)",
            {
                "200": _json(_ref(RetirementSuggestions), "the suggestions, each with its rule and counts"),
                "400": _error("bad parameter"),
                "404": _error("no accepted entry for this scope"),
                **stale,
                **unavailable,
            },
            [
                scope_path,
                number("min_selected", "never_avoids: selections without an avoided", rules.min_selected),
                number(
                    "min_unselected_recurred",
                    "never_selected: recurrences without a selection",
                    rules.min_unselected_recurred,
                ),
                number("min_unknown", "unknown_binding: selections without a verdict", rules.min_unknown),
                number("unknown_percent", "unknown_binding: their share, percent", rules.unknown_percent, 100),
            ],
        ),
        "/scopes/{scope_id}/trends": _get(
            f"yield per window of journal positions, the scope's and each revision's (at most {MAX_TREND_WINDOWS} "
            "windows)",
            {
                "200": {
                    "description": "the trend",
                    "content": {
                        "application/json": {"schema": _ref(Trends)},
                        "text/csv": {"schema": {"type": "string"}},
                    },
                },
                "400": _error("bad parameter, or a window that makes too many windows"),
                "404": _error("no accepted entry for this scope"),
                **stale,
                **unavailable,
            },
            [
                scope_path,
                number("window", "positions per window", DEFAULT_TREND_WINDOW, MAX_TREND_WINDOW),
                {
                    "name": "format",
                    "in": "query",
                    "required": False,
                    "description": "json (default) or csv",
                    "schema": {"type": "string", "enum": ["json", "csv"]},
                },
            ],
        ),
        "/livez": _get("liveness probe", probe),
        "/readyz": _get("readiness probe", probe),
        "/health": _get("readiness probe (alias of /readyz)", probe),
        "/openapi.json": _get("this document", {"200": _json({"type": "object"}, "OpenAPI 3.1")}),
        "/ui": _get("the statistics page", {"200": _text("HTML", "text/html")}),
        "/ui/{name}": _get(
            "the page's script, style sheet and icon",
            {
                "200": {
                    "description": "the file",
                    "content": {
                        "text/javascript": {"schema": {"type": "string"}},
                        "text/css": {"schema": {"type": "string"}},
                        "image/vnd.microsoft.icon": {"schema": {"type": "string", "format": "binary"}},
                    },
                },
                "404": _error("no such file"),
            },
            [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "enum": sorted(name for name in UI_FILES if name != "index.html")},
                }
            ],
        ),
        "/favicon.ico": _get(
            "the page's icon",
            {
                "200": {
                    "description": "the icon",
                    "content": {"image/vnd.microsoft.icon": {"schema": {"type": "string", "format": "binary"}}},
                }
            },
        ),
        "/metrics": _get("Prometheus metrics", {"200": _text("the text exposition format")}),
    }
    paths = {path: operations[path] for path, _ in routes}
    if token:
        for path, public in routes:
            if public:
                paths[path]["get"]["security"] = []
            else:
                paths[path]["get"]["responses"]["401"] = _error("no valid bearer token (Authorization: Bearer ...)")
    spec: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "recurrence read surface" + (" (worker)" if worker else " (recurrence serve)"),
            "version": __version__,
            "description": "Statistics, explanations and probes of a recurrence state (docs/web.md).",
        },
        "paths": paths,
        "components": {"schemas": defs["$defs"]},
    }
    if token:
        spec["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        spec["security"] = [{"bearer": []}]
    return spec
