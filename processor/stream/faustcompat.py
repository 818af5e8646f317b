"""Every private attribute of faust-streaming, mode and aiokafka the worker relies on, in one place.

The worker needs a few things these libraries do not offer publicly: the
transactional producer Faust keeps per journal partition and its lock (the
exactly-once sink sends through them and holds them for a whole batch), a
service's crashed flag (the liveness probe), a consumer's client to read
cluster metadata, and one corrected method of Faust's consumer thread (see
``WorkerApp``). They are reached only through the definitions below;
faust-streaming is pinned to the minor version they were checked against
(pyproject.toml), and ``tests/test_faustcompat.py`` builds an app and fails
loudly, naming the attribute, when a new version moves any of them. Nowhere
else in the product touches a private member (ruff's SLF rule).
"""

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

# (what, attribute) pairs the test checks on a freshly built app.
PRODUCER_ATTRIBUTES: Final = ("_transaction_producers", "_trn_locks")
SERVICE_ATTRIBUTES: Final = ("_crashed",)
CONSUMER_ATTRIBUTES: Final = ("_client",)
# (class, method) pairs WorkerApp overrides or calls; the test checks each still exists.
OVERRIDDEN: Final = (
    (faust.App, "_new_transport"),
    (faust_aiokafka.Consumer, "_new_consumer_thread"),
    (faust_aiokafka.AIOKafkaConsumerThread, "_highwaters"),
    (faust_aiokafka.AIOKafkaConsumerThread, "_ensure_consumer"),
)


def transaction_producer(app: Any, transactional_id: str) -> Any | None:
    """Faust's transactional producer for one id (``<app id>-<group>-<partition>``), if it exists."""
    producers: dict[str, Any] = app.producer._transaction_producers
    return producers.get(transactional_id)


def transaction_lock(app: Any, transactional_id: str) -> asyncio.Lock:
    """The lock Faust's timed transaction commit takes for that producer."""
    locks: dict[str, asyncio.Lock] = app.producer._trn_locks
    return locks[transactional_id]


def crashed(service: Any) -> bool:
    """Has this mode service (a Faust agent) crashed?"""
    event = getattr(service, "_crashed", None)
    return bool(event is not None and event.is_set())


def kafka_client(consumer: Any) -> Any:
    """The aiokafka client inside an AIOKafkaConsumer (its metadata calls are not public)."""
    return consumer._client


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, with changelog high watermarks that are read, not remembered.

    Table recovery asks ``highwaters()`` for the end of each changelog
    partition it restores. Under exactly_once Faust answers with aiokafka's
    ``last_stable_offset(tp)``: the LSO the *last fetch* of that partition
    happened to return -- ``None`` (taken as -1) for a partition this consumer
    has not fetched since the assignment, and stale for one it fetched before
    another worker wrote to it. After a rebalance the recovery then compares
    the offset its local database recorded with -1 and stops the worker with
    ``ConsistencyError`` ("persisted offset ... is higher than the last
    offset"), or, worse, believes a stale end and skips change sets another
    owner committed meanwhile (robinhood/faust#658, faust-streaming#158).

    Here the answer is always a ListOffsets request, which on this
    read_committed consumer returns the partition's current last stable
    offset. It is final by the time recovery asks: Faust starts the new
    owner's transactional producers (``transactions.on_rebalance``) before
    the tables' recovery, and a producer's first ``begin_transaction`` waits
    for InitProducerId, which the coordinator answers only once the previous
    owner's open transaction under the same transactional id (a killed or
    paused worker's) is fenced and aborted -- its markers written, the LSO
    past it.
    """

    async def _highwaters(self, partitions: Sequence[Any]) -> Mapping[Any, int]:
        offsets: Mapping[Any, int] = await self._ensure_consumer().end_offsets(list(partitions))
        return offsets


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class WorkerApp(faust.App):
    """``faust.App`` on the aiokafka transport whose consumer thread reads high watermarks fresh."""

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)
