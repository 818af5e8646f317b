"""``recurrence serve``: the read surface and the statistics page over an embedded state (no broker, no Faust).

The same paths and bodies as a worker (docs/web.md): ``/statistics``,
``/scopes/{scope_id}/statistics``, ``/explain/{id}`` (over the state and the
ledger and journal files, as ``recurrence explain``), ``/dead-letters``,
``/patterns``, the probes, ``/openapi.json`` and the page at ``/ui``. The
state is opened read-only, so it is the state as of the server's start: run
``serve`` again after a replay to see what it added.
"""

import logging
import sys
from typing import Any, Final, Literal

from aiohttp import web

from .archive import FileArchive
from .embedded import bind_config, statistics
from .explain import Explainer, NotFoundError
from .httpapi import Server, dead_letters_body, narrow, patterns_body
from .patterns import listing
from .recordindex import dead_letter_counts
from .routes import Ask, Probe, install
from .state import State
from .store.base import StateStore, Transaction
from .websecurity import exposure_warning, handler_args
from .webtoken import Access

log = logging.getLogger("recurrence.serve")

DEFAULT_PORT: Final = 6067


class EmbeddedReadSurface:
    """The read surface over one embedded state directory, its ledger and its journal."""

    server: Server = "embedded"

    def __init__(self, store: StateStore, archive: FileArchive | None = None) -> None:
        self.store = store
        self.archive = archive or FileArchive(store)
        self.config = bind_config(store, None)

    async def statistics(self, top: int, ask: Ask) -> list[dict[str, Any]]:
        return statistics(self.store, None, top)

    async def scope_statistics(self, scope_id: str, top: int, ask: Ask) -> dict[str, Any]:
        found = statistics(self.store, scope_id, top)
        if not found:
            raise NotFoundError("no accepted entry for this scope")
        return found[0]

    async def explain(self, identity: str, scope_id: str | None, ask: Ask) -> dict[str, Any]:
        explainer = Explainer(State(Transaction(self.store)), self.archive)
        return narrow(explainer.explain(identity), scope_id)

    async def dead_letters(self, ask: Ask) -> dict[str, Any]:
        return dead_letters_body(dead_letter_counts(Transaction(self.store)))

    async def patterns(self, ask: Ask) -> dict[str, Any]:
        rows = listing(Transaction(self.store), self.config.pattern_scopes, suggested_only=False)
        return patterns_body(rows, self.config.pattern_scopes)

    def check(self, kind: Literal["live", "ready"]) -> Probe:
        return Probe(True, {"status": "ok", "reasons": []})

    def exposition(self) -> tuple[bytes, str]:
        raise NotFoundError("serve has no metrics")  # not in its route table: never asked


def application(surface: EmbeddedReadSurface, access: Access | None = None) -> web.Application:
    app = web.Application(handler_args=handler_args())
    install(app, surface, access or Access())
    return app


def serve(surface: EmbeddedReadSurface, host: str, port: int, access: Access) -> None:
    """Serve until SIGINT or SIGTERM."""
    warning = exposure_warning(host, access)
    if warning is not None:
        print(f"recurrence serve: {warning}", file=sys.stderr, flush=True)
    fragment = "#token=…" if access.required else ""
    print(f"recurrence serve: http://{host}:{port}/ui{fragment} (Ctrl-C to stop)", flush=True)
    web.run_app(application(surface, access), host=host, port=port, print=None, access_log=None)
