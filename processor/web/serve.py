"""``recurrence serve``: the read surface and the statistics page over an embedded state (no broker, no Faust).

The same paths and bodies as a worker (docs/web.md): ``/statistics``,
``/scopes/{scope_id}/statistics``, ``/explain/{id}`` (over the state and the
ledger and journal files, as ``recurrence explain``), ``/dead-letters``,
``/patterns``, ``/tune``, ``/progress``, ``/metrics``, the probes,
``/openapi.json`` and the page at ``/ui``. The state may be one a replay is
writing: ``serve`` follows it (``follow``), each answer computed from one view
of the state as of one committed batch, and answers computed for a view are
kept until the next one replaces it.
"""

import asyncio
import errno
import ipaddress
import logging
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final, Literal

from aiohttp import web

from ..core.patterns import listing
from ..core.recordindex import dead_letter_counts
from ..core.state import State
from ..core.whatif import chart_thresholds, rows, scope_shadows, served
from ..embedded.archive import FileArchive
from ..embedded.deadletterscan import DeadLetterScan
from ..embedded.header import state_config
from ..embedded.reading import statistics
from ..exceptions import UnusableError
from ..explain import Explainer, NotFoundError
from ..repairloop import RepairQuery, answer
from ..store.base import StateStore, Transaction
from .follow import MIN_PACE, Follower, StateMark, follow, state_mark
from .httpapi import (
    Server,
    check_code,
    dead_letter_listing,
    dead_letters_body,
    listed_dead_letter,
    narrow,
    patterns_body,
)
from .routes import Ask, Probe, install
from .servemetrics import CONTENT_TYPE, StateReadings, registry, render
from .websecurity import exposure_warning, handler_args
from .webtoken import TOKEN_ENV, Access

log = logging.getLogger("recurrence.serve")

# While a replay writes, a new view of the state at most every PACE_FACTOR times the CPU the server spent
# since the last one (every answer computed for it, the page's included): serving a page that follows a
# replay takes at most about 1 / (1 + PACE_FACTOR) of a core from the writer.
PACE_FACTOR: Final = 4.0


class EmbeddedReadSurface:
    """The read surface over one embedded state, its ledger and its journal; ``replace`` moves it to a
    newer view of the same state (what ``follow`` does while a replay writes)."""

    server: Server = "embedded"
    # Statistics bodies kept per view, for this many ``top`` values at most.
    CACHED: Final = 8

    def __init__(
        self,
        store: StateStore,
        ledger: Path | None = None,
        journal: Path | None = None,
        mark: StateMark | None = None,
        following: bool = False,
    ) -> None:
        self._ledger, self._journal = ledger, journal
        self.following = following
        self.problem: str | None = None  # why the view served is not the state at the path (``follow``)
        self.views = 0
        # Dead letters by code from the ledger, read as far as the last listing asked (kept across views).
        self._scan = DeadLetterScan()
        self._scan_lock = asyncio.Lock()
        self.replace(store, state_mark(store) if mark is None else mark)
        self._metrics = registry(
            StateReadings(
                lambda: self.mark, self._dead_letter_counts, lambda: self._statistics_for(0), lambda: self.views
            )
        )

    def replace(self, store: StateStore, mark: StateMark) -> None:
        self.store = store
        self.mark = mark
        self.archive = FileArchive(store, self._ledger, self._journal)
        self.config = state_config(store)
        self.views += 1
        self._cpu_at_view = time.process_time()
        self._statistics: dict[int, list[dict[str, Any]]] = {}
        self._dead_letters: dict[str, int] | None = None
        self._patterns: dict[str, Any] | None = None

    def pace(self) -> float:
        """Seconds before the next view while the state keeps changing (``follow``): the CPU this process
        spent since the view was installed (answers, the page's requests, everything), times PACE_FACTOR."""
        return max(MIN_PACE, PACE_FACTOR * (time.process_time() - self._cpu_at_view))

    def _statistics_for(self, top: int) -> list[dict[str, Any]]:
        found = self._statistics.get(top)
        if found is None:
            if len(self._statistics) >= self.CACHED:
                self._statistics.clear()
            found = self._statistics[top] = statistics(self.store, None, top)
        return found

    def _dead_letter_counts(self) -> dict[str, int]:
        if self._dead_letters is None:
            self._dead_letters = dead_letter_counts(Transaction(self.store))
        return self._dead_letters

    async def statistics(self, top: int, ask: Ask) -> list[dict[str, Any]]:
        return self._statistics_for(top)

    async def scope_statistics(self, scope_id: str, top: int, ask: Ask) -> dict[str, Any]:
        found = statistics(self.store, scope_id, top)
        if not found:
            raise NotFoundError("no accepted entry for this scope")
        return found[0]

    async def explain(self, identity: str, scope_id: str | None, ask: Ask) -> dict[str, Any]:
        explainer = Explainer(State(Transaction(self.store)), self.archive)
        return narrow(explainer.explain(identity), scope_id)

    async def dead_letters(self, ask: Ask) -> dict[str, Any]:
        return dead_letters_body(self._dead_letter_counts())

    async def dead_letter_list(self, code: str, limit: int, ask: Ask) -> dict[str, Any]:
        check_code(code)
        # Read off the event loop (a first scan of a large ledger takes a while); one scan at a time.
        async with self._scan_lock:
            ledger, length = self.archive.ledger, self.mark.ledger_bytes
            await asyncio.get_running_loop().run_in_executor(
                None, self._scan.update, ledger, length, listed_dead_letter
            )
        return dead_letter_listing(code, self._scan.kept.get(code, []), self._scan.counts.get(code, 0), limit)

    async def patterns(self, ask: Ask) -> dict[str, Any]:
        if self._patterns is None:
            rows = listing(Transaction(self.store), self.config.pattern_scopes, suggested_only=False)
            self._patterns = patterns_body(rows, self.config.pattern_scopes)
        return self._patterns

    def set_problem(self, problem: str | None) -> None:
        self.problem = problem

    def _readiness(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.problem is None else "not ready",
            "reasons": [] if self.problem is None else [self.problem],
        }

    async def progress(self, ask: Ask) -> dict[str, Any]:
        """How far the served view is: from the state, never the server's clock; and whether it is still
        the state at the path (``status`` and ``reasons`` as ``/readyz``)."""
        return {"runner": "embedded", "following": self.following, **self.mark.body(), **self._readiness()}

    def version(self) -> str:
        # A state gone (or back) changes /progress without a commit: the tag says so.
        return self.mark.etag if self.problem is None else self.mark.etag[:-1] + '-not-ready"'

    async def tune(self, thresholds: list[int] | None, ask: Ask) -> dict[str, Any]:
        scopes, incomplete = scope_shadows(State(Transaction(self.store)))
        configured = self.config.review_threshold
        return served(configured, incomplete, rows(scopes, thresholds or chart_thresholds(configured)))

    async def repair_loop(self, scope_id: str, query: RepairQuery, ask: Ask) -> dict[str, Any]:
        return answer(State(Transaction(self.store)), scope_id, query, self.config.review_threshold)

    def check(self, kind: Literal["live", "ready"]) -> Probe:
        if kind == "live":
            return Probe(True, {"status": "ok", "reasons": []})
        return Probe(self.problem is None, self._readiness())

    def exposition(self) -> tuple[bytes, str]:
        return render(self._metrics), CONTENT_TYPE


