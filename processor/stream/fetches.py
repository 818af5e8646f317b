"""Whole journal fetches, handed from the worker's consumer to the agent that owns the topic.

Faust delivers a fetch record by record: per record a ``Message``, an
``Event``, four futures in ``wait_first``, a queue put and get, stream
sensors and an ack (~120 µs of CPU here, more than the engine's cost per
entry; docs/worker-fastpath-study.md). The worker's consumer
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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

log = logging.getLogger("recurrence.stream")

#: Fetches buffered ahead of the agent: one being run, one or two ready (the consumer thread keeps fetching).
QUEUED_FETCHES: Final = 2


@dataclass(frozen=True)
class Fetched:
    """One fetch of one topic: the consumer generation it was fetched in, records by partition."""

    generation: int
    records: Mapping[int, Sequence[Any]]  # partition -> aiokafka ConsumerRecords, offset order


OffsetCommit = Callable[[dict[int, int]], Awaitable[object]]


class FetchChannel:
    def __init__(self, topic: str, maxsize: int = QUEUED_FETCHES) -> None:
        self.topic = topic
        self._queue: asyncio.Queue[Fetched] = asyncio.Queue(maxsize)
        self._idle = asyncio.Event()
        self._idle.set()
        self._uncommitted: dict[int, int] = {}
        self._committer: asyncio.Task[None] | None = None

    async def put(self, fetched: Fetched) -> None:
        await self._queue.put(fetched)

    async def get(self) -> Fetched:
        """The next fetch; the channel counts as busy until ``done``."""
        fetched = await self._queue.get()
        self._idle.clear()  # no await between taking the item and this: quiesce cannot miss it
        return fetched

    def done(self) -> None:
        self._idle.set()

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
                log.warning("%s: offset commit failed (%s); the state's positions are unaffected",
                            self.topic, type(error).__name__)

    async def quiesce(self) -> int:
        """Drop the fetches not yet taken, wait for the batch in flight and its commit; how many were dropped."""
        dropped = 0
        while not self._queue.empty():
            self._queue.get_nowait()
            dropped += 1
        await self._idle.wait()
        committer = self._committer
        if committer is not None and not committer.done():
            await asyncio.shield(committer)
        self._uncommitted.clear()
        return dropped
