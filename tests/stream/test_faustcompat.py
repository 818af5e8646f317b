"""The Faust/mode/aiokafka members the product relies on beyond their public API are still where it expects them.

A new faust-streaming release that moves any of these fails here, naming the
member, instead of failing a worker mid-batch in production. The list itself
(``faustcompat.MEMBERS``) is checked for completeness: every subclass of a
library class in the product is read for the methods it overrides and the
private members it uses on itself, and nothing else in the product names a
private attribute.
"""

import ast
import asyncio
import importlib
import inspect
import pkgutil
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import TopicAuthorizationFailedError

import recurrence_ledger.processor
from recurrence_ledger.processor.stream.clients import faustcompat
from recurrence_ledger.processor.stream.clients.faustcompat import CALLS, MEMBERS, OVERRIDES, REPLACES, THROUGH, Member
from recurrence_ledger.processor.stream.worker import workerapp
from recurrence_ledger.processor.stream.worker.app import stalled
from recurrence_ledger.processor.stream.worker.tablestore import StateTable

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("faust", "mode", "aiokafka")
COMPAT_MODULE = "processor/stream/clients/faustcompat.py"


@pytest.fixture
def app(tmp_path: Path) -> faust.App:
    return faust.App("compat", broker="kafka://127.0.0.1:1", store="memory://", datadir=str(tmp_path))


def _resolve(path: str) -> Any:
    """A "module:Class" (or "module") path of the library, or of the product's stream wing."""
    module, _, qualname = path.partition(":")
    if module.split(".")[0] not in LIBRARIES:
        module = f"recurrence_ledger.processor.stream.{module}"
    found: Any = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    return found


def _label(member: Member) -> str:
    return f"{member.owner}.{member.name}"


def test_the_pinned_faust_version_is_the_one_checked() -> None:
    major, minor, *_ = version("faust-streaming").split(".")
    assert (int(major), int(minor)) == (0, 15), "re-check faustcompat against this faust-streaming first"


def test_every_member_is_listed_once_and_names_what_it_is() -> None:
    assert len(set(MEMBERS)) == len(MEMBERS)
    assert {m.how for m in MEMBERS} == {OVERRIDES, CALLS, REPLACES, THROUGH}
    for member in MEMBERS:
        if member.how == THROUGH:
            assert callable(getattr(faustcompat, member.by, None)), f"{member.by} is not a function of faustcompat"
        else:
            assert ":" in member.by, member


@pytest.mark.parametrize("member", [m for m in MEMBERS if m.how != THROUGH], ids=_label)
def test_the_methods_the_product_overrides_or_calls_and_the_attributes_it_replaces_still_exist(member: Member) -> None:
    owner = _resolve(member.owner)
    user = _resolve(member.by)
    if member.how == REPLACES:  # an instance attribute: the library declares it
        assert member.name in getattr(owner, "__annotations__", {}), f"{member.owner}.{member.name} moved"
    elif member.how == CALLS:
        assert callable(getattr(owner, member.name, None)), f"{member.owner}.{member.name} moved"
    else:  # a method, a property or a class attribute
        assert hasattr(owner, member.name), f"{member.owner}.{member.name} moved"
    assert issubclass(user, owner), f"{member.by} no longer derives from {member.owner}"
    if member.how == OVERRIDES:
        assert member.name in vars(user), f"{member.by} no longer overrides {member.name}: drop it from MEMBERS"


def _instances(tmp_path: Path) -> Iterator[tuple[Any, Callable[[], None]]]:
    """One built object per library class whose members are reached through a faustcompat function."""
    app = workerapp.WorkerApp("compat-i", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(tmp_path))
    table = StateTable(app, name="t", key_type=bytes, value_type=bytes, partitions=1)
    app.tables.add(table)

    @app.agent()
    async def agent(stream: object) -> None:  # pragma: no cover - never run
        return None

    yield app.producer, lambda: None
    yield agent, lambda: None
    yield app.consumer, lambda: None
    yield getattr(app.consumer, "_thread"), lambda: None  # noqa: B009 - how Faust's consumer keeps its thread
    yield table.data, lambda: None
    yield importlib.import_module(faustcompat.RECOVERY_MODULE), lambda: None
    loop = asyncio.new_event_loop()
    consumer = loop.run_until_complete(_consumer())
    yield consumer, lambda: None
    producer = loop.run_until_complete(_transactional_producer())
    yield producer, lambda: None
    yield loop.run_until_complete(_admin()), lambda: None
    yield getattr(producer, "_txn_manager"), loop.close  # noqa: B009 - how aiokafka keeps a producer's transactions