def application(surface: EmbeddedReadSurface, access: Access | None = None) -> web.Application:
    app = web.Application(handler_args=handler_args())
    install(app, surface, access or Access())
    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything is printed: a port that is taken is one line (exit 2),
    never a URL followed by aiohttp's error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise UnusableError(f"--host {host!r} is not an address of this machine ({error.strerror})") from None
    sock = socket.socket(family, kind, proto)
    # As aiohttp sets it: a port still in TIME_WAIT after the last serve stopped is not a taken one.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        why = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be bound ({error.strerror})"
        raise UnusableError(
            f"port {host}:{port} {why}; choose another --port, or stop the process holding it"
        ) from None
    return sock


def _unspecified(host: str) -> bool:
    if not host:
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def page_url(host: str, port: int) -> str:
    """The page's address as a browser opens it: a loopback address for a wildcard bind (browsers refuse
    0.0.0.0), brackets around an IPv6 address."""
    shown = host
    if _unspecified(host):
        shown = "::1" if ":" in host else "127.0.0.1"
    return f"http://[{shown}]:{port}/ui" if ":" in shown else f"http://{shown}:{port}/ui"


def serve(
    surface: EmbeddedReadSurface,
    host: str,
    port: int,
    access: Access,
    follower: Follower | None = None,
    token_source: str = f"the value of {TOKEN_ENV}",
) -> None:
    """Serve until SIGINT or SIGTERM; with a ``follower``, each new view of the state as it comes.

    The page's URL is printed once the port listens (the port bound: ``--port 0`` picks one). With a token
    it never carries the token (stdout ends up in logs and in scrollback): a second line says where the
    page takes it from."""
    app = application(surface, access)
    if follower is not None:

        async def following(app: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(
                follow(follower, surface.replace, pace=surface.pace, troubled=surface.set_problem)
            )
            yield
            task.cancel()

        app.cleanup_ctx.append(following)
    sock = listening_socket(host, port)
    warning = exposure_warning(host, access)
    if warning is not None:
        print(f"recurrence serve: {warning}", file=sys.stderr, flush=True)
    bound = int(sock.getsockname()[1])
    url = page_url(host, bound)
    where = f"listening on every address, port {bound}; " if _unspecified(host) else ""
    lines = [f"recurrence serve: {url} ({where}Ctrl-C to stop)"]
    if access.required:
        lines.append(
            f"recurrence serve: the page asks once per tab for the access token ({token_source}); "
            f"to skip the question, open {url}#token=<token>"
        )

    def announce(_: str) -> None:  # aiohttp calls it once the socket listens
        print("\n".join(lines), flush=True)

    web.run_app(app, sock=sock, print=announce, access_log=None)
