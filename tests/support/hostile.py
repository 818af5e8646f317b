"""Hostile requests and the checks both servers must pass (``recurrence serve`` and a worker, issue 26).

Each server is asked as a stranger would: without the token, with a wrong
one, with requests that are not HTTP, too long, for paths that do not exist,
with methods it does not serve, with ids that cannot exist. The checks are
the same for both servers; only how a server is started differs.
"""

import http.client
import socket
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

# What issue 26 asks every response to carry (spelled out here, not imported: the test says what is wanted).
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
TOKEN = "t0ken-for-tests-0123456789abcdef"
WRONG = "t0ken-for-tests-0123456789abcdeX"  # as long, one character off

# Requests that are not valid HTTP or are over the request line's limit: aiohttp refuses them itself.
NOT_HTTP = [
    b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /explain/\x1b[31m HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03hello\r\n\r\n",  # TLS to a plain HTTP port
    b"GET /statistics HTTP/1.1\r\nHost: x\r\nX-Long: " + b"b" * 10000 + b"\r\n\r\n",
    b"BREW /statistics HTCPCP/1.0\r\n\r\n",
]

# Paths a stranger tries: ids that cannot exist, encodings, traversal, Faust's own views, odd queries.
HOSTILE_PATHS = [
    "/explain/" + "a" * 3000,
    "/explain/experience%2FE7@18446744073709551616",
    "/explain/experience%2FE7@9223372036854775808",
    "/explain/experience%2FE7@0",
    "/explain/experience%2FE7@%C2%B2",
    "/explain/x%2Fy@" + "9" * 3000,
    "/explain/" + "%1b%5b31m" * 50,
    "/explain/%1b%5d0%3bpwned%07",
    "/explain/%ff%fe%00",
    "/explain/sha256:" + "0" * 64,
    "/explain/sha256:" + "0" * 64 + "?format=yaml",
    "/explain/" + "x/" * 500 + "y@1",
    "/scopes/%00/statistics",
    "/scopes/" + "s" * 3000 + "/statistics",
    "/scopes/%1b%5b31m/statistics?top=1",
    "/statistics?top=-1",
    "/statistics?top=1e9",
    "/statistics?top=" + "9" * 400,
    "/statistics?local=1&forwarded=1&top=0",
    "/ui/..%2f..%2fetc%2fpasswd",
    "/ui/app.js%00",
    "/ui/index.html",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/router/",
    "/table/recurrence-state/",
    "/graph",
    "/stats/",
    "//statistics",
    "/statistics/",
    "/explain/",
    "/openapi.json?" + "x=%00&" * 100,
]
METHODS = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE"]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def request(
    url: str, path: str, token: str | None = None, method: str = "GET", authorization: str | None = None
) -> Answer:
    """One request, any method, the path sent as given (no normalisation)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=20)
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if authorization is not None:
        headers["Authorization"] = authorization
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
    finally:
        connection.close()


def raw(url: str, data: bytes) -> bytes:
    """Bytes sent as they are; the status line of the answer (empty if the server just closed)."""
    parsed = urllib.parse.urlsplit(url)
    with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 80), timeout=20) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return received.split(b"\r\n", 1)[0]


def concrete(path: str, values: dict[str, str]) -> str:
    """A documented path with its parameters filled in."""
    for name, value in values.items():
        path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
    return path


def assert_secured(answer: Answer, what: str) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert answer.headers.get(name.lower()) == value, f"{what}: {name} is {answer.headers.get(name.lower())!r}"
    policy = answer.headers["content-security-policy"]
    assert "'unsafe-inline'" not in policy and "script-src 'self'" in policy
    assert "aiohttp" not in answer.headers.get("server", "") and "Python" not in answer.headers.get("server", "")


#: A value for each path parameter of the documented paths, on the worked example's state.
PATH_VALUES = {
    "scope_id": "rfc-minimum",
    "id": "experience/E7@1",
    "name": "app.js",
    "code": "invalid_json",
    "family": "experience",
    "artifact_id": "E7",
}

PUBLIC = {"/", "/livez", "/readyz", "/health", "/ui", "/ui/{name}", "/favicon.ico"}


def check_token_guard(url: str, documented: Iterable[str], values: dict[str, str]) -> list[str]:
    """Every documented data path refuses a request without the token, or with a wrong one (401, JSON, a
    challenge) and answers with it; the probes and the page's shell answer without it. The paths asked."""
    asked = []
    for documented_path in documented:
        path = concrete(documented_path, values)
        asked.append(path)
        anonymous = request(url, path)
        assert_secured(anonymous, f"GET {path} without a token")
        if documented_path in PUBLIC:
            assert anonymous.status in (200, 302), (path, anonymous.status, anonymous.body[:200])
            continue
        assert anonymous.status == 401, (path, anonymous.status)
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert "error" in anonymous.json()
        for refused in (
            request(url, path, WRONG),
            request(url, path, authorization=f"Basic {TOKEN}"),
            request(url, path, authorization=TOKEN),
            request(url, path, authorization="Bearer"),
        ):
            assert refused.status == 401, (path, refused.status)
        allowed = request(url, path, TOKEN)
        assert allowed.status in (200, 302), (path, allowed.status, allowed.body[:300])
        assert_secured(allowed, f"GET {path} with the token")
    return asked


def check_hostile_requests(url: str) -> dict[str, int]:
    """Every hostile request is refused with a 4xx (never a 5xx), a JSON error, a bounded body and the
    security headers; returns what each returned, for the report."""
    seen: dict[str, int] = {}
    for path in HOSTILE_PATHS:
        for token in (None, TOKEN):
            answer = request(url, path, token)
            label = f"GET {path[:100]}{'…' if len(path) > 100 else ''} ({'token' if token else 'no token'})"
            seen[label] = answer.status
            assert answer.status < 500, (label, answer.status, answer.body[:300])
            assert_secured(answer, label)
            if answer.status >= 400:
                assert len(answer.body) <= 1024, (label, len(answer.body))  # an echoed id is bounded
                body = answer.json()
                assert "error" in body and set(body) <= {"error", "paths"}, body  # a 404 lists the paths
                assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in body["error"]), body
    for method in METHODS:
        for token in (None, TOKEN):
            answer = request(url, "/statistics", token, method=method)
            seen[f"{method} /statistics ({'token' if token else 'no token'})"] = answer.status
            assert answer.status in ((401, 405) if token is None else (405,)), (method, answer.status)
            assert_secured(answer, f"{method} /statistics")
    for data in NOT_HTTP:
        status = raw(url, data)
        seen[repr(data[:40])] = int(status.split()[1]) if status else 0
        assert status == b"" or status.split()[1].startswith(b"4"), (data[:60], status)
    return seen


def report(seen: dict[str, int]) -> str:
    """What each hostile request returned, one per line (printed by the tests, for the issue's closing note)."""
    return "\n".join(f"  {status:>3}  {label}" for label, status in seen.items())
