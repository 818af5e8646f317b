"""schemathesis against a live server, through its Python API (one hypothesis run per operation).

The pytest plugin's lazy ``from_fixture`` does not run under pytest 9, so the
operations are driven here: every operation of the served ``/openapi.json``,
``max_examples`` generated requests each, every schemathesis check (status
codes, content types, response schemas, no server error). The failures come
back as text, one per operation, for the assertion message.
"""

import asyncio
import threading
from typing import Any

import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Err

from devkit.localrun import free_port


def failures(url: str, max_examples: int = 25, token: str | None = None) -> tuple[list[str], list[str]]:
    """Failures per operation, and the paths that ran (schemathesis leaves out ``/openapi.json`` itself).

    With ``token`` every request carries it, and schemathesis' ``ignored_auth`` check also sends each
    operation that declares the bearer scheme without it and with a wrong one, expecting a refusal."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    schema = schemathesis.openapi.from_url(url.rstrip("/") + "/openapi.json", headers=headers)
    found: list[str] = []
    ran: list[str] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation the document does not define well is a failure too
            found.append(f"invalid operation: {result.err()}")
            continue
        operation = result.ok()
        ran.append(operation.path)

        @given(case=operation.as_strategy())
        @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers)

        try:
            check()
        except (Exception, BaseExceptionGroup) as failure:  # schemathesis raises failure groups; keep the text
            found.append(f"{operation.label}: {failure}")
    return found, ran


def app_failures(app: web.Application, max_examples: int = 3, token: str | None = None) -> list[str]:
    """``failures`` against ``app`` served from a thread of this process on a free port, for an app a test
    built itself (a surface that answers wrong, a guard that lets anyone in)."""
    runner = web.AppRunner(app)
    loop = asyncio.new_event_loop()
    port = free_port()
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        found, _ = failures(f"http://127.0.0.1:{port}", max_examples=max_examples, token=token)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()
    return found