async def _consumer() -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")


async def _admin() -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:1")


async def _transactional_producer() -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="compat-t")


def test_a_failed_transaction_gives_its_cause() -> None:
    async def check() -> None:
        producer = await _transactional_producer()
        assert faustcompat.transaction_failure(producer) is None
        manager = getattr(producer, "_txn_manager")  # noqa: B009 - the private attribute under test
        manager.set_pid_and_epoch(1, 0)  # as InitProducerId leaves it
        manager.begin_transaction()
        manager.error_transaction(TopicAuthorizationFailedError({"t.ledger"}))
        failure = faustcompat.transaction_failure(producer)
        assert isinstance(failure, TopicAuthorizationFailedError) and failure.args == ({"t.ledger"},)

    asyncio.run(check())


@pytest.mark.parametrize("member", [m for m in MEMBERS if m.how == THROUGH], ids=_label)
def test_the_attributes_reached_through_faustcompat_are_on_the_objects_it_is_handed(
    member: Member, tmp_path: Path
) -> None:
    owner = _resolve(member.owner)
    built = []
    for instance, close in _instances(tmp_path):
        if instance is owner or isinstance(instance, owner if isinstance(owner, type) else ()):
            built.append(instance)
        close()
    assert built, f"no {member.owner} is built here: add one to _instances"
    assert hasattr(built[0], member.name), f"{member.owner}.{member.name} moved"


def test_the_producer_keeps_its_transactional_producers_and_locks(app: faust.App) -> None:
    assert isinstance(faustcompat.transaction_producers(app.producer), dict)
    assert isinstance(faustcompat.transaction_locks(app.producer), dict)
    assert faustcompat.transaction_producer(app, "no-such-id") is None


def test_a_transaction_lock_is_an_asyncio_lock(app: faust.App) -> None:
    locks = faustcompat.transaction_locks(app.producer)
    locks["compat-test"] = asyncio.Lock()
    try:
        assert isinstance(faustcompat.transaction_lock(app, "compat-test"), asyncio.Lock)
    finally:
        del locks["compat-test"]


def test_an_agent_has_the_crashed_event(app: faust.App) -> None:
    @app.agent()
    async def agent(stream: object) -> None:  # pragma: no cover - never run
        return None

    assert faustcompat.crashed(agent) is False
    getattr(agent, "_crashed").set()  # noqa: B009 - the private attribute under test
    assert faustcompat.crashed(agent) is True


def test_an_aiokafka_consumer_has_its_client_and_its_fetch_wait() -> None:
    async def build() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        assert hasattr(faustcompat.kafka_client(consumer), "fetch_all_metadata")
        faustcompat.set_fetch_max_wait(consumer, 123)
        assert getattr(consumer, "_fetch_max_wait_ms") == 123  # noqa: B009 - the private attribute under test

    asyncio.run(build())


def test_the_worker_consumer_and_store_expose_what_the_corrections_read(tmp_path: Path) -> None:
    app = workerapp.WorkerApp("compat-c", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(tmp_path))
    table = StateTable(app, name="t", key_type=bytes, value_type=bytes, partitions=1)
    app.tables.add(table)
    assert faustcompat.read_offsets(app.consumer)["no-such-tp"] is None  # Faust's defaultdict: unread is None
    assert faustcompat.buffered_partitions(app.consumer) == set()
    assert faustcompat.open_databases(table.data) == {}


# -- completeness: the product's subclasses of library classes, read -------------------------------------


def _is_library(cls: type) -> bool:
    return cls.__module__.split(".")[0] in LIBRARIES


