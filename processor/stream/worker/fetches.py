"""Whole journal fetches, handed from the worker's consumer to the agent that owns the topic.

Faust delivers a fetch record by record: per record a ``Message``, an
``Event``, four futures in ``wait_first``, a queue put and get, stream
sensors and an ack (~120 µs of CPU here, more than the engine's cost per
entry; docs/worker.md, "What the worker takes from Faust"). The worker's consumer
(``workerapp``) instead puts each fetch of a batched topic on that topic's
``FetchChannel`` as one ``Fetched`` item, and the agent runs it as one
batch. Faust still owns everything else: the subscription, the assignment,
table recovery and standbys, pausing and resuming partitions, the
transactional producers.

What the channel adds for rebalances: Faust waits for the streams to be
empty before it revokes partitions and stops the transactional producers
(``stream_wait_empty``); with no Faust events in flight that wait must be
for the batch the agent is running instead. ``quiesce`` drops fetches not
yet taken (they belong to the old assignment; the journal position in the
state makes the new owner start exactly where the last durable batch ended)
and waits until the batch in flight and its offset commit have finished.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

log = logging.getLogger("recurrence.stream")

#: Fetches buffered ahead of the agent (merged into its next batch; bounded, so memory stays ~16 fetches).
QUEUED_FETCHES: Final = 16


@dataclass(frozen=True)
class Fetched:
    """One fetch of one topic: the consumer generation it was fetched in, records by partition."""

    generation: int
    records: Mapping[int, Sequence[Any]]  # partition -> aiokafka ConsumerRecords, offset order

    @property
    def count(self) -> int:
        return sum(len(records) for records in self.records.values())

    def merged(self, later: "Fetched") -> "Fetched":
        """This fetch followed by a later one of the same generation (offsets keep increasing per partition)."""
        records = {partition: list(found) for partition, found in self.records.items()}
        for partition, found in later.records.items():
            records.setdefault(partition, []).extend(found)
        return Fetched(self.generation, records)


OffsetCommit = Callable[[dict[int, int]], Awaitable[object]]


async def _first_of(arrived: asyncio.Event, until: asyncio.Event | None, timeout: float) -> bool:
    """Wait until ``arrived`` or ``until`` is set; False after ``timeout`` seconds with neither."""
    waits = {asyncio.ensure_future(arrived.wait())}
    if until is not None:
        waits.add(asyncio.ensure_future(until.wait()))
    done, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
    return bool(done)


class FetchChannel:
    def __init__(self, topic: str, maxsize: int = QUEUED_FETCHES) -> None:
        self.topic = topic
        self._queue: asyncio.Queue[Fetched] = asyncio.Queue(maxsize)
        self._idle = asyncio.Event()
        self._idle.set()
        # Batches taken and not yet ``done``: up to three while a batch's engine runs and the two before
        # it are still being made durable (pipelined, at-least-once); the channel is idle at none.
        self._busy = 0
        self._arrived = asyncio.Event()
        #: Set while nothing is queued, carried or running here: what this channel's agent was handed
        #: is done (another agent's ``get`` may stop gathering then, ``until``).
        self.drained = asyncio.Event()
        self.drained.set()
        self._carry: Fetched | None = None  # taken from the queue but left for the next batch
        self._uncommitted: dict[int, int] = {}
        self._committer: asyncio.Task[None] | None = None
        #: Seconds the last ``get`` spent collecting fetches after the first (the batching delay).
        self.waited = 0.0

    async def put(self, fetched: Fetched) -> None:
        self.drained.clear()
        await self._queue.put(fetched)
        self._arrived.set()

    async def get(
        self, max_records: int, within: float, min_records: int | None = None, until: asyncio.Event | None = None
    ) -> Fetched:
        """The next batch: fetches merged up to ``max_records``; the channel counts as busy until ``done``.

        Under a live load a fetch holds what arrived while the previous batch ran, often a few
        records per partition, and every batch has fixed costs (two acknowledged produce
        stages, a statistics record per changed scope, an offset commit or a transaction per
        partition). So fetches already waiting are merged into the batch, and a batch below
        ``min_records`` waits up to ``within`` seconds for more (a consumer's fetch.min.bytes and
        fetch.max.wait.ms). A larger batch does not wait: the batch before it already gathered
        it, and a wait would lengthen every cycle and with it every entry's latency. A fetch
        that would take the batch past ``max_records`` starts the next batch instead.
        ``min_records`` defaults to ``max_records``: any batch not full waits.

        ``until``: a batch also stops waiting once this is set (the patterns agent's: the engine
        agent's channel is drained, so nothing more is on its way for a while -- the end of a
        backlog, a quiet stream -- and the last observations need not wait out ``within``).
        """
        fetched = self._carry if self._carry is not None else await self._queue.get()
        self._carry = None
        self._began()  # no await between taking the item and this: quiesce cannot miss it
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + within
        count = fetched.count
        wanted = max_records if min_records is None else min(min_records, max_records)
        while count < max_records:
            if self._queue.empty():
                if count >= wanted or (until is not None and until.is_set()):
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                # Wait for a put, not on the queue itself: a timed-out get could swallow an item.
                self._arrived.clear()
                if not await _first_of(self._arrived, until, remaining):
                    break
                continue
            following = self._queue.get_nowait()
            if following.generation != fetched.generation or count + following.count > max_records:
                self._carry = following
                break
            fetched = fetched.merged(following)
            count = fetched.count
        self.waited = loop.time() - began
        return fetched

    @contextmanager
    def running(self) -> Iterator[None]:
        """A batch that did not come from ``get`` (a catch-up read from the topic directly) runs inside:
        a rebalance waits for it as for a fetched one (``quiesce``), before the partitions' transactional
        producers are stopped under it."""
        self._began()
        try:
            yield
        finally:
            self.done()

    def _began(self) -> None:
        """A batch has begun (``get`` or ``running``): busy until its ``done``."""
        self._busy += 1
        self._idle.clear()
        self.drained.clear()

    def done(self) -> None:
        """A batch taken by ``get`` has ended (durable, or nothing to run)."""
        self._busy = max(0, self._busy - 1)
        if not self._busy:
            self._idle.set()
            if self._queue.empty() and self._carry is None:
                self.drained.set()

    def commit_soon(self, offsets: Mapping[int, int], commit: OffsetCommit) -> None:
        """Commit the group offsets in the background, one commit at a time, the latest winning.

        The offsets only say where fetching resumes after a restart; the journal position in
        the state is the truth, so the hot path does not wait for a commit (~15 ms each).
        """
        self._uncommitted.update(offsets)
        if self._committer is None or self._committer.done():
            self._committer = asyncio.ensure_future(self._commit_all(commit))

    async def _commit_all(self, commit: OffsetCommit) -> None:
        while self._uncommitted:
            offsets, self._uncommitted = self._uncommitted, {}
            try:
                await commit(offsets)
            except Exception as error:  # a lost commit means redelivery, and redelivered entries are skipped
                log.warning(
                    "%s: offset commit failed (%s); the state's positions are unaffected",
                    self.topic,
                    type(error).__name__,
                )

    async def quiesce(self) -> int:
        """Drop the fetches not yet taken, wait for the batches in flight and their commit; how many were dropped."""
        dropped = 0 if self._carry is None else 1
        self._carry = None
        while not self._queue.empty():
            self._queue.get_nowait()
            dropped += 1
        if not self._busy:
            self.drained.set()
        await self._idle.wait()
        committer = self._committer
        if committer is not None and not committer.done():
            await asyncio.shield(committer)
        self._uncommitted.clear()
        return dropped
