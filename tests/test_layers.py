"""The import graph points the way docs/architecture.md says: down, never back up.

schemas (the contract) <- the pure core (engine, ledger, state, store interface)
<- the runners (embedded, with its jobs/ room; stream) and the command line,
with the HTTP read surface (web/) between the runners and what serves it. Nothing in the core
reaches a backend (rocksdict), the Kafka clients (faust, aiokafka, mode) or a
runner, even indirectly; the stream path does not borrow from the embedded
runner. Test and benchmark support (dev/devkit) sits below tests/ and bench/:
neither it nor a benchmark imports tests, and the product imports none of
them. Imports inside functions count too.
"""

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"processor": "recurrence.processor", "schemas": "recurrence.schemas", "topics": "recurrence.topics"}

CORE = [
    "recurrence.processor.engine",
    "recurrence.processor.ledger",
    "recurrence.processor.matching",
    "recurrence.processor.admission",
    "recurrence.processor.statistics",
    "recurrence.processor.scopesummary",
    "recurrence.processor.state",
    "recurrence.processor.records",
    "recurrence.processor.deadletters",
    "recurrence.processor.exceptions",
    "recurrence.processor.store.base",
    "recurrence.processor.store.memory",
    "recurrence.processor.whatif",
]
BACKENDS = ("rocksdict", "faust", "aiokafka", "mode", "aiohttp", "yarl", "prometheus_client")
RUNNERS = ("recurrence.processor.embedded", "recurrence.processor.stream", "recurrence.processor.cli")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(name: str) -> Iterator[str]:
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES)


@cache
def closure(name: str) -> frozenset[str]:
    """Everything ``name`` imports, transitively through the project's own modules."""
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        for imported in _imports(current):
            if imported in seen:
                continue
            seen.add(imported)
            if imported in MODULES:
                pending.append(imported)
    return frozenset(seen)


def _reaches(name: str, prefixes: tuple[str, ...]) -> list[str]:
    return sorted(i for i in closure(name) if any(i == p or i.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("name", CORE)
def test_the_core_reaches_no_backend_and_no_runner(name: str) -> None:
    assert _reaches(name, BACKENDS) == []
    assert _reaches(name, RUNNERS) == []
    assert _reaches(name, ("recurrence.processor.store.rocksdb", "recurrence.topics")) == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("recurrence.schemas")))
def test_the_contract_imports_nothing_of_the_processor(name: str) -> None:
    assert _reaches(name, ("recurrence.processor", "recurrence.topics")) == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("recurrence.processor.stream")))
def test_the_stream_path_does_not_borrow_from_the_embedded_runner(name: str) -> None:
    assert _reaches(name, ("recurrence.processor.embedded",)) == []


STREAM = "recurrence.processor.stream"
# The stream folder's rooms, lowest first: each imports only from the rooms before it (and the
# settings and flags at the folder's root, below them all); the command line sits on top.
ROOMS = ("batch", "clients", "worker")


def _in(room: str) -> list[str]:
    return sorted(n for n in MODULES if n.startswith(f"{STREAM}.{room}."))


@pytest.mark.parametrize("room", ROOMS)
def test_the_stream_rooms_import_only_downwards(room: str) -> None:
    above = [f"{STREAM}.{r}" for r in ROOMS[ROOMS.index(room) + 1:]] + [f"{STREAM}.cli"]
    assert _in(room)
    for name in _in(room):
        assert _reaches(name, tuple(above)) == [], name


@pytest.mark.parametrize("name", _in("batch"))
def test_the_batch_path_needs_no_kafka_client(name: str) -> None:
    # The batch core runs against the interfaces in batch/types; tests drive it without a broker.
    assert _reaches(name, ("faust", "mode", "aiokafka")) == []


@pytest.mark.parametrize("name", _in("clients"))
def test_the_short_lived_commands_need_no_faust(name: str) -> None:
    assert _reaches(name, ("faust", "mode")) == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("recurrence.topics")))
def test_the_topic_definitions_import_nothing_of_the_processor(name: str) -> None:
    # The arrow points one way: the stream code reads the definitions, never the reverse.
    assert _reaches(name, ("recurrence.processor",)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_inside_the_package_are_relative(name: str) -> None:
    # So a reader (or an import-graph tool) resolves each one from the tree alone, without
    # src/recurrence's links.
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    absolute = [
        node.lineno for node in ast.walk(tree)
        if (isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "recurrence")
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "recurrence" for a in node.names))
    ]
    assert absolute == [], f"{MODULES[name]}: absolute imports of recurrence at lines {absolute}"


def test_reading_outputs_back_needs_no_faust() -> None:
    assert _reaches("recurrence.processor.stream.clients.dump", ("faust", "mode")) == []


WEB = "recurrence.processor.web"
JOBS = "recurrence.processor.jobs"


@pytest.mark.parametrize(
    "name", [*sorted(n for n in MODULES if n.startswith(f"{WEB}.")), "recurrence.processor.recordindex"]
)
def test_the_embedded_read_surface_needs_no_kafka(name: str) -> None:
    # ``recurrence serve`` runs where no broker and no Faust are: aiohttp and the state only.
    assert _reaches(name, ("faust", "mode", "aiokafka", "recurrence.processor.stream")) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_web_and_jobs_rooms_are_reached_only_from_above(name: str) -> None:
    # jobs/ is the embedded runner's machinery (only embedded.py drives it); web/ sits above the runners,
    # under the command lines and the worker that serve it.
    if not name.startswith((f"{JOBS}.", "recurrence.processor.embedded")):
        assert [i for i in _imports(name) if i == JOBS or i.startswith(f"{JOBS}.")] == [], name
    users = ("recurrence.processor.cli", f"{WEB}.", "recurrence.processor.stream.")
    if not name.startswith(users):
        assert _reaches(name, (WEB,)) == [], name


def test_the_record_index_is_core() -> None:
    assert _reaches("recurrence.processor.recordindex", BACKENDS + RUNNERS) == []


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add((node.module or "").split(".")[0])
    return names


DEVKIT = sorted((ROOT / "dev" / "devkit").rglob("*.py"))
BENCH = sorted((ROOT / "bench").rglob("*.py"))


@pytest.mark.parametrize("path", DEVKIT + BENCH, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_dev_kit_and_the_benchmarks_do_not_import_tests(path: Path) -> None:
    # What tests and benchmarks share lives in dev/devkit, below both: neither reaches into tests/.
    assert "tests" not in _top_level_imports(path)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_product_never_imports_the_dev_kit(name: str) -> None:
    # devkit is not in the wheel: a product module that needed it would fail where it is installed.
    assert _reaches(name, ("devkit", "tests", "bench")) == []


TESTS = sorted((ROOT / "tests").rglob("*.py"))


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another(path: Path) -> None:
    # What several test modules share lives in a helper module (batchfakes, builders, kafka/workerchecks,
    # ...) or in dev/devkit, never in a test module that another one imports.
    borrowed = [
        node.module for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1].startswith("test_")
        and (node.level or node.module.split(".")[0] == "tests")  # a library's own (aiohttp.test_utils) is not one
    ]
    assert borrowed == []


def test_the_benchmarks_drive_deployments_through_the_dev_kit() -> None:
    assert DEVKIT and any("devkit" in _top_level_imports(path) for path in BENCH)


def test_the_check_sees_the_core() -> None:
    # A guard against a vacuous pass: the engine reaches the schemas and pydantic.
    assert _reaches("recurrence.processor.engine", ("recurrence.schemas", "pydantic"))
    assert set(CORE) <= set(MODULES)
