"""Faust web views: statistics (routed to the partition owner), probes, Prometheus metrics.

A scope's state lives on the worker that owns its journal partition (the
partition of key ``scope_id``, which is also its changelog partition). So:

* ``GET /scopes/{scope_id}/statistics`` computes the partition of the key and
  answers locally when this worker is the active owner, else forwards the
  request to the owner's URL from the Faust assignor (each worker advertises
  its ``canonical_url``).
* ``GET /statistics`` fans out to every worker that owns partitions
  (``?local=1`` restricts a worker to its own active partitions) and merges the
  lists by ``scope_id`` -- the same order ``recurrence stats`` prints. When a
  partition has no owner (a rebalance in progress) or an owner does not answer,
  it is a 503: partial statistics are never served as complete.

``?top=N`` bounds ``top_revisions`` (0..1000, default the contract's 20).

``/livez`` and ``/readyz`` are the Kubernetes probes (``probes``); ``/health``
answers exactly as ``/readyz`` (an alias kept for existing checks).
``/metrics`` is prometheus_client's exposition of the worker's registry.
"""

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import orjson
from aiokafka.partitioner import murmur2

from recurrence.processor.engine import Engine, EngineConfig
from recurrence.processor.store.base import Transaction
from recurrence.processor.stream.metrics import CONTENT_TYPE, Metrics
from recurrence.processor.stream.probes import ProbeInputs, ProbeResult, liveness, readiness
from recurrence.processor.stream.types import PartitionedState
from recurrence.schemas.constants import DEFAULT_TOP_REVISIONS

log = logging.getLogger("recurrence.stream.web")

MAX_TOP: Final = 1000
FORWARD_TIMEOUT: Final = 10.0


def partition_for(scope_id: str, partitions: int) -> int:
    """The Java/aiokafka default partitioner: the journal (and changelog) partition of a scope."""
    return int(murmur2(scope_id.encode()) & 0x7FFFFFFF) % partitions


class NotReadyError(Exception):
    """The partition is not (yet) served here: rebalancing or restoring."""


@dataclass
class ReadSurface:
    """Everything the views read; the Faust specifics are behind the callables."""

    state: PartitionedState
    config: EngineConfig
    metrics: Metrics
    partitions: int
    my_url: str
    # partitions this worker actively owns and has finished restoring
    ready_partitions: Callable[[], set[int]]
    # worker url -> journal partitions it actively owns (from the assignor)
    owners: Callable[[], Mapping[str, set[int]]]
    lag: Callable[[], Mapping[int, int]]
    probe: Callable[[], ProbeInputs]

    def local_statistics(self, partitions: Iterable[int], scope_id: str | None, top: int) -> list[dict[str, Any]]:
        ready = self.ready_partitions()
        result: list[dict[str, Any]] = []
        for partition in sorted(partitions):
            state = self.state.open_partition_state(partition) if partition in ready else None
            if state is None:
                raise NotReadyError(f"partition {partition} is not ready on this worker")
            engine = Engine(Transaction(state), self.config)
            result.extend(s.model_dump(mode="json") for s in engine.statistics(scope_id, top))
        result.sort(key=lambda s: str(s["scope_id"]))
        return result

    def owner_of(self, partition: int) -> str | None:
        for url, owned in self.owners().items():
            if partition in owned:
                return url
        return None


def _parse_top(query: Mapping[str, str]) -> int:
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


def _same(url_a: str, url_b: str) -> bool:
    return url_a.rstrip("/") == url_b.rstrip("/")


