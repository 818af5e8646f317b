"""Every member of faust-streaming, mode and aiokafka the product relies on beyond their public API, in one place.

The worker needs a few things these libraries do not offer publicly: the
transactional producer Faust keeps per journal partition and its lock (the
exactly-once sink sends through them and holds them for a whole batch), a
service's crashed flag (the liveness probe), a consumer's client to read
cluster metadata (the short-lived commands too), the open databases of a
RocksDB table store, and, for the corrected Faust classes (``worker.workerapp``,
``worker.tablestore``, ``worker.webserver``), a consumer's read offsets and buffered partitions, the
consumer inside Faust's consumer thread, and the one changelog wait of Faust's
table recovery, bounded (``shorten_recovery_wait``).

``MEMBERS`` names every one of them, and nothing else in the product touches
a private member except as listed there:

* a private *attribute* is reached only through a function of this module
  (``THROUGH``): ruff's SLF rule is ignored for this module alone;
* a library method that a product class *overrides* (``OVERRIDES``; private or
  not, an override depends on when and how the library calls it), a private
  method it *calls* on itself (``CALLS``, inside those overrides), or an
  attribute of the library's it *replaces* on itself (``REPLACES``) is declared
  here by the library class's import path and the product class's.

``tests/stream/test_faustcompat.py`` resolves every entry on the installed versions
(faust-streaming is pinned to the minor version they were checked against in
pyproject.toml), builds the objects whose attributes are reached here, and
checks that the list is complete: every subclass of a library class in the
product is read for the methods it defines and the private members it uses on
itself, and any it finds unlisted fails the test, named.

Why here, in ``clients/``: the short-lived commands read an aiokafka
consumer's client too, and ``clients/`` must not import faust or mode
(``tests/product/test_layers.py``), so this module imports neither: attributes are
reached by name on the objects it is handed, and classes are named by their
import path, resolved only by the test. The corrected classes themselves stay
where they do their work (``worker/``), each override saying why.
"""

import asyncio
import importlib
from collections.abc import Awaitable, MutableMapping
from typing import Any, Final, NamedTuple, TypeVar

_T = TypeVar("_T")

#: How long Faust's table recovery waits for a changelog record before it looks again (its own: 5 s).
RECOVERY_IDLE_SECONDS: Final = 0.5
#: The module whose changelog wait that is; it calls ``asyncio.wait_for`` there and nowhere else.
RECOVERY_MODULE: Final = "faust.tables.recovery"

#: ``Member.how``: the product class ``by`` defines the library's method or class attribute ``name``.
OVERRIDES: Final = "overrides"
#: ``Member.how``: the product class ``by`` calls the library's private method ``name`` on itself.
CALLS: Final = "calls"
#: ``Member.how``: the product class ``by`` replaces the library's instance attribute ``name`` with its own.
REPLACES: Final = "replaces"
#: ``Member.how``: the function ``by`` of this module reads, sets, calls or replaces ``name``.
THROUGH: Final = "through"


class Member(NamedTuple):
    """One member of a library class (or module) the product relies on."""

    owner: str  # where the library defines it: "module:Class", or "module" for a module's global
    name: str
    how: str  # OVERRIDES, CALLS, REPLACES or THROUGH
    by: str  # a product class, "module:Class" under recurrence_ledger.processor.stream, or a function here


_WORKERAPP: Final = "worker.workerapp"
_TABLESTORE: Final = "worker.tablestore"
_FAUST_KAFKA: Final = "faust.transport.drivers.aiokafka"
_FAUST_CONSUMER: Final = "faust.transport.consumer"

