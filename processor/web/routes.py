"""The read surface's routes: one table, served by ``recurrence serve`` and by the worker alike.

Both servers are aiohttp applications (the worker's is the one Faust's web
driver holds), so one table of paths and small handlers serves both; what
differs is only the ``Surface`` behind them: one embedded state
(``serve.EmbeddedReadSurface``), or partitions spread over workers
(``stream.worker.views.ReadSurface``, which fans out and forwards). A handler
parses the request (``httpapi``), asks the surface, and turns its answer or
its exception into a response; it holds no logic of either server.

The table says, per path, whether it is ``public`` (served without the token:
the probes and the page's static shell, which hold no data) and which servers
have it; ``/openapi.json`` lists exactly the table's paths for its server
(``openapi.document``), and a server answers nothing else: any other path is
a 404 that lists the paths there are (``websecurity.guard``).

Conditional requests: ``/progress`` carries an entity tag (the state's mark on
``serve``, a digest of the body on a worker) and answers ``304`` to a request
whose ``If-None-Match`` names it, so the page can poll it every few seconds for
next to nothing; where the surface knows its state's version (``serve``), the
data paths carry a tag derived from it as well, and a ``Recurrence-State``
header: the ``/progress`` body of the view the answer was computed from.
"""

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal, Protocol, TypeVar

import orjson
from aiohttp import web

from ..core.trends import WindowTooSmallError
from ..core.whatif import parse_thresholds
from ..exceptions import UnusableError
from ..explain import NotFoundError
from ..repairloop import RepairQuery
from ..repairreport import trends_csv
from .httpapi import JSON, Server, error_body, explain_body, explain_format, parse_limit, parse_top, ui_file
from .openapi import document
from .websecurity import QUIET, add_security_headers, guard
from .webtoken import Access

BOTH: Final[frozenset[Server]] = frozenset({"worker", "embedded"})
#: On ``serve``, a data answer's header naming the view it was computed from (its ``/progress`` body): the
#: page draws its "as of" header from it, so the header and the numbers come from one read.
STATE_HEADER: Final = "Recurrence-State"


@dataclass(frozen=True)
class Ask:
    """How a request was asked: a worker's own fan-out call (``local``) or a forwarded one (``forwarded``).

    Only a worker reads them; ``serve`` has one state and ignores both."""

    local: bool = False
    forwarded: bool = False

    @classmethod
    def of(cls, query: Mapping[str, str]) -> "Ask":
        return cls(local=query.get("local") == "1", forwarded=query.get("forwarded") == "1")


class Unavailable(Exception):  # noqa: N818 - an answer (503), not a bug
    """The answer cannot be given complete right now (a partition without a ready owner, a silent peer): 503."""


