"""Every private attribute of faust-streaming, mode and aiokafka the worker relies on, in one place.

The worker needs a few things these libraries do not offer publicly: the
transactional producer Faust keeps per journal partition and its lock (the
exactly-once sink sends through them and holds them for a whole batch), a
service's crashed flag (the liveness probe), a consumer's client to read
cluster metadata, and, for the corrected Faust classes in ``workerapp``, the
transactional producers by id and the consumer inside Faust's consumer
thread; and the one changelog wait of Faust's table recovery, bounded
(``shorten_recovery_wait``). They are reached only through the functions below (``workerapp``
overrides a few private *methods*, listed and checked there);
faust-streaming is pinned to the minor version they were checked against
(pyproject.toml), and ``tests/test_faustcompat.py`` builds an app and fails
loudly, naming the attribute, when a new version moves any of them. Nowhere
else in the product touches a private member (ruff's SLF rule).
"""

import asyncio
import importlib
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

_T = TypeVar("_T")

#: How long Faust's table recovery waits for a changelog record before it looks again (its own: 5 s).
RECOVERY_IDLE_SECONDS: Final = 0.5
#: The module whose changelog wait that is; it calls ``asyncio.wait_for`` there and nowhere else.
RECOVERY_MODULE: Final = "faust.tables.recovery"

# (what, attribute) pairs the test checks on a freshly built app.
PRODUCER_ATTRIBUTES: Final = ("_transaction_producers", "_trn_locks")
SERVICE_ATTRIBUTES: Final = ("_crashed",)
CONSUMER_ATTRIBUTES: Final = ("_client", "_fetch_max_wait_ms")


def transaction_producer(app: Any, transactional_id: str) -> Any | None:
    """Faust's transactional producer for one id (``<app id>-<group>-<partition>``), if it exists."""
    return transaction_producers(app.producer).get(transactional_id)


def transaction_lock(app: Any, transactional_id: str) -> asyncio.Lock:
    """The lock Faust's timed transaction commit takes for that producer."""
    return transaction_locks(app.producer)[transactional_id]


def crashed(service: Any) -> bool:
    """Has this mode service (a Faust agent) crashed?"""
    event = getattr(service, "_crashed", None)
    return bool(event is not None and event.is_set())


def kafka_client(consumer: Any) -> Any:
    """The aiokafka client inside an AIOKafkaConsumer (its metadata calls are not public)."""
    return consumer._client



def plain_producer(app: Any) -> Any:
    """The AIOKafkaProducer behind Faust's (non-transactional) Producer; raises if it has not started."""
    return app.producer._ensure_producer()


def transaction_producers(producer: Any) -> dict[str, Any]:
    """Faust's transactional producers by transactional id (a class attribute of its Producer)."""
    producers: dict[str, Any] = producer._transaction_producers
    return producers


def transaction_locks(producer: Any) -> dict[str, asyncio.Lock]:
    """The per-producer locks Faust's timed transaction commit takes, by transactional id."""
    locks: dict[str, asyncio.Lock] = producer._trn_locks
    return locks


def set_fetch_max_wait(consumer: Any, milliseconds: int) -> None:
    """Set an AIOKafkaConsumer's fetch wait before it starts (its fetcher is built from it in ``start``)."""
    consumer._fetch_max_wait_ms = milliseconds


def thread_consumer(thread: Any) -> Any:
    """The AIOKafkaConsumer inside Faust's consumer thread (raises if it has not started)."""
    return thread._ensure_consumer()


class _RecoveryAsyncio:
    """``asyncio`` as Faust's recovery module sees it: the same, but ``wait_for`` waits at most ``seconds``.

    Faust's recovery reads a changelog until its offset reaches the high watermark. Under
    exactly_once a killed worker's changelog ends in an aborted transaction: its marker is not
    a record, so the offset never gets there, and Faust only notices (``detect_aborted_tx``)
    after two empty waits in a row, 2 x 5 s, on every restart. Two empty waits of 0.5 s still
    keep its guard against a record fetched but not yet queued (that takes microseconds), and
    recovery then ends ~9 s sooner. An idle standby wakes twice a second instead of every 5 s.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    def wait_for(self, awaitable: Awaitable[_T], timeout: float | None = None) -> Awaitable[_T]:
        bounded = self.seconds if timeout is None else min(timeout, self.seconds)
        return asyncio.wait_for(awaitable, bounded)


def shorten_recovery_wait(seconds: float = RECOVERY_IDLE_SECONDS) -> None:
    """Bound the changelog wait of Faust's table recovery (see ``_RecoveryAsyncio``); idempotent."""
    namespace = vars(importlib.import_module(RECOVERY_MODULE))
    current = namespace["asyncio"]
    if isinstance(current, _RecoveryAsyncio):
        current.seconds = seconds
    else:
        namespace["asyncio"] = _RecoveryAsyncio(seconds)
