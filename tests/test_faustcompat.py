"""The Faust/mode/aiokafka internals the worker relies on are still where it expects them.

A new faust-streaming release that moves any of these fails here, naming the
attribute, instead of failing a worker mid-batch in production.
"""

import asyncio
from importlib.metadata import version
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaConsumer

from recurrence.processor.stream.clients import faustcompat
from recurrence.processor.stream.worker import workerapp
from recurrence.processor.stream.worker.app import stalled


@pytest.fixture
def app(tmp_path: Path) -> faust.App:
    return faust.App("compat", broker="kafka://127.0.0.1:1", store="memory://", datadir=str(tmp_path))


def test_the_pinned_faust_version_is_the_one_checked() -> None:
    major, minor, *_ = version("faust-streaming").split(".")
    assert (int(major), int(minor)) == (0, 15), "re-check faustcompat against this faust-streaming first"


@pytest.mark.parametrize("attribute", faustcompat.PRODUCER_ATTRIBUTES)
def test_the_producer_keeps_its_transactional_producers_and_locks(app: faust.App, attribute: str) -> None:
    assert isinstance(getattr(app.producer, attribute, None), dict), f"faust Producer.{attribute} moved"
    assert faustcompat.transaction_producer(app, "no-such-id") is None


def test_a_transaction_lock_is_an_asyncio_lock(app: faust.App) -> None:
    locks = getattr(app.producer, "_trn_locks")  # noqa: B009 - the private attribute under test
    locks["compat-test"] = asyncio.Lock()
    try:
        assert isinstance(faustcompat.transaction_lock(app, "compat-test"), asyncio.Lock)
    finally:
        del locks["compat-test"]


@pytest.mark.parametrize("attribute", faustcompat.SERVICE_ATTRIBUTES)
def test_an_agent_has_the_crashed_event(app: faust.App, attribute: str) -> None:
    @app.agent()
    async def agent(stream: object) -> None:  # pragma: no cover - never run
        return None

    assert hasattr(agent, attribute), f"mode Service.{attribute} moved"
    assert faustcompat.crashed(agent) is False
    getattr(agent, attribute).set()
    assert faustcompat.crashed(agent) is True


@pytest.mark.parametrize("attribute", faustcompat.CONSUMER_ATTRIBUTES)
def test_an_aiokafka_consumer_has_its_client(attribute: str) -> None:
    async def build() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        assert hasattr(consumer, attribute), f"AIOKafkaConsumer.{attribute} moved"
        assert hasattr(faustcompat.kafka_client(consumer), "fetch_all_metadata")

    asyncio.run(build())


@pytest.mark.parametrize(
    ("progress", "position", "highwater", "now", "expected"),
    [
        (None, 5, 5, 10.0, ((5, 10.0), False)),  # caught up
        (None, None, 0, 10.0, ((None, 10.0), False)),  # an empty partition
        (None, 5, 9, 10.0, ((5, 10.0), False)),  # behind: start timing
        ((5, 10.0), 5, 9, 12.0, ((5, 10.0), False)),  # behind, not long enough
        ((5, 10.0), 5, 9, 14.0, ((5, 10.0), True)),  # behind and still for 4 s: stalled
        ((5, 10.0), 7, 9, 14.0, ((7, 14.0), False)),  # it moved: timing starts again
        ((None, 1.0), None, 3, 6.0, ((None, 1.0), True)),  # nothing applied yet and entries waiting
    ],
)
def test_the_stall_rule(
    progress: tuple[int | None, float] | None,
    position: int | None,
    highwater: int,
    now: float,
    expected: tuple[tuple[int | None, float], bool],
) -> None:
    assert stalled(progress, position, highwater, now, 4.0) == expected


@pytest.mark.parametrize(("owner", "method"), workerapp.OVERRIDDEN, ids=lambda v: getattr(v, "__name__", v))
def test_the_methods_the_worker_app_overrides_still_exist(owner: type, method: str) -> None:
    assert callable(getattr(owner, method, None)), f"{owner.__qualname__}.{method} moved"


def test_the_worker_app_runs_on_the_corrected_transport(tmp_path: Path) -> None:
    app = workerapp.WorkerApp("compat-w", broker="kafka://127.0.0.1:1", store="memory://", datadir=str(tmp_path))
    transport = app.transport
    assert transport.Consumer.__name__ == "_Consumer"
    assert transport.TransactionManager.__name__ == "_TransactionManager"


def test_faust_recovery_waits_for_changelog_records_with_asyncio_wait_for_only_there() -> None:
    """``shorten_recovery_wait`` bounds the recovery module's one ``asyncio.wait_for``: it must still be the
    changelog wait (a new call there would be bounded too, a moved one would not be)."""
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(faustcompat.RECOVERY_MODULE))
    assert source.count("asyncio.wait_for(") == 1, "faust recovery's waits changed: re-check shorten_recovery_wait"
    assert "changelog_queue.get(), timeout=5.0" in source
    assert "detect_aborted_tx" in source


def test_the_shortened_recovery_wait_times_out_sooner_and_leaves_asyncio_alone() -> None:
    import importlib

    recovery = vars(importlib.import_module(faustcompat.RECOVERY_MODULE))
    before = recovery["asyncio"]
    try:
        faustcompat.shorten_recovery_wait(0.01)
        faustcompat.shorten_recovery_wait(0.01)  # idempotent: still one wrapper over the real module
        assert recovery["asyncio"].__getattr__("Queue") is asyncio.Queue
        assert recovery["asyncio"].TimeoutError is asyncio.TimeoutError

        async def run() -> tuple[bool, int]:
            queue: asyncio.Queue[int] = asyncio.Queue()
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                await recovery["asyncio"].wait_for(queue.get(), timeout=5.0)
            except TimeoutError:
                timed_out = loop.time() - started < 4.0
            else:  # pragma: no cover - the queue is empty
                timed_out = False
            queue.put_nowait(7)
            return timed_out, await recovery["asyncio"].wait_for(queue.get(), timeout=5.0)

        timed_out, value = asyncio.run(run())
        assert timed_out, "the 5 s changelog wait was not shortened"
        assert value == 7
        assert asyncio.wait_for is not recovery["asyncio"].wait_for  # only the recovery module sees the bound
    finally:
        recovery["asyncio"] = before