class Relayed(Exception):  # noqa: N818 - an answer, not a failure
    """Another worker answered the forwarded request: its status and body are the answer."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"relayed {status}")
        self.status, self.body = status, body


@dataclass(frozen=True)
class Probe:
    ok: bool
    body: dict[str, Any]


class Surface(Protocol):
    """What a server reads. Each method answers, or raises NotFoundError (404), Unavailable (503) or Relayed."""

    server: Server

    async def statistics(self, top: int, ask: Ask) -> list[dict[str, Any]]: ...

    async def scope_statistics(self, scope_id: str, top: int, ask: Ask) -> dict[str, Any]: ...

    async def explain(self, identity: str, scope_id: str | None, ask: Ask) -> dict[str, Any]: ...

    async def dead_letters(self, ask: Ask) -> dict[str, Any]: ...

    async def dead_letter_list(self, code: str, limit: int, ask: Ask) -> dict[str, Any]:
        """The dead letters of one code in journal order (``/dead-letters/{code}``), at most ``limit``."""

    async def patterns(self, ask: Ask) -> dict[str, Any]: ...

    async def progress(self, ask: Ask) -> dict[str, Any]:
        """How far the served state is (``/progress``)."""

    def version(self) -> str | None:
        """An entity tag of the state as served (changes with every commit), or None when there is none."""

    async def tune(self, thresholds: list[int] | None, ask: Ask) -> dict[str, Any]:
        """The threshold what-if of the state served (None: the page's default thresholds)."""

    async def repair_loop(self, scope_id: str, query: RepairQuery, ask: Ask) -> dict[str, Any]:
        """One scope's history, retirement suggestions or trends (``repairloop.answer``)."""

    def check(self, kind: Literal["live", "ready"]) -> Probe:
        """A probe's answer."""

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text and its content type."""


Handler = Callable[[web.Request, Surface], Awaitable[web.StreamResponse]]


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type=JSON)


#: The longest error message a response carries (each echoed id is already cut to ``printable.ECHO_LIMIT``).
MAX_ERROR: Final = 800


def error_response(status: int, message: str) -> web.Response:
    headers = {"Retry-After": "1"} if status == 503 else None
    shown = message if len(message) <= MAX_ERROR else message[:MAX_ERROR] + "…"
    return web.Response(body=error_body(shown), status=status, content_type=JSON, headers=headers)


_T = TypeVar("_T")


class _BadRequestError(Exception):
    """A request's query or path refused before any work is done: a 400 (``install`` answers it)."""


def _parsed(parse: Callable[[], _T], label: str = "") -> _T:
    """What ``parse`` reads from the request; its ValueError as a 400 whose message starts with ``label``."""
    try:
        return parse()
    except ValueError as bad:
        raise _BadRequestError(f"{label}{bad}") from bad


async def _answer(work: Awaitable[Any], respond: Callable[[Any], web.StreamResponse]) -> web.StreamResponse:
    """The surface's answer as a response; its refusals as their status codes."""
    try:
        return respond(await work)
    except NotFoundError as missing:
        return error_response(404, str(missing))
    except UnusableError as unusable:
        # What the state points at is not what it wrote (a ledger, topic or journal replaced, edited, cut;
        # a file swapped for a device): the CLI's exit 2, as a conflict with the state.
        return error_response(409, str(unusable))
    except Unavailable as unavailable:
        return error_response(503, str(unavailable))
    except WindowTooSmallError as small:
        return error_response(400, f"window: {small}")
    except Relayed as relayed:
        return json_response(relayed.body, relayed.status)


def _tag(version: str, request: web.Request) -> str:
    """The entity tag of this request's answer from this version of the state."""
    return f'"{hashlib.sha256(f"{version} {request.path_qs}".encode()).hexdigest()[:32]}"'


def _matches(request: web.Request, tag: str) -> bool:
    wanted = request.headers.get("If-None-Match", "")
    return any(candidate.strip().removeprefix("W/") in (tag, "*") for candidate in wanted.split(","))


def _not_modified(tag: str) -> web.Response:
    return web.Response(status=304, headers={"ETag": tag, "Cache-Control": "no-cache"})


def _tagged(response: web.StreamResponse, tag: str) -> web.StreamResponse:
    response.headers["ETag"] = tag
    response.headers["Cache-Control"] = "no-cache"
    return response


async def _conditional(
    request: web.Request, surface: Surface, work: Callable[[], Awaitable[Any]]
) -> web.StreamResponse:
    """``_answer``, tagged with the state's version when the surface knows it (304 when the client has it)."""
    version = surface.version()
    if version is None:
        return await _answer(work(), json_response)
    tag = _tag(version, request)
    if _matches(request, tag):
        return _not_modified(tag)
    as_of = orjson.dumps(await surface.progress(Ask())).decode("ascii")

    def respond(value: Any) -> web.StreamResponse:
        response = _tagged(json_response(value), tag)
        if surface.version() == version:  # no newer view replaced the one the body was computed from
            response.headers[STATE_HEADER] = as_of
        return response

    return await _answer(work(), respond)


async def statistics(request: web.Request, surface: Surface) -> web.StreamResponse:
    top = _parsed(lambda: parse_top(request.query))
    return await _conditional(request, surface, lambda: surface.statistics(top, Ask.of(request.query)))


async def scope_statistics(request: web.Request, surface: Surface) -> web.StreamResponse:
    top = _parsed(lambda: parse_top(request.query))
    scope_id = request.match_info["scope_id"]
    return await _answer(surface.scope_statistics(scope_id, top, Ask.of(request.query)), json_response)


async def explain(request: web.Request, surface: Surface) -> web.StreamResponse:
    query = request.query
    ask = Ask.of(query)
    fmt = "json" if ask.local else _parsed(lambda: explain_format(query, request.headers.get("Accept")))

    def respond(result: dict[str, Any]) -> web.Response:
        body, content_type = explain_body(result, fmt)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def work() -> dict[str, Any]:
        try:
            return await surface.explain(request.match_info["identity"], query.get("scope") or None, ask)
        except Relayed as relayed:
            # The scope's owner answered (asked for JSON): rendered here in the format this client asked for.
            if relayed.status == 200 and isinstance(relayed.body, dict):
                return relayed.body
            raise

    return await _answer(work(), respond)


async def dead_letters(request: web.Request, surface: Surface) -> web.StreamResponse:
    return await _conditional(request, surface, lambda: surface.dead_letters(Ask.of(request.query)))


async def dead_letter_list(request: web.Request, surface: Surface) -> web.StreamResponse:
    limit = _parsed(lambda: parse_limit(request.query))
    code = request.match_info["code"]
    return await _conditional(request, surface, lambda: surface.dead_letter_list(code, limit, Ask.of(request.query)))


async def patterns(request: web.Request, surface: Surface) -> web.StreamResponse:
    return await _conditional(request, surface, lambda: surface.patterns(Ask.of(request.query)))


async def progress(request: web.Request, surface: Surface) -> web.StreamResponse:
    """How far the state is; tagged with its version, or with a digest of the body where it has none."""
    try:
        body = await surface.progress(Ask.of(request.query))
    except Unavailable as unavailable:
        return error_response(503, str(unavailable))
    except WindowTooSmallError as small:
        return error_response(400, f"window: {small}")
    raw = orjson.dumps(body)
    version = surface.version()
    tag = _tag(version, request) if version is not None else f'"{hashlib.sha256(raw).hexdigest()[:32]}"'
    if _matches(request, tag):
        return _not_modified(tag)
    return _tagged(web.Response(body=raw, content_type=JSON), tag)


async def tune(request: web.Request, surface: Surface) -> web.StreamResponse:
    raw = request.query.get("thresholds")
    thresholds = _parsed(lambda: parse_thresholds(raw), "thresholds: ") if raw else None
    return await _answer(surface.tune(thresholds, Ask.of(request.query)), json_response)


def _repair_loop(kind: str) -> Handler:
    async def handle(request: web.Request, surface: Surface) -> web.StreamResponse:
        query = _parsed(lambda: RepairQuery.of(kind, request.match_info.get("artifact"), request.query))
        scope_id = request.match_info["scope_id"]

        def respond(body: dict[str, Any]) -> web.StreamResponse:
            if query.csv:
                return web.Response(body=trends_csv([body]).encode(), headers={"Content-Type": "text/csv"})
            return json_response(body)

        async def work() -> dict[str, Any]:
            try:
                return await surface.repair_loop(scope_id, query, Ask.of(request.query))
            except Relayed as relayed:
                # The owner answered in JSON; rendered here in the format this client asked for.
                if relayed.status == 200 and isinstance(relayed.body, dict):
                    return relayed.body
                raise

        return await _answer(work(), respond)

    return handle


def _probe(kind: Literal["live", "ready"]) -> Handler:
    async def probe(request: web.Request, surface: Surface) -> web.StreamResponse:
        result = surface.check(kind)
        return json_response(result.body, 200 if result.ok else 503)

    return probe


async def metrics(request: web.Request, surface: Surface) -> web.StreamResponse:
    body, content_type = surface.exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


@cache
def _document(server: Server, token: bool) -> bytes:
    return orjson.dumps(document(server, [(route.documented, route.public) for route in routes_of(server)], token))


async def openapi(request: web.Request, surface: Surface) -> web.StreamResponse:
    return web.Response(body=_document(surface.server, request.app[ACCESS].required), content_type=JSON)


def _page_file(name: str | None) -> web.StreamResponse:
    found = ui_file(name or "index.html")
    if found is None:
        return error_response(404, "no such file")
    body, content_type = found
    return web.Response(body=body, headers={"Content-Type": content_type})


async def ui(request: web.Request, surface: Surface) -> web.StreamResponse:
    return _page_file(request.match_info.get("name"))


async def favicon(request: web.Request, surface: Surface) -> web.StreamResponse:
    # Where every browser asks for a tab's icon: a 404 there is a line in its console on each visit.
    return _page_file("favicon.ico")


async def root(request: web.Request, surface: Surface) -> web.StreamResponse:
    raise web.HTTPFound("/ui")


@dataclass(frozen=True)
class Route:
    """One path of the read surface."""

    pattern: str  # as aiohttp's router matches it
    documented: str  # as /openapi.json names it
    handler: Handler
    public: bool = False  # served without the token: holds no data (the probes, the page's static shell)
    servers: frozenset[Server] = BOTH


ROUTES: Final[tuple[Route, ...]] = (
    Route("/", "/", root, public=True),
    Route("/statistics", "/statistics", statistics),
    Route("/scopes/{scope_id}/statistics", "/scopes/{scope_id}/statistics", scope_statistics),
    # ``{id}`` may hold a raw ``/`` (family/artifact_id@revision)
    Route("/explain/{identity:[\\s\\S]+}", "/explain/{id}", explain),
    Route("/dead-letters", "/dead-letters", dead_letters),
    Route("/dead-letters/{code}", "/dead-letters/{code}", dead_letter_list),
    Route("/patterns", "/patterns", patterns),
    Route("/progress", "/progress", progress),
    Route("/tune", "/tune", tune),
    Route(
        "/scopes/{scope_id}/history/{artifact:[\\s\\S]+}",
        "/scopes/{scope_id}/history/{family}/{artifact_id}",
        _repair_loop("history"),
    ),
    Route("/scopes/{scope_id}/suggestions", "/scopes/{scope_id}/suggestions", _repair_loop("suggestions")),
    Route("/scopes/{scope_id}/trends", "/scopes/{scope_id}/trends", _repair_loop("trends")),
    Route("/livez", "/livez", _probe("live"), public=True),
    Route("/readyz", "/readyz", _probe("ready"), public=True),
    Route("/health", "/health", _probe("ready"), public=True),
    Route("/metrics", "/metrics", metrics),
    Route("/openapi.json", "/openapi.json", openapi),
    Route("/ui", "/ui", ui, public=True),
    Route("/ui/{name}", "/ui/{name}", ui, public=True),
    Route("/favicon.ico", "/favicon.ico", favicon, public=True),
)


def routes_of(server: Server) -> tuple[Route, ...]:
    return tuple(route for route in ROUTES if server in route.servers)


ROUTE_KEY: Final = "recurrence_route"
#: The application's ``Access`` (its document says whether a token is asked for).
ACCESS: Final = web.AppKey("recurrence_access", Access)


def route_of(handler: Any) -> Route | None:
    """The table's route an aiohttp handler serves; None for any other (aiohttp's 404 and 405, Faust's)."""
    route = getattr(handler, ROUTE_KEY, None)
    return route if isinstance(route, Route) else None


def install(app: web.Application, surface: Surface, access: Access) -> None:
    """Serve the table on ``app``: its routes (each aiohttp handler knows its ``Route``), the guard in front of
    them, the security headers on every response (``websecurity``)."""
    app[ACCESS] = access
    app.middlewares.append(guard(access, QUIET, route_of, [route.documented for route in routes_of(surface.server)]))
    app.on_response_prepare.append(add_security_headers)
    for route in routes_of(surface.server):

        def bound(route: Route = route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
            async def handle(request: web.Request) -> web.StreamResponse:
                try:
                    return await route.handler(request, surface)
                except _BadRequestError as bad:
                    return error_response(400, str(bad))

            setattr(handle, ROUTE_KEY, route)
            return handle

        app.router.add_get(route.pattern, bound(), allow_head=False)
