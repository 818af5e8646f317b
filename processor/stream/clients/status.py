"""How far the worker group is through its inputs: ``recurrence status`` and ``ledger-dump --until-caught-up``.

The group reads two topics: the journal, and the repartition topic the engine
agent writes ``recurred`` observations to for the patterns agent. Per input
partition: the end offset (``read_committed``), the offset the group committed
(Faust commits it only after a batch's outputs and change sets are durable, so
a committed offset at the end means every output up to it is in the output
topics), and the lag between them. The journal is read first: once it has no
lag, every repartition record its entries make has been written, so the
repartition topic's end read after it is final. Read with a group-less
consumer and the admin client: nothing joins the worker's group.
"""

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from ...exceptions import BrokerError
from ..settings import KafkaConnection
from .brokers import bounded, require_topics, retrying, started
from .faustcompat import kafka_client

POLL_SECONDS: Final = 0.5


@dataclass(frozen=True)
class PartitionProgress:
    partition: int
    start: int  # the log start offset: the position of a group that committed nothing
    end: int
    committed: int | None

    @property
    def lag(self) -> int:
        return max(0, self.end - (self.committed if self.committed is not None else self.start))


@dataclass(frozen=True)
class InputProgress:
    topic: str
    partitions: Sequence[PartitionProgress]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def lines(self) -> list[str]:
        rows = [f"input {self.topic}", f"{'partition':>9} {'end':>10} {'committed':>10} {'lag':>8}"]
        for p in self.partitions:
            committed = "-" if p.committed is None else str(p.committed)
            rows.append(f"{p.partition:>9} {p.end:>10} {committed:>10} {p.lag:>8}")
        rows.append(f"{'total':>9} {sum(p.end for p in self.partitions):>10} {'':>10} {self.lag:>8}")
        return rows

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "lag": self.lag,
            "partitions": [
                {"partition": p.partition, "end": p.end, "committed": p.committed, "lag": p.lag}
                for p in self.partitions
            ],
        }


@dataclass(frozen=True)
class GroupProgress:
    group: str
    inputs: Sequence[InputProgress]  # the journal first

    @property
    def journal(self) -> InputProgress:
        return self.inputs[0]

    @property
    def partitions(self) -> Sequence[PartitionProgress]:
        """The journal's partitions."""
        return self.journal.partitions

    @property
    def lag(self) -> int:
        """Over every input: 0 once the group has applied everything written to its inputs so far."""
        return sum(i.lag for i in self.inputs)

    def lines(self) -> list[str]:
        rows = [f"group {self.group}, lag {self.lag}"]
        for found in self.inputs:
            rows += found.lines()
        return rows

    def as_json(self) -> dict[str, Any]:
        journal = self.journal.as_json()
        return {
            "journal": journal["topic"],
            "group": self.group,
            "lag": self.lag,
            "partitions": journal["partitions"],
            "inputs": [found.as_json() for found in self.inputs],
        }


class ProgressProbe:
    """Opens its clients once; ``read`` can be called repeatedly (``--until-caught-up`` polls it)."""

    def __init__(self, connection: KafkaConnection, inputs: Sequence[str], group: str) -> None:
        self.connection = connection
        self.inputs = list(inputs)
        self.group = group
        kwargs = connection.aiokafka_kwargs()
        self._consumer = AIOKafkaConsumer(
            **kwargs, group_id=None, enable_auto_commit=False, isolation_level="read_committed"
        )
        self._admin = AIOKafkaAdminClient(**kwargs, request_timeout_ms=max(1000, int(connection.timeout * 1000)))
        self._tps: dict[str, list[TopicPartition]] = {}
        self._clients = contextlib.AsyncExitStack()

    async def __aenter__(self) -> "ProgressProbe":
        try:
            await self._clients.enter_async_context(started(self.connection, self._consumer))
            await self._clients.enter_async_context(started(self.connection, self._admin))
        except BaseException:
            await self._clients.aclose()  # the consumer started before the admin client failed
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._clients.aclose()

    async def _read(self, topic: str) -> InputProgress:
        c = self.connection
        if not self._tps:
            counts = await require_topics(c, kafka_client(self._consumer), self.inputs)
            self._tps = {t: [TopicPartition(t, p) for p in range(counts[t])] for t in self.inputs}
        tps = self._tps[topic]
        ends: Mapping[TopicPartition, int] = await bounded(c, self._consumer.end_offsets(tps))
        starts: Mapping[TopicPartition, int] = await bounded(c, self._consumer.beginning_offsets(tps))
        committed: Mapping[TopicPartition, Any] = await retrying(
            c, lambda: self._admin.list_consumer_group_offsets(self.group, partitions=tps), "DESCRIBE"
        )
        partitions = []
        for tp in tps:
            found = committed.get(tp)
            offset = None if found is None or found.offset < 0 else int(found.offset)
            partitions.append(PartitionProgress(tp.partition, int(starts[tp]), int(ends[tp]), offset))
        return InputProgress(topic, partitions)

    async def read(self) -> GroupProgress:
        """Every input, in order (the journal before the topic its entries write to)."""
        return GroupProgress(self.group, [await self._read(topic) for topic in self.inputs])

    async def wait_caught_up(self, max_wait: float) -> GroupProgress:
        """Input by input, until the committed offsets reach the end offsets found once the inputs before
        it had caught up (for the journal: now); a ``BrokerError`` after ``max_wait``."""
        deadline = time.monotonic() + max_wait
        for topic in self.inputs:
            target = await self._read(topic)
            while True:
                now = await self._read(topic)
                behind = {
                    p.partition: t.end - (p.committed or p.start)
                    for p, t in zip(now.partitions, target.partitions, strict=True)
                    if (p.committed if p.committed is not None else p.start) < t.end
                }
                if not behind:
                    break
                if time.monotonic() > deadline:
                    where = ", ".join(f"p{p}: {n}" for p, n in sorted(behind.items()))
                    raise BrokerError(
                        f"group {self.group} has not caught up with {topic} within {max_wait:g}s "
                        f"(records behind: {where}); is a 'recurrence worker' with the same settings running?"
                    )
                await asyncio.sleep(POLL_SECONDS)
        return await self.read()


async def group_progress(connection: KafkaConnection, inputs: Sequence[str], group: str) -> GroupProgress:
    async with ProgressProbe(connection, inputs, group) as probe:
        return await probe.read()


async def wait_caught_up(
    connection: KafkaConnection, inputs: Sequence[str], group: str, max_wait: float
) -> GroupProgress:
    async with ProgressProbe(connection, inputs, group) as probe:
        return await probe.wait_caught_up(max_wait)
