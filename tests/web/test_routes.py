"""One route table for both servers: what each serves is the table, and its /openapi.json lists exactly that.

The worker's port is Faust's aiohttp application; Faust mounts views of its
own there (``/``, ``/router/``, ``/table/...``). Built without a broker, the
worker's application must hold only the table's routes.
"""

from pathlib import Path

import pytest
from aiohttp import web

from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.processor.stream.worker.build import build_worker
from recurrence_ledger.processor.web.httpapi import Server
from recurrence_ledger.processor.web.openapi import document
from recurrence_ledger.processor.web.routes import ROUTE_KEY, Route, routes_of
from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application


def _served(app: web.Application) -> list[tuple[str, Route | None]]:
    """Every route of the application: its method, and the table's ``Route`` it serves (None: not the table's)."""
    return [(route.method, getattr(route.handler, ROUTE_KEY, None)) for route in app.router.routes()]


def test_the_worker_serves_the_route_table_and_none_of_fausts_views(tmp_path: Path) -> None:
    app = build_worker(StreamSettings(datadir=tmp_path, bootstrap_servers="127.0.0.1:1")).app
    app.web.init_server()  # where Faust mounts its blueprints
    assert _served(app.web.web_app) == [("GET", route) for route in routes_of("worker")]


def test_serve_serves_the_route_table() -> None:
    assert _served(application(EmbeddedReadSurface(MemoryStore()))) == [("GET", r) for r in routes_of("embedded")]


@pytest.mark.parametrize("server", ["worker", "embedded"])
def test_the_document_lists_exactly_the_table(server: Server) -> None:
    routes = [(r.documented, r.public) for r in routes_of(server)]
    assert list(document(server, routes)["paths"]) == [path for path, _ in routes]
    assert {"/metrics", "/progress"} <= set(document(server, routes)["paths"])


def test_the_worker_maps_refusals_as_serve_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record read back from a topic that is not the one indexed is a 409 on the worker too (the handlers
    are the table's; the worker's surface raises what the Explainer raises)."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from recurrence_ledger.processor.explain import ArchiveMismatchError
    from recurrence_ledger.processor.stream.worker.views import ReadSurface

    async def mismatch(self: ReadSurface, identity: str, scope_id: str | None, ask: object) -> dict[str, object]:
        raise ArchiveMismatchError("where the state indexed record x the ledger holds record y")

    monkeypatch.setattr(ReadSurface, "explain", mismatch)
    app = build_worker(StreamSettings(datadir=tmp_path, bootstrap_servers="127.0.0.1:1")).app

    async def ask() -> tuple[int, dict[str, str], dict[str, str]]:
        async with TestClient(TestServer(app.web.web_app)) as client:
            response = await client.get("/explain/sha256:" + "0" * 64)
            return response.status, await response.json(), dict(response.headers)

    status, body, headers = asyncio.run(ask())
    assert status == 409 and "where the state indexed record" in body["error"]
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