def register(app: Any, surface: ReadSurface) -> None:
    """Add the views to a faust.App."""
    session: dict[str, aiohttp.ClientSession] = {}

    def client() -> aiohttp.ClientSession:
        if "s" not in session or session["s"].closed:
            session["s"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT))
        return session["s"]

    def json_response(view: Any, value: Any, status: int = 200) -> Any:
        return view.bytes(orjson.dumps(value), content_type="application/json", status=status)

    def error(view: Any, status: int, message: str) -> Any:
        headers = {"Retry-After": "1"} if status == 503 else None
        return view.bytes(
            orjson.dumps({"error": message}), content_type="application/json", status=status, headers=headers
        )

    async def fetch(url: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        async with client().get(url.rstrip("/") + path, params=params) as response:
            body = await response.read()
            return response.status, orjson.loads(body) if body else None

    @app.page("/statistics")  # type: ignore[untyped-decorator]
    async def statistics(view: Any, request: Any) -> Any:
        try:
            top = _parse_top(request.query)
        except ValueError as bad:
            return error(view, 400, str(bad))
        if request.query.get("local") == "1":
            try:
                owned = surface.owners().get(surface.my_url, set())
                return json_response(view, surface.local_statistics(owned, None, top))
            except NotReadyError as not_ready:
                return error(view, 503, str(not_ready))
        owners = surface.owners()
        covered = set().union(*owners.values()) if owners else set()
        missing = sorted(set(range(surface.partitions)) - covered)
        if missing:
            return error(view, 503, f"partitions {missing} have no active owner (rebalancing?)")
        merged: list[dict[str, Any]] = []
        try:
            remote = [url for url in owners if not _same(url, surface.my_url) and owners[url]]
            answers = await asyncio.gather(
                *(fetch(url, "/statistics", {"local": "1", "top": str(top)}) for url in remote)
            )
            for url, (status, body) in zip(remote, answers, strict=True):
                if status != 200 or not isinstance(body, list):
                    return error(view, 503, f"worker {url} answered {status}")
                merged.extend(body)
            mine = owners.get(surface.my_url) or next(
                (parts for url, parts in owners.items() if _same(url, surface.my_url)), set()
            )
            merged.extend(surface.local_statistics(mine, None, top))
        except NotReadyError as not_ready:
            return error(view, 503, str(not_ready))
        except (aiohttp.ClientError, TimeoutError) as failure:
            return error(view, 503, f"a worker did not answer: {type(failure).__name__}")
        merged.sort(key=lambda s: str(s["scope_id"]))
        return json_response(view, merged)

    @app.page("/scopes/{scope_id}/statistics")  # type: ignore[untyped-decorator]
    async def scope_statistics(view: Any, request: Any, scope_id: str) -> Any:
        try:
            top = _parse_top(request.query)
        except ValueError as bad:
            return error(view, 400, str(bad))
        partition = partition_for(scope_id, surface.partitions)
        owner = surface.owner_of(partition)
        if owner is None:
            return error(view, 503, f"partition {partition} has no active owner (rebalancing?)")
        if not _same(owner, surface.my_url):
            if request.query.get("forwarded") == "1":
                return error(view, 503, "ownership is changing; retry")
            try:
                status, body = await fetch(
                    owner,
                    f"/scopes/{quote(scope_id, safe='')}/statistics",
                    {"top": str(top), "forwarded": "1"},
                )
            except (aiohttp.ClientError, TimeoutError) as failure:
                return error(view, 503, f"owner {owner} did not answer: {type(failure).__name__}")
            return json_response(view, body, status)
        try:
            found = surface.local_statistics([partition], scope_id, top)
        except NotReadyError as not_ready:
            return error(view, 503, str(not_ready))
        if not found:
            return error(view, 404, "no accepted entry for this scope")
        return json_response(view, found[0])

    def probe_response(view: Any, result: ProbeResult) -> Any:
        return json_response(view, result.body, 200 if result.ok else 503)

    @app.page("/livez")  # type: ignore[untyped-decorator]
    async def livez(view: Any, request: Any) -> Any:
        return probe_response(view, liveness(surface.probe()))

    @app.page("/readyz")  # type: ignore[untyped-decorator]
    async def readyz(view: Any, request: Any) -> Any:
        return probe_response(view, readiness(surface.probe()))

    @app.page("/health")  # type: ignore[untyped-decorator]
    async def health(view: Any, request: Any) -> Any:
        return probe_response(view, readiness(surface.probe()))

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(view: Any, request: Any) -> Any:
        return view.bytes(surface.metrics.render(), headers={"Content-Type": CONTENT_TYPE})