MEMBERS: Final = (
    # The exactly_once sink, the probes and the short-lived commands.
    Member(f"{_FAUST_KAFKA}:Producer", "_transaction_producers", THROUGH, "transaction_producers"),
    Member(f"{_FAUST_KAFKA}:Producer", "_trn_locks", THROUGH, "transaction_locks"),
    Member(f"{_FAUST_KAFKA}:Producer", "_ensure_producer", THROUGH, "plain_producer"),
    Member("mode.services:Service", "_crashed", THROUGH, "crashed"),
    Member("aiokafka:AIOKafkaConsumer", "_client", THROUGH, "kafka_client"),
    Member("aiokafka:AIOKafkaConsumer", "_fetch_max_wait_ms", THROUGH, "set_fetch_max_wait"),
    # The cause of a failed transaction (an ACL revoked mid-run), which its records only report as InvalidTxnState.
    Member("aiokafka:AIOKafkaProducer", "_txn_manager", THROUGH, "transaction_failure"),
    Member(
        "aiokafka.producer.transaction_manager:TransactionManager",
        "_transaction_waiter",
        THROUGH,
        "transaction_failure",
    ),
    Member(RECOVERY_MODULE, "asyncio", THROUGH, "shorten_recovery_wait"),
    # workerapp: the app's transport, the consumer that hands whole fetches to the agents, and the
    # two exactly_once corrections (high watermarks read fresh; fresh transactional producers).
    Member("faust:App", "_new_transport", OVERRIDES, f"{_WORKERAPP}:WorkerApp"),
    Member("faust:App", "_crash", OVERRIDES, f"{_WORKERAPP}:WorkerApp"),
    Member(f"{_FAUST_KAFKA}:Transport", "Consumer", OVERRIDES, f"{_WORKERAPP}:_Transport"),
    Member(f"{_FAUST_KAFKA}:Transport", "TransactionManager", OVERRIDES, f"{_WORKERAPP}:_Transport"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_new_consumer_thread", OVERRIDES, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_drain_messages", OVERRIDES, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "wait_empty", OVERRIDES, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_wait_next_records", CALLS, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_to_message", CALLS, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_commit_offsets", CALLS, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_commit", CALLS, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_KAFKA}:Consumer", "_new_topicpartition", CALLS, f"{_WORKERAPP}:_Consumer"),
    Member(f"{_FAUST_CONSUMER}:Consumer", "_read_offset", THROUGH, "read_offsets"),
    Member(f"{_FAUST_CONSUMER}:Consumer", "_buffered_partitions", THROUGH, "buffered_partitions"),
    Member(f"{_FAUST_KAFKA}:AIOKafkaConsumerThread", "_highwaters", OVERRIDES, f"{_WORKERAPP}:_ConsumerThread"),
    Member(
        f"{_FAUST_KAFKA}:AIOKafkaConsumerThread", "_create_worker_consumer", OVERRIDES, f"{_WORKERAPP}:_ConsumerThread"
    ),
    Member(f"{_FAUST_KAFKA}:AIOKafkaConsumerThread", "_ensure_consumer", THROUGH, "thread_consumer"),
    Member(f"{_FAUST_CONSUMER}:TransactionManager", "on_rebalance", OVERRIDES, f"{_WORKERAPP}:_TransactionManager"),
    Member(
        f"{_FAUST_CONSUMER}:TransactionManager", "_start_transactions", OVERRIDES, f"{_WORKERAPP}:_TransactionManager"
    ),
    Member(f"{_FAUST_KAFKA}:Producer", "_new_producer", THROUGH, "new_transaction_producer"),
    Member("faust.tables:TableManager", "on_start", OVERRIDES, f"{_WORKERAPP}:WorkerTableManager"),
    Member("faust.tables:TableManager", "_update_channels", CALLS, f"{_WORKERAPP}:WorkerTableManager"),
    # webserver: Faust's aiohttp driver serving the read surface's routes and none of Faust's blueprints.
    Member("faust:App", "web", OVERRIDES, f"{_WORKERAPP}:WorkerApp"),
    *(
        Member("faust.web.drivers.aiohttp:Web", f"{kind}_blueprints", OVERRIDES, "worker.webserver:SurfaceWeb")
        for kind in ("default", "production", "debug", "optional")
    ),
    # tablestore: the engine state's table, its change-set stores and their RocksDB options.
    Member("faust:Table", "_new_store_by_url", OVERRIDES, f"{_TABLESTORE}:StateTable"),
    Member("faust.stores.rocksdb:Store", "_db_for_partition", OVERRIDES, f"{_TABLESTORE}:ChangeSetRocksStore"),
    Member("faust.stores.rocksdb:Store", "on_rebalance", OVERRIDES, f"{_TABLESTORE}:ChangeSetRocksStore"),
    Member("faust.stores.rocksdb:Store", "stop", OVERRIDES, f"{_TABLESTORE}:ChangeSetRocksStore"),
    Member("faust.stores.rocksdb:Store", "apply_changelog_batch", OVERRIDES, f"{_TABLESTORE}:ChangeSetRocksStore"),
    Member("faust.stores.rocksdb:Store", "rocksdb_options", REPLACES, f"{_TABLESTORE}:ChangeSetRocksStore"),
    Member("faust.stores.rocksdb:Store", "_dbs", THROUGH, "open_databases"),
    Member("faust.stores.rocksdb:RocksDBOptions", "open", OVERRIDES, f"{_TABLESTORE}:KeptRocksDBOptions"),
    Member("faust.stores.memory:Store", "apply_changelog_batch", OVERRIDES, f"{_TABLESTORE}:ChangeSetMemoryStore"),
    # aclsapply: Kafka's ACL requests carrying a whole set (aiokafka's own carry one ACL each), sent as its
    # admin client sends its requests.
    Member("aiokafka.protocol.api:Request", "build", OVERRIDES, "clients.aclsapply:_CreateAcls"),
    Member("aiokafka.protocol.api:Request", "build", OVERRIDES, "clients.aclsapply:_DeleteAcls"),
    Member("aiokafka.admin:AIOKafkaAdminClient", "_send_request", THROUGH, "admin_request"),
    # frameworklog: the root logger's handlers, once the worker has set them up, drop the framework's chatter.
    Member("faust:Worker", "on_setup_root_logger", OVERRIDES, "worker.frameworklog:Worker"),
    # frameworklog: a stop bounded by --stop-timeout from the first SIGTERM or SIGINT.
    Member("faust:Worker", "_on_sigterm", OVERRIDES, "worker.frameworklog:Worker"),
    Member("faust:Worker", "_on_sigint", OVERRIDES, "worker.frameworklog:Worker"),
)