def _product_subclasses() -> list[type]:
    found: set[type] = set()
    for info in pkgutil.walk_packages(recurrence_ledger.processor.__path__, "recurrence_ledger.processor."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and any(_is_library(base) for base in cls.__mro__[1:]):
                found.add(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def _class_tree(cls: type) -> ast.ClassDef:
    node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(node, ast.ClassDef)
    return node


def _body_names(node: ast.ClassDef) -> set[str]:
    """Names a class body defines: its methods and class attributes."""
    names: set[str] = set()
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign):
            names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
    return names


def _set_on_self(node: ast.ClassDef) -> set[str]:
    return {
        inner.attr
        for inner in ast.walk(node)
        if isinstance(inner, ast.Attribute)
        and isinstance(inner.ctx, ast.Store)
        and isinstance(inner.value, ast.Name)
        and inner.value.id == "self"
    }


def _library_has(cls: type, name: str) -> bool:
    return any(
        _is_library(base) and (name in vars(base) or name in getattr(base, "__annotations__", {}))
        for base in cls.__mro__
    )


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _uses(cls: type) -> set[tuple[str, str]]:
    """(how, name) for what ``cls`` relies on of its library bases, read from its source."""
    node = _class_tree(cls)
    product_bases = [_class_tree(b) for b in cls.__mro__ if b.__module__.startswith("recurrence_ledger.processor.")]
    own = set().union(*(_body_names(b) | _set_on_self(b) for b in product_bases))
    overridden = {
        name
        for name in _body_names(node)
        if not _dunder(name) and any(_is_library(base) and hasattr(base, name) for base in cls.__mro__)
    }
    found = {(OVERRIDES, name) for name in overridden}
    found |= {(REPLACES, name) for name in _set_on_self(node) if _library_has(cls, name)}
    for inner in ast.walk(node):
        if not isinstance(inner, ast.Attribute) or not inner.attr.startswith("_") or _dunder(inner.attr):
            continue
        target = inner.value
        if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "super":
            if inner.attr not in overridden:
                found.add((CALLS, inner.attr))
        elif isinstance(target, ast.Name) and target.id == "self" and inner.attr not in own:
            found.add((CALLS, inner.attr))  # a library attribute, unless it is a method (then listed)
    return found


def _qualified(cls: type) -> str:
    return f"{cls.__module__.removeprefix('recurrence_ledger.processor.stream.')}:{cls.__qualname__}"


def test_the_list_names_every_override_and_private_call_of_the_product_and_nothing_more() -> None:
    subclasses = _product_subclasses()
    assert {c.__qualname__ for c in subclasses} >= {"WorkerApp", "_Consumer", "StateTable", "ChangeSetRocksStore"}
    found = {(_qualified(cls), how, name) for cls in subclasses for how, name in _uses(cls)}
    listed = {(m.by, m.how, m.name) for m in MEMBERS if m.how != THROUGH}
    assert sorted(found - listed) == [], "unlisted in faustcompat.MEMBERS (a private attribute: reach it there)"
    assert sorted(listed - found) == [], "listed in faustcompat.MEMBERS but no longer used"


def _outside_compat(offends: Callable[[ast.AST], bool]) -> list[str]:
    """Where a product module other than ``faustcompat`` has a node ``offends`` picks (path:line)."""
    offenders = []
    for path in (ROOT / "processor").rglob("*.py"):
        if path.relative_to(ROOT).as_posix() == COMPAT_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if offends(node):
                offenders.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    return offenders


def test_no_other_module_names_a_private_attribute_by_string() -> None:
    # ruff's SLF rule sees ``x._y``; ``getattr(x, "_y")`` would slip past it.
    def offends(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        )

    assert _outside_compat(offends) == []


def test_no_other_module_imports_a_private_name_of_a_library() -> None:
    # ``from faust.web.base import _BPList`` is a private member too, and ruff's SLF rule does not see imports.
    def offends(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] in LIBRARIES
            and any(alias.name.startswith("_") for alias in node.names)
        )

    assert _outside_compat(offends) == []


def test_the_private_member_rule_is_lifted_for_the_compat_module_alone() -> None:
    ignores = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    lifted = sorted(path for path, rules in ignores["per-file-ignores"].items() if "SLF001" in rules or "SLF" in rules)
    assert lifted == sorted([COMPAT_MODULE, "tests/**"])
    assert "SLF" in ignores["select"]
    noqa = [p for p in (ROOT / "processor").rglob("*.py") if "noqa: SLF" in p.read_text(encoding="utf-8")]
    assert noqa == []


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
