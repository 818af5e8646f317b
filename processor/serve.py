"""``recurrence serve``: the read surface and the statistics page over an embedded state (no broker, no Faust).

The same paths and bodies as a worker (docs/web.md): ``/statistics``,
``/scopes/{scope_id}/statistics``, ``/explain/{id}`` (over the state and the
ledger and journal files, as ``recurrence explain``), ``/dead-letters``,
``/patterns``, the probes, ``/openapi.json`` and the page at ``/ui``. The
state may be one a replay is writing: ``serve`` follows it (``follow``), each
answer computed from one view of the state as of one committed batch, and
answers computed for a view are kept until the next one replaces it.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web

from .archive import FileArchive
from .embedded import bind_config, statistics
from .explain import Explainer, NotFoundError
from .follow import Follower, StateMark, follow, state_mark
from .httpapi import (
    JSON,
    dead_letters_body,
    error_body,
    explain_body,
    explain_format,
    narrow,
    parse_top,
    patterns_body,
    ui_file,
)
from .openapi import document
from .patterns import listing
from .recordindex import dead_letter_counts
from .state import State
from .store.base import StateStore, Transaction

log = logging.getLogger("recurrence.serve")

DEFAULT_PORT: Final = 6067
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type=JSON)


def _error(status: int, message: str) -> web.Response:
    return web.Response(body=error_body(message), status=status, content_type=JSON)


class EmbeddedReadSurface:
    """The read surface over one embedded state, its ledger and its journal; ``replace`` moves it to a
    newer view of the same state (what ``follow`` does while a replay writes)."""

    # Statistics bodies kept per view, for this many ``top`` values at most.
    CACHED: Final = 8

    def __init__(self, store: StateStore, ledger: Path | None = None, journal: Path | None = None,
                 mark: StateMark | None = None, following: bool = False) -> None:
        self._ledger, self._journal = ledger, journal
        self.following = following
        self.replace(store, state_mark(store) if mark is None else mark)

    def replace(self, store: StateStore, mark: StateMark) -> None:
        self.store = store
        self.mark = mark
        self.archive = FileArchive(store, self._ledger, self._journal)
        self.config = bind_config(store, None)
        self._statistics: dict[int, list[dict[str, Any]]] = {}
        self._dead_letters: dict[str, Any] | None = None
        self._patterns: dict[str, Any] | None = None

    def statistics(self, scope_id: str | None, top: int) -> list[dict[str, Any]]:
        if scope_id is not None:
            return statistics(self.store, scope_id, top)
        found = self._statistics.get(top)
        if found is None:
            if len(self._statistics) >= self.CACHED:
                self._statistics.clear()
            found = self._statistics[top] = statistics(self.store, None, top)
        return found

    def explain(self, identity: str, scope_id: str | None) -> dict[str, Any]:
        explainer = Explainer(State(Transaction(self.store)), self.archive)
        return narrow(explainer.explain(identity), scope_id)

    def dead_letters(self) -> dict[str, Any]:
        if self._dead_letters is None:
            self._dead_letters = dead_letters_body(dead_letter_counts(Transaction(self.store)))
        return self._dead_letters

    def patterns(self) -> dict[str, Any]:
        if self._patterns is None:
            rows = listing(Transaction(self.store), self.config.pattern_scopes, suggested_only=False)
            self._patterns = patterns_body(rows, self.config.pattern_scopes)
        return self._patterns

    def progress(self) -> dict[str, Any]:
        """How far the served view is (``/state``): from the state, never the server's clock."""
        return {"runner": "embedded", "following": self.following, **self.mark.body()}


def application(surface: EmbeddedReadSurface) -> web.Application:
    spec = document("embedded")

    async def all_statistics(request: web.Request) -> web.Response:
        try:
            top = parse_top(request.query)
        except ValueError as bad:
            return _error(400, str(bad))
        return _json(surface.statistics(None, top))

    async def scope_statistics(request: web.Request) -> web.Response:
        try:
            top = parse_top(request.query)
        except ValueError as bad:
            return _error(400, str(bad))
        found = surface.statistics(request.match_info["scope_id"], top)
        if not found:
            return _error(404, "no accepted entry for this scope")
        return _json(found[0])

    async def explain(request: web.Request) -> web.Response:
        try:
            fmt = explain_format(request.query, request.headers.get("Accept"))
        except ValueError as bad:
            return _error(400, str(bad))
        try:
            result = surface.explain(request.match_info["identity"], request.query.get("scope") or None)
        except NotFoundError as missing:
            return _error(404, str(missing))
        body, content_type = explain_body(result, fmt)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def dead_letters(request: web.Request) -> web.Response:
        return _json(surface.dead_letters())

    async def patterns(request: web.Request) -> web.Response:
        return _json(surface.patterns())

    async def probe(request: web.Request) -> web.Response:
        return _json({"status": "ok", "reasons": []})

    async def openapi(request: web.Request) -> web.Response:
        return _json(spec)

    async def ui(request: web.Request) -> web.StreamResponse:
        found = ui_file(request.match_info.get("name") or "index.html")
        if found is None:
            return _error(404, "no such file")
        body, content_type = found
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def root(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui")

    app = web.Application()
    routes: list[tuple[str, Handler]] = [
        ("/", root),
        ("/statistics", all_statistics),
        ("/scopes/{scope_id}/statistics", scope_statistics),
        ("/explain/{identity:[\\s\\S]+}", explain),
        ("/dead-letters", dead_letters),
        ("/patterns", patterns),
        ("/livez", probe),
        ("/readyz", probe),
        ("/health", probe),
        ("/openapi.json", openapi),
        ("/ui", ui),
        ("/ui/{name}", ui),
    ]
    for path, handler in routes:
        app.router.add_get(path, handler)
    return app


def serve(surface: EmbeddedReadSurface, host: str, port: int, follower: Follower | None = None) -> None:
    """Serve until SIGINT or SIGTERM; with a ``follower``, each new view of the state as it comes."""
    app = application(surface)
    if follower is not None:

        async def following(app: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(follow(follower, surface.replace))
            yield
            task.cancel()

        app.cleanup_ctx.append(following)
    print(f"recurrence serve: http://{host}:{port}/ui (Ctrl-C to stop)", flush=True)
    web.run_app(app, host=host, port=port, print=None, access_log=None)