def transaction_producer(app: Any, transactional_id: str) -> Any | None:
    """Faust's transactional producer for one id (``<app id>-<group>-<partition>``), if it exists."""
    return transaction_producers(app.producer).get(transactional_id)


def admin_request(admin: Any, request: Any) -> Awaitable[Any]:
    """Send a protocol request to any broker through an AIOKafkaAdminClient, as its own methods do."""
    response: Awaitable[Any] = admin._send_request(request)
    return response


def new_transaction_producer(producer: Any, transactional_id: str) -> Any:
    """A transactional AIOKafkaProducer for the id, configured as Faust's Producer makes one (not started)."""
    return producer._new_producer(transactional_id=transactional_id)


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


def transaction_failure(producer: Any) -> BaseException | None:
    """Why a transactional AIOKafkaProducer's open transaction failed (a partition it may not add, an
    offset commit the group refused), or None. Its records fail only with InvalidTxnState; the cause
    waits in its transaction manager until a commit raises it."""
    manager = getattr(producer, "_txn_manager", None)
    waiter = getattr(manager, "_transaction_waiter", None)
    if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
        return waiter.exception()
    return None


def set_fetch_max_wait(consumer: Any, milliseconds: int) -> None:
    """Set an AIOKafkaConsumer's fetch wait before it starts (its fetcher is built from it in ``start``)."""
    consumer._fetch_max_wait_ms = milliseconds


def thread_consumer(thread: Any) -> Any:
    """The AIOKafkaConsumer inside Faust's consumer thread (raises if it has not started)."""
    return thread._ensure_consumer()


def read_offsets(consumer: Any) -> MutableMapping[Any, int | None]:
    """A Faust consumer's offset of the last record handed on, per topic partition (it seeks from them)."""
    offsets: MutableMapping[Any, int | None] = consumer._read_offset
    return offsets


def buffered_partitions(consumer: Any) -> set[Any]:
    """The partitions a Faust consumer has paused for a full buffer (a new set after each rebalance)."""
    partitions: set[Any] = consumer._buffered_partitions
    return partitions


def open_databases(store: Any) -> dict[int, Any]:
    """A Faust RocksDB store's open databases by partition (opened on first use, closed on revocation)."""
    databases: dict[int, Any] = store._dbs
    return databases


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
