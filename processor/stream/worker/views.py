"""The worker's read surface: what the shared route table (``routes``) asks, answered over partitions.

The paths and handlers are ``routes.ROUTES``, the same table ``recurrence
serve`` installs; this module is the worker's ``Surface`` behind them
(routing to partition owners, fan-out, merging) and ``register``, which puts
the table on the aiohttp application that Faust's web driver holds.

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

``GET /tune`` is the review-threshold what-if of ``recurrence tune`` for the
scopes served, read from the shadow counters the engine keeps in each scope's
state (``whatif``): each worker answers for its partitions, the asked worker
fans out like ``/statistics``, joins ``by_scope`` in scope order and adds the
totals.

``/ui`` is the statistics page and ``/openapi.json`` the document (both shared
with ``recurrence serve``, see ``routes``).

``/livez`` and ``/readyz`` are the Kubernetes probes (``probes``); ``/health``
answers exactly as ``/readyz`` (an alias kept for existing checks).
``/metrics`` is prometheus_client's exposition of the worker's registry.
"""

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import quote

import aiohttp
import orjson

from ...core.engine import Engine
from ...core.engineconfig import EngineConfig
from ...core.partitioning import partition_for
from ...core.patterns import listing, listing_order
from ...core.recordindex import dead_letter_counts, record_key
from ...core.state import Shadow, State
from ...core.whatif import chart_thresholds, merge, rows, scope_shadows, served
from ...exceptions import UnusableError
from ...explain import Explainer, NotFoundError, identity_kind
from ...host.printable import echoed
from ...repairloop import RepairQuery, answer
from ...store.base import StateStore, Transaction
from ...web.httpapi import (
    MAX_LISTED,
    Server,
    check_code,
    dead_letter_listing,
    dead_letters_body,
    listed_dead_letter,
    merge_revisions,
    narrow,
    patterns_body,
)
from ...web.routes import Ask, Probe, Relayed, Unavailable, install
from ...web.webtoken import Access
from ..batch.metrics import CONTENT_TYPE, Metrics
from ..batch.probes import ProbeInputs, liveness, readiness
from ..batch.types import PartitionedState
from ..settings import KafkaConnection
from .topicarchive import Location, PassArchive, TopicReader, in_passes

if TYPE_CHECKING:
    from ..clients.deadletterfeed import DeadLetterFeed

log = logging.getLogger("recurrence.stream.web")

FORWARD_TIMEOUT: Final = 10.0


class NotReadyError(Unavailable):
    """The partition is not (yet) served here: rebalancing or restoring."""


@dataclass(frozen=True)
class PatternTable:
    """The patterns agent's table: partitioned by signature key, so with owners of its own."""

    state: PartitionedState
    # partitions of the table this worker actively owns and has finished restoring
    ready_partitions: Callable[[], set[int]]
    # worker url -> partitions of the table it actively owns
    owners: Callable[[], Mapping[str, set[int]]]


def _same(url_a: str, url_b: str) -> bool:
    return url_a.rstrip("/") == url_b.rstrip("/")


