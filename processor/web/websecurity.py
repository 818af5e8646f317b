"""The web port's guard, for ``recurrence serve`` and the worker alike: token, headers, quiet refusals.

* **The token.** With a bearer token configured (``RECURRENCE_HTTP_TOKEN``, or
  a file named by ``--http-token-file``: a Kubernetes Secret mounted as a
  file), every path that returns data asks for ``Authorization: Bearer
  <token>`` and answers 401 without it. Public are only the routes the table
  marks so (``routes.Route.public``): the probes and the page's static shell,
  which hold no data. A path the table does not have is a 401 too while a
  token is configured (it says nothing about what exists), else a 404. The
  comparison is of the two tokens' SHA-256 digests with
  ``hmac.compare_digest``: its time depends on neither token's content nor
  length. Without a token the port is open, as before, and binds to
  127.0.0.1 by default; binding anything else without one prints a warning.
* **Headers.** Every response the application writes carries
  ``X-Content-Type-Options: nosniff``, a ``Content-Security-Policy`` that
  lets the page run its own script and style sheet only (no inline script,
  no other host, no framing), ``Referrer-Policy: no-referrer`` and
  ``X-Frame-Options: DENY``. (A request aiohttp cannot even parse is answered
  by aiohttp itself, a plain-text 400 that never reaches the application.)
* **Quiet refusals.** A refused or malformed request is answered (4xx, a
  JSON ``{"error": ...}``) and logs at most one line, and the same kind of
  line at most once per ``LOG_EVERY`` seconds with how many were left out:
  a client cannot fill the log. aiohttp's own protocol errors (a request line
  over ``MAX_LINE`` bytes, bytes that are not HTTP) go to a logger that
  writes them the same way, without a traceback. An unexpected exception in
  a handler is a 500 and one such line; its traceback only at debug level.
"""

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import orjson
from aiohttp import web

from ..host.printable import echoed, printable
from .httpapi import JSON, error_body
from .webtoken import TOKEN_ENV, Access

#: The longest request line (method, path and query) either server reads; longer is a 400 from aiohttp.
MAX_LINE: Final = 4096
#: The same log line (by kind) at most once per this many seconds.
LOG_EVERY: Final = 10.0

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
#: What a 401 says the client should send.
CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="recurrence"'}

log = logging.getLogger("recurrence.web")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost, or "" (every address)


def exposure_warning(host: str, access: Access) -> str | None:
    """The warning to print at start when the port is reachable from elsewhere with no token."""
    if access.required or is_loopback(host):
        return None
    return (
        f"warning: serving {host or 'every address'} without a token: anyone who reaches the port reads "
        f"statistics, explanations and lesson texts; set {TOKEN_ENV} or --http-token-file"
    )


class QuietLog:
    """Log lines by kind, each kind at most once per ``every`` seconds, with how many were left out."""

    def __init__(
        self, logger: logging.Logger, every: float = LOG_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger, self.every, self.clock = logger, every, clock
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: Any) -> bool:
        """Log the line unless a line of this kind went out less than ``every`` seconds ago; True if logged."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return False
        self._last[kind] = now
        left_out = self._left_out.pop(kind, 0)
        suffix = f" ({left_out} more like it in the last {self.every:g} s not logged)" if left_out else ""
        self.logger.warning(message + "%s", *(printable(str(a)) for a in args), suffix)
        return True


class _ProtocolErrors(logging.Filter):
    """aiohttp's "Error handling request" with a traceback, for a request it could not parse: one short line,
    rate-limited (the parser's message, which quotes the request, is not repeated)."""

    def __init__(self, quiet: QuietLog) -> None:
        super().__init__()
        self.quiet = quiet

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        reason = type(error).__name__ if error is not None else "error"
        status = getattr(error, "code", None) or getattr(error, "status", None) or ""
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        self.quiet.warning(
            f"protocol:{reason}", "refused a request from %s that is not valid HTTP: %s %s", remote, reason, status
        )
        return False  # the line above replaces it


#: One per process: both kinds of refusal share the budget of lines.
QUIET: Final = QuietLog(log)


def handler_args() -> dict[str, Any]:
    """aiohttp's protocol settings for both servers: the request line's limit, the quiet protocol logger."""
    logger = logging.getLogger("recurrence.web.protocol")
    if not any(isinstance(f, _ProtocolErrors) for f in logger.filters):
        logger.addFilter(_ProtocolErrors(QUIET))
    return {"max_line_size": MAX_LINE, "logger": logger}


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=error_body(message), status=status, content_type=JSON, headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Lookup = Callable[[Handler], Any]


def guard(access: Access, quiet: QuietLog, route_of: Lookup, paths: list[str]) -> Any:
    """The middleware: the token for every route that is not public, JSON refusals, no traceback per request.

    ``route_of`` gives the table's ``Route`` of a matched handler (None: not a table route); a path that is
    none of ``paths`` is a 404 that lists them (once the token, if any, was given)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = route_of(request.match_info.route.handler)
        public = route is not None and route.public
        if not public and not access.allows(request.headers.get("Authorization")):
            quiet.warning("unauthorized", "refused a request without a valid token from %s", request.remote or "?")
            return _error(401, "this server needs its token: send Authorization: Bearer <token>", CHALLENGE)
        if route is None:
            refusal = request.match_info.http_exception
            status = refusal.status if refusal is not None else 404
            if status == 405:
                allowed = refusal.headers.get("Allow", "GET") if refusal is not None else "GET"
                return _error(
                    405, f"method {printable(request.method)[:32]} is not served here; only GET", {"Allow": allowed}
                )
            return web.Response(
                body=orjson.dumps({"error": f"no such path: {echoed(request.path)}", "paths": paths}),
                status=404,
                content_type=JSON,
            )
        try:
            return await handler(request)
        except web.HTTPException:
            raise  # a redirect, or an answer aiohttp writes itself: still a response of the application
        except Exception as error:
            quiet.warning(f"failed:{route.documented}", "%s failed: %s", route.documented, type(error).__name__)
            log.debug("%s failed", route.documented, exc_info=True)
            return _error(500, f"internal error ({type(error).__name__}); see the server's log")

    return middleware


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the headers every response of the application carries."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers["Server"] = "recurrence"  # not aiohttp's and Python's versions
