"""``explain`` on a worker: records read back from the output topics, entries from the journal.

The state keeps no record bytes. Each partition's state indexes every record
it produced (``["rid", id]`` -> ``[topic, partition, offset]``, written with
the batch's change set, so it is never ahead of the outputs), and every
accepted entry keeps its origin (journal topic, partition, offset). Reading
one record at a known offset is a seek with a short-lived consumer
(``read_committed``: under exactly_once only committed outputs are indexed
anyway).

The ``Explainer`` is synchronous and reads through an ``Archive``; the broker
is asynchronous. Rather than block the event loop or cross threads with the
partition's database, ``explain`` runs in passes: a pass answers from what
was fetched so far and notes every location it missed; the misses are read
(concurrently) and the pass runs again, until a pass misses nothing. A chain
is at most a few links deep (the record, its match, the Outcome's and the
Handoff's entries), so this ends after three or four passes.
"""

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

import orjson
from aiokafka import TopicPartition

from ...core.recordindex import record_key
from ...explain import NotFoundError
from ...store.base import StateStore
from ..clients.brokers import committed_reader
from ..settings import KafkaConnection

log = logging.getLogger("recurrence.stream.explain")

Location = tuple[str, int, int]  # topic, partition, offset
T = TypeVar("T")

MAX_PASSES: Final = 8
READ_TIMEOUT: Final = 10.0


class PassArchive:
    """An ``Archive`` over one partition's record index and the records fetched so far; notes its misses."""

    def __init__(self, state: StateStore, fetched: dict[Location, bytes | None], misses: set[Location]) -> None:
        self.state = state
        self.fetched = fetched
        self.misses = misses

    def _read(self, location: Location) -> bytes | None:
        if location in self.fetched:
            return self.fetched[location]
        self.misses.add(location)
        return None

    def location(self, record_id: str) -> Location | None:
        raw = self.state.get(record_key(record_id))
        if raw is None:
            return None
        topic, partition, offset = orjson.loads(raw)
        return (topic, partition, offset)

    def record(self, record_id: str) -> bytes | None:
        location = self.location(record_id)
        return None if location is None else self._read(location)

    def entry(self, origin: dict[str, Any]) -> bytes | None:
        topic, partition, offset = origin.get("topic"), origin.get("partition"), origin.get("offset")
        if not (isinstance(topic, str) and isinstance(partition, int) and isinstance(offset, int)):
            return None
        return self._read((topic, partition, offset))


class TopicReader:
    """Reads single records by location with one consumer, started on first use and closed by ``close``."""

    def __init__(self, connection: KafkaConnection) -> None:
        self._connection = connection
        self._consumer: Any = None

    async def read(self, locations: Iterable[Location]) -> dict[Location, bytes | None]:
        found: dict[Location, bytes | None] = {}
        for location in sorted(set(locations)):
            found[location] = await self._read_one(location)
        return found

    async def _read_one(self, location: Location) -> bytes | None:
        topic, partition, offset = location
        consumer = await self._ensure()
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        deadline = asyncio.get_running_loop().time() + READ_TIMEOUT
        while asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(tp, timeout_ms=500, max_records=1)
            for message in batches.get(tp, []):
                # Past the offset: the record there is not readable (deleted by retention, or aborted).
                return message.value if message.offset == offset else None
            end = (await consumer.end_offsets([tp]))[tp]
            if offset >= end:
                return None
        log.warning("explain: %s[%d]@%d not readable within %.0fs", topic, partition, offset, READ_TIMEOUT)
        return None

    async def _ensure(self) -> Any:
        if self._consumer is None:
            consumer = committed_reader(self._connection)
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None


async def in_passes(run: Callable[[dict[Location, bytes | None], set[Location]], T], reader: TopicReader) -> T:
    """``run(fetched, misses)`` until a pass misses nothing; its result (or its NotFoundError) is final."""
    fetched: dict[Location, bytes | None] = {}
    try:
        for _ in range(MAX_PASSES):
            misses: set[Location] = set()
            try:
                result = run(fetched, misses)
            except NotFoundError:
                if not misses:
                    raise
            else:
                if not misses:
                    return result
            fetched.update(await reader.read(misses - fetched.keys()))
        raise NotFoundError("the evidence chain did not settle (records kept moving)")
    finally:
        await reader.close()