class Peers:
    """The other workers, asked over HTTP (one session, opened on first use)."""

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._headers = dict(headers or {})

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT), headers=self._headers
            )
        return self._session

    async def get(self, url: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        """The status and JSON body of a peer's answer; Unavailable when it does not answer."""
        try:
            async with self._client().get(url.rstrip("/") + path, params=params) as response:
                body = await response.read()
                return response.status, orjson.loads(body) if body else None
        except (aiohttp.ClientError, TimeoutError) as failure:
            raise Unavailable(f"worker {url} did not answer: {type(failure).__name__}") from None


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
    # the topic /dead-letters/{code} lists from (any worker reads all of it: no owner to ask)
    dead_letters_topic: str | None = None
    peers: Peers = field(default_factory=Peers)
    # /dead-letters/{code}'s reader of that topic, kept between requests (made at the first one)
    dead_letter_feed: "DeadLetterFeed | None" = None

    server: Server = "worker"

    # -- this worker's partitions ------------------------------------------------------
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
        revision = identity_kind(identity)
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
        result: list[dict[str, Any]] = []
        for state in self._states(partitions):
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

    def local_tune(self, partitions: Iterable[int], thresholds: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        """The what-if rows of these partitions' scopes (scope order), and the scopes whose counters are short."""
        scopes: list[tuple[str, Shadow | None]] = []
        incomplete: list[str] = []
        for state in self._states(partitions):
            found, short = scope_shadows(State(Transaction(state)))
            scopes.extend(found)
            incomplete.extend(short)
        scopes.sort(key=lambda scope: scope[0])
        return rows(scopes, thresholds), sorted(incomplete)

    # -- owners --------------------------------------------------------------------------
    def owner_of(self, partition: int) -> str | None:
        for url, owned in self.owners().items():
            if partition in owned:
                return url
        return None

    def mine_of(self, owners: Mapping[str, set[int]]) -> set[int]:
        return next((parts for url, parts in owners.items() if _same(url, self.my_url)), set())

    def coverage(
        self, owned: Callable[[], Mapping[str, set[int]]] | None = None
    ) -> tuple[Mapping[str, set[int]], set[int]]:
        """Every owner and this worker's partitions (of the journal's table, or the ``owned`` callable's);
        NotReadyError while a partition has no owner."""
        owners = (owned or self.owners)()
        covered = set().union(*owners.values()) if owners else set()
        missing = sorted(set(range(self.partitions)) - covered)
        if missing:
            raise NotReadyError(f"partitions {missing} have no active owner (rebalancing?)")
        return owners, self.mine_of(owners)

    async def ask_others(self, owners: Mapping[str, set[int]], path: str, params: dict[str, str]) -> list[Any]:
        """Every other owner's answer (``?local=1``); Unavailable unless each one is a 200."""
        remote = [url for url in owners if not _same(url, self.my_url) and owners[url]]
        answers = await asyncio.gather(*(self.peers.get(url, path, {**params, "local": "1"}) for url in remote))
        bodies = []
        for url, (status, body) in zip(remote, answers, strict=True):
            if status != 200:
                raise Unavailable(f"worker {url} answered {status}")
            bodies.append(body)
        return bodies

    async def _at_owner(self, scope_id: str, path: str, params: dict[str, str], ask: Ask) -> int:
        """The partition of ``scope_id`` when this worker owns it; else the owner's answer, relayed."""
        partition = partition_for(scope_id, self.partitions)
        owner = self.owner_of(partition)
        if owner is None:
            raise NotReadyError(f"partition {partition} has no active owner (rebalancing?)")
        if _same(owner, self.my_url):
            return partition
        if ask.forwarded:
            raise Unavailable("ownership is changing; retry")
        status, body = await self.peers.get(owner, path, {**params, "forwarded": "1"})
        raise Relayed(status, body)

    # -- the Surface the routes ask ----------------------------------------------------------
    async def statistics(self, top: int, ask: Ask) -> list[dict[str, Any]]:
        if ask.local:
            return self.local_statistics(self.owners().get(self.my_url, set()), None, top)
        owners, mine = self.coverage()
        merged: list[dict[str, Any]] = []
        for body in await self.ask_others(owners, "/statistics", {"top": str(top)}):
            if not isinstance(body, list):
                raise Unavailable("a worker answered statistics that are not a list")
            merged.extend(body)
        merged.extend(self.local_statistics(mine, None, top))
        merged.sort(key=lambda s: str(s["scope_id"]))
        return merged

    async def scope_statistics(self, scope_id: str, top: int, ask: Ask) -> dict[str, Any]:
        path = f"/scopes/{quote(scope_id, safe='')}/statistics"
        partition = await self._at_owner(scope_id, path, {"top": str(top)}, ask)
        found = self.local_statistics([partition], scope_id, top)
        if not found:
            raise NotFoundError("no accepted entry for this scope")
        return found[0]

    async def explain(self, identity: str, scope_id: str | None, ask: Ask) -> dict[str, Any]:
        identity_kind(identity)  # an id that cannot exist is not looked up, here or at another worker
        if ask.local:
            result = await self.local_explain(identity, self.owners().get(self.my_url, set()))
        elif scope_id is not None:
            path = f"/explain/{quote(identity, safe='')}"
            partition = await self._at_owner(scope_id, path, {"scope": scope_id, "format": "json"}, ask)
            result = await self.local_explain(identity, [partition])
        else:
            result = await self._explain_anywhere(identity)
        if result is None:
            raise NotFoundError(f"no record or revision {echoed(identity)} on this worker's partitions")
        return narrow(result, scope_id)

    async def _explain_anywhere(self, identity: str) -> dict[str, Any] | None:
        """Own partitions first; then every other owner (a revision: cards from all of them)."""
        owners, mine = self.coverage()
        found = await self.local_explain(identity, mine)
        is_revision = identity_kind(identity) is not None
        if found is not None and not is_revision:
            return found
        parts = [] if found is None else [found]
        remote = [url for url in owners if not _same(url, self.my_url) and owners[url]]
        path = f"/explain/{quote(identity, safe='')}"
        answers = await asyncio.gather(*(self.peers.get(url, path, {"format": "json", "local": "1"}) for url in remote))
        for status, body in answers:
            if status == 200 and isinstance(body, dict):
                if not is_revision:
                    return body
                parts.append(body)
            elif status != 404:
                raise NotReadyError(f"a worker answered {status} to explain")
        return merge_revisions(parts) if parts else None

    async def dead_letters(self, ask: Ask) -> dict[str, Any]:
        if ask.local:
            return dead_letters_body(self.local_dead_letters(self.owners().get(self.my_url, set())))
        owners, mine = self.coverage()
        counts = self.local_dead_letters(mine)
        for body in await self.ask_others(owners, "/dead-letters", {}):
            if not isinstance(body, dict):
                raise Unavailable("a worker answered dead letters that are not an object")
            for code, count in body.get("by_code", {}).items():
                counts[code] = counts.get(code, 0) + int(count)
        return dead_letters_body(counts)

    async def dead_letter_list(self, code: str, limit: int, ask: Ask) -> dict[str, Any]:
        check_code(code)
        if self.connection is None or self.dead_letters_topic is None:
            raise Unavailable("this worker has no broker connection to read the dead letters with")
        if self.dead_letter_feed is None:
            from ..clients.deadletterfeed import DeadLetterFeed  # noqa: PLC0415 - only this path reads the topic

            self.dead_letter_feed = DeadLetterFeed(
                self.connection, self.dead_letters_topic, MAX_LISTED, listed_dead_letter
            )
        try:
            await self.dead_letter_feed.update()  # what the topic grew by since the last request
        except UnusableError as error:  # the broker did not answer in time, or the topic is missing
            raise Unavailable(str(error)) from None
        listed = self.dead_letter_feed.listed(code)  # distinct, in journal order, at most MAX_LISTED
        # How many: the state's count (what /dead-letters says), never fewer than those listed.
        total = max(len(listed), int((await self.dead_letters(Ask()))["by_code"].get(code, 0)))
        return dead_letter_listing(code, listed, total, limit)

    async def patterns(self, ask: Ask) -> dict[str, Any]:
        table = self.pattern_table
        min_scopes = self.config.pattern_scopes
        if ask.local:
            return patterns_body(self.local_patterns(self.mine_of(table.owners())), min_scopes)
        owners, mine = self.coverage(table.owners)
        rows = self.local_patterns(mine)
        for body in await self.ask_others(owners, "/patterns", {}):
            if not isinstance(body, dict) or not isinstance(body.get("patterns"), list):
                raise Unavailable("a worker answered patterns that are not a listing")
            rows.extend(body["patterns"])
        return patterns_body(sorted(rows, key=listing_order), min_scopes)

    async def progress(self, ask: Ask) -> dict[str, Any]:
        """This worker's journal partitions: recorded position, lag, whether each is served; and /readyz's verdict.

        Each worker answers for itself (the page of a worker shows that worker): no fan-out."""
        inputs = self.probe()
        verdict = readiness(inputs)
        positions = {int(p): int(n) for p, n in dict(inputs.details.get("positions") or {}).items()}
        ready = set(inputs.ready_partitions)
        partitions = [
            {"partition": p, "position": positions.get(p), "lag": inputs.lag.get(p), "ready": p in ready}
            for p in sorted(inputs.partitions)
        ]
        entries = inputs.details.get("entries_processed")
        url = inputs.details.get("url")
        return {
            "runner": "worker",
            "status": verdict.status,
            "reasons": list(verdict.body["reasons"]),
            "partitions": partitions,
            "url": None if url is None else str(url),
            "entries_processed": None if entries is None else int(entries),
        }

    def version(self) -> str | None:
        return None  # partitions move independently: /progress is tagged by its body

    async def tune(self, thresholds: list[int] | None, ask: Ask) -> dict[str, Any]:
        configured = self.config.review_threshold
        wanted = thresholds or chart_thresholds(configured)
        if ask.local:
            local_rows, short = self.local_tune(self.owners().get(self.my_url, set()), wanted)
            return served(configured, short, local_rows)
        owners, mine = self.coverage()
        mine_rows, incomplete = self.local_tune(mine, wanted)
        parts = [mine_rows]
        asked = {"thresholds": ",".join(str(k) for k in wanted)}
        for body in await self.ask_others(owners, "/tune", asked):
            if not isinstance(body, dict) or len(body.get("thresholds") or ()) != len(wanted):
                raise Unavailable("a worker answered a what-if of other thresholds")
            parts.append(body["thresholds"])
            incomplete.extend(body["incomplete_scopes"])
        return served(configured, sorted(incomplete), merge(parts))

    async def repair_loop(self, scope_id: str, query: RepairQuery, ask: Ask) -> dict[str, Any]:
        """At the owner of the scope's partition, as ``/scopes/{scope_id}/statistics``: the same ``answer`` over
        the partition's state that ``recurrence serve`` and the CLI give over an embedded one."""
        partition = await self._at_owner(scope_id, query.path(scope_id), query.params(), ask)
        [state] = self._states([partition])
        return answer(State(Transaction(state)), scope_id, query, self.config.review_threshold)

    def check(self, kind: Literal["live", "ready"]) -> Probe:
        result = (liveness if kind == "live" else readiness)(self.probe())
        return Probe(result.ok, result.body)

    def exposition(self) -> tuple[bytes, str]:
        return self.metrics.render(), CONTENT_TYPE


def register(app: Any, surface: ReadSurface, access: Access) -> None:
    """Put the read surface's route table on the aiohttp application of the faust.App's web driver; requests to
    other workers carry the token (they share it)."""
    surface.peers = Peers(access.headers())
    install(app.web.web_app, surface, access)
