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

``GET /explain/{id}`` runs the same ``Explainer`` as ``recurrence explain``
over the partition that holds the record (see ``topicarchive``). An id does
not name its partition (it is a digest), so: with ``?scope=S`` the request
goes to the owner of S's partition, like ``/scopes/{S}/statistics``; without
it, this worker looks in its own partitions' record indexes first (one key
lookup each) and then asks every other owner (``?local=1``). A revision
``family/artifact_id@revision`` can exist in many scopes: its cards are
collected from every partition. ``/dead-letters`` fans out and adds up.

``GET /patterns`` lists the patterns agent's table, which is partitioned by
signature key (not by scope) and so has its own owners: each worker lists the
rows of its ready partitions of that table with ``patterns.listing`` (the
function ``recurrence patterns --all --json`` and ``recurrence serve`` use),
the asked worker fans out like ``/statistics`` and merges in ``listing``'s
order. A key lives in exactly one partition, so the merge is a concatenation;
a partition without a ready owner is a 503, never a shorter list.

``/ui`` is the statistics page and ``/openapi.json`` the document (both shared
with ``recurrence serve``, see ``httpapi``).

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

from ...engine import Engine
from ...engineconfig import EngineConfig
from ...explain import Explainer, NotFoundError, RevisionRef
from ...httpapi import (
    dead_letters_body,
    explain_body,
    explain_format,
    merge_revisions,
    narrow,
    parse_top,
    patterns_body,
    ui_file,
)
from ...openapi import document
from ...patterns import listing, listing_order
from ...recordindex import dead_letter_counts, record_key
from ...state import State
from ...store.base import StateStore, Transaction
from ..batch.metrics import CONTENT_TYPE, Metrics
from ..batch.probes import ProbeInputs, ProbeResult, liveness, readiness
from ..batch.types import PartitionedState
from ..settings import KafkaConnection
from .topicarchive import Location, PassArchive, TopicReader, in_passes

log = logging.getLogger("recurrence.stream.web")

FORWARD_TIMEOUT: Final = 10.0


def partition_for(scope_id: str, partitions: int) -> int:
    """The Java/aiokafka default partitioner: the journal (and changelog) partition of a scope."""
    return int(murmur2(scope_id.encode()) & 0x7FFFFFFF) % partitions


class NotReadyError(Exception):
    """The partition is not (yet) served here: rebalancing or restoring."""


@dataclass(frozen=True)
class PatternTable:
    """The patterns agent's table: partitioned by signature key, so with owners of its own."""

    state: PartitionedState
    # partitions of the table this worker actively owns and has finished restoring
    ready_partitions: Callable[[], set[int]]
    # worker url -> partitions of the table it actively owns
    owners: Callable[[], Mapping[str, set[int]]]


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
    # the cross-scope pattern rows, for /patterns
    pattern_table: PatternTable
    # read_committed reads of output and journal records, for /explain
    connection: KafkaConnection | None = None

    def _states(self, partitions: Iterable[int]) -> list[StateStore]:
        ready = self.ready_partitions()
        states = []
        for partition in sorted(partitions):
            state = self.state.open_partition_state(partition) if partition in ready else None
            if state is None:
                raise NotReadyError(f"partition {partition} is not ready on this worker")
            states.append(state)
        return states

    async def local_explain(self, identity: str, partitions: Iterable[int]) -> dict[str, Any] | None:
        """The explanation from these partitions of this worker, or None when none of them holds the id."""
        states = self._states(partitions)
        revision = RevisionRef.parse(identity)
        if revision is not None:
            parts = []
            for state in states:
                try:
                    parts.append(Explainer(State(Transaction(state)), PassArchive(state, {}, set())).revision(revision))
                except NotFoundError:
                    continue
            return merge_revisions(parts) if parts else None
        for state in states:
            if state.get(record_key(identity)) is None:
                continue
            if self.connection is None:
                raise NotReadyError("this worker has no broker connection to read records back")

            def run(fetched: dict[Location, bytes | None], misses: set[Location], state: StateStore = state) -> Any:
                return Explainer(State(Transaction(state)), PassArchive(state, fetched, misses)).explain(identity)

            result: dict[str, Any] = await in_passes(run, TopicReader(self.connection))
            return result
        return None

    def local_dead_letters(self, partitions: Iterable[int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in self._states(partitions):
            for code, count in dead_letter_counts(Transaction(state)).items():
                counts[code] = counts.get(code, 0) + count
        return counts

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

    def local_patterns(self, partitions: Iterable[int]) -> list[dict[str, Any]]:
        """Every pattern row of these partitions of the patterns table, in ``listing``'s order."""
        table = self.pattern_table
        ready = table.ready_partitions()
        rows: list[dict[str, Any]] = []
        for partition in sorted(partitions):
            state = table.state.open_partition_state(partition) if partition in ready else None
            if state is None:
                raise NotReadyError(f"patterns partition {partition} is not ready on this worker")
            rows.extend(listing(Transaction(state), self.config.pattern_scopes, suggested_only=False))
        return sorted(rows, key=listing_order)

    def owner_of(self, partition: int) -> str | None:
        for url, owned in self.owners().items():
            if partition in owned:
                return url
        return None


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
            top = parse_top(request.query)
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
            top = parse_top(request.query)
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

    def coverage(
        owned: Callable[[], Mapping[str, set[int]]] = surface.owners,
    ) -> tuple[Mapping[str, set[int]], set[int]]:
        """Every owner and this worker's partitions (of the journal's table, or the ``owned`` callable's);
        NotReadyError while a partition has no owner."""
        owners = owned()
        covered = set().union(*owners.values()) if owners else set()
        missing = sorted(set(range(surface.partitions)) - covered)
        if missing:
            raise NotReadyError(f"partitions {missing} have no active owner (rebalancing?)")
        return owners, mine_of(owners)

    def mine_of(owners: Mapping[str, set[int]]) -> set[int]:
        return next((parts for url, parts in owners.items() if _same(url, surface.my_url)), set())

    async def ask_others(owners: Mapping[str, set[int]], path: str, params: dict[str, str]) -> list[tuple[int, Any]]:
        remote = [url for url in owners if not _same(url, surface.my_url) and owners[url]]
        return list(await asyncio.gather(*(fetch(url, path, {**params, "local": "1"}) for url in remote)))

    async def explain_anywhere(identity: str) -> dict[str, Any] | None:
        """Own partitions first; then every other owner (a revision: cards from all of them)."""
        owners, mine = coverage()
        found = await surface.local_explain(identity, mine)
        is_revision = RevisionRef.parse(identity) is not None
        if found is not None and not is_revision:
            return found
        parts = [] if found is None else [found]
        for status, body in await ask_others(owners, f"/explain/{quote(identity, safe='')}", {"format": "json"}):
            if status == 200 and isinstance(body, dict):
                if not is_revision:
                    return body
                parts.append(body)
            elif status != 404:
                raise NotReadyError(f"a worker answered {status} to explain")
        return merge_revisions(parts) if parts else None

    @app.page("/explain/{identity:[\\s\\S]+}")  # type: ignore[untyped-decorator]
    async def explain(view: Any, request: Any, identity: str) -> Any:
        query = request.query
        try:
            fmt = explain_format(query, request.headers.get("Accept"))
        except ValueError as bad:
            return error(view, 400, str(bad))
        scope_id = query.get("scope") or None
        try:
            if query.get("local") == "1":
                result = await surface.local_explain(identity, surface.owners().get(surface.my_url, set()))
            elif scope_id is not None:
                partition = partition_for(scope_id, surface.partitions)
                owner = surface.owner_of(partition)
                if owner is None:
                    return error(view, 503, f"partition {partition} has no active owner (rebalancing?)")
                if _same(owner, surface.my_url):
                    result = await surface.local_explain(identity, [partition])
                elif query.get("forwarded") == "1":
                    return error(view, 503, "ownership is changing; retry")
                else:
                    status, body = await fetch(owner, f"/explain/{quote(identity, safe='')}",
                                               {"scope": scope_id, "format": "json", "forwarded": "1"})
                    if status != 200:
                        return json_response(view, body, status)
                    result = body
            else:
                result = await explain_anywhere(identity)
            if result is None:
                raise NotFoundError(f"no record or revision {identity} on this worker's partitions")
            result = narrow(result, scope_id)
        except NotFoundError as missing:
            return error(view, 404, str(missing))
        except NotReadyError as not_ready:
            return error(view, 503, str(not_ready))
        except (aiohttp.ClientError, TimeoutError) as failure:
            return error(view, 503, f"a worker or the broker did not answer: {type(failure).__name__}")
        body, content_type = explain_body(result, "json" if query.get("local") == "1" else fmt)
        return view.bytes(body, headers={"Content-Type": content_type})

    @app.page("/dead-letters")  # type: ignore[untyped-decorator]
    async def dead_letters(view: Any, request: Any) -> Any:
        try:
            if request.query.get("local") == "1":
                owned = surface.owners().get(surface.my_url, set())
                return json_response(view, dead_letters_body(surface.local_dead_letters(owned)))
            owners, mine = coverage()
            counts = surface.local_dead_letters(mine)
            for status, body in await ask_others(owners, "/dead-letters", {}):
                if status != 200 or not isinstance(body, dict):
                    return error(view, 503, f"a worker answered {status}")
                for code, count in body.get("by_code", {}).items():
                    counts[code] = counts.get(code, 0) + int(count)
        except NotReadyError as not_ready:
            return error(view, 503, str(not_ready))
        except (aiohttp.ClientError, TimeoutError) as failure:
            return error(view, 503, f"a worker did not answer: {type(failure).__name__}")
        return json_response(view, dead_letters_body(counts))

    @app.page("/patterns")  # type: ignore[untyped-decorator]
    async def patterns(view: Any, request: Any) -> Any:
        table = surface.pattern_table
        min_scopes = surface.config.pattern_scopes
        try:
            if request.query.get("local") == "1":
                return json_response(view, patterns_body(surface.local_patterns(mine_of(table.owners())), min_scopes))
            owners, mine = coverage(table.owners)
            rows = surface.local_patterns(mine)
            for status, body in await ask_others(owners, "/patterns", {}):
                if status != 200 or not isinstance(body, dict) or not isinstance(body.get("patterns"), list):
                    return error(view, 503, f"a worker answered {status}")
                rows.extend(body["patterns"])
        except NotReadyError as not_ready:
            return error(view, 503, str(not_ready))
        except (aiohttp.ClientError, TimeoutError) as failure:
            return error(view, 503, f"a worker did not answer: {type(failure).__name__}")
        return json_response(view, patterns_body(sorted(rows, key=listing_order), min_scopes))

    spec = document("worker")

    @app.page("/openapi.json")  # type: ignore[untyped-decorator]
    async def openapi(view: Any, request: Any) -> Any:
        return json_response(view, spec)

    async def page_file(view: Any, name: str) -> Any:
        found = ui_file(name)
        if found is None:
            return error(view, 404, "no such file")
        body, content_type = found
        return view.bytes(body, headers={"Content-Type": content_type})

    @app.page("/ui")  # type: ignore[untyped-decorator]
    async def ui(view: Any, request: Any) -> Any:
        return await page_file(view, "index.html")

    @app.page("/ui/{name}")  # type: ignore[untyped-decorator]
    async def ui_asset(view: Any, request: Any, name: str) -> Any:
        return await page_file(view, name)

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
