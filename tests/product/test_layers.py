"""The import graph points the way docs/architecture.md says: down, never back up.

The package's wings, lowest first: the contract (schemas) and the topic definitions; the exceptions;
the state stores; the pure core; the host (files, signals, the terminal); the embedded runner; the
commands' own modules; the HTTP read surface; the Kafka stream path; the command line. A module imports
its own wing and the wings below it, never one above. Beside that order: the core reaches no backend, no
I/O and no clock, even indirectly; the stream path borrows nothing from the embedded runner; the read
surface needs no Kafka client; inside the stream path batch/ < clients/ < worker/. Test and benchmark
support (dev/devkit) sits below tests/ and bench/, and the product imports none of them. Imports inside
functions count too.

Every rule is checked in one test that lists every offender, so one run shows all that is wrong.
"""

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "processor": "recurrence_ledger.processor",
    "schemas": "recurrence_ledger.schemas",
    "topics": "recurrence_ledger.topics",
}
P: Final = "recurrence_ledger.processor"

WINGS: Final = (
    ("recurrence_ledger.schemas",),
    ("recurrence_ledger.topics",),
    (f"{P}.exceptions",),
    (f"{P}.store",),
    (f"{P}.core",),
    (f"{P}.host",),
    (f"{P}.embedded",),
    (
        f"{P}.explain",
        f"{P}.repairloop",
        f"{P}.repairreport",
        f"{P}.verify",
        f"{P}.synthetic",
        f"{P}.tune",
        f"{P}.statstable",
        f"{P}.cliargs",
    ),
    (f"{P}.web",),
    (f"{P}.stream",),
    (f"{P}.cliparser", f"{P}.cli"),
)
#: The core's closure may hold none of these: a store backend, a Kafka or web client, the host's I/O,
#: a clock or randomness (the engine is a pure function of its state and the next entry).
IMPURE: Final = (
    "rocksdict",
    "faust",
    "aiokafka",
    "mode",
    "aiohttp",
    "yarl",
    "prometheus_client",
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "socket",
    "subprocess",
    "threading",
    "multiprocessing",
    "signal",
    "asyncio",
    "time",
    "datetime",
    "random",
    "secrets",
    f"{P}.host",
    f"{P}.store.rocksdb",
    f"{P}.embedded",
    f"{P}.stream",
    f"{P}.web",
    f"{P}.cli",
    "recurrence_ledger.topics",
)
#: The store interface the core runs against, beside the core itself.
PURE_STORE: Final = (f"{P}.store.base", f"{P}.store.memory")
KAFKA_CLIENTS: Final = ("faust", "mode", "aiokafka")
STREAM: Final = f"{P}.stream"
#: The stream folder's rooms, lowest first (its settings and flags at the folder's root sit below them all).
STREAM_ROOMS: Final = ("batch", "clients", "worker")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES: Final = _modules()


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@cache
def _imports(name: str) -> tuple[str, ...]:
    return tuple(_read_imports(name))


def _read_imports(name: str) -> Iterator[str]:
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
    return sorted(i for i in closure(name) if _within(i, prefixes))


def _wing(name: str) -> int | None:
    return next((level for level, wing in enumerate(WINGS) if _within(name, wing)), None)


def _upward_imports() -> Iterator[str]:
    for name in MODULES:
        own = _wing(name)
        for imported in _imports(name):
            level = _wing(imported)
            if own is not None and level is not None and level > own:
                yield f"{name} imports {imported}, a wing above its own"


def _impure_core() -> Iterator[str]:
    for name in [n for n in MODULES if _within(n, (f"{P}.core",))] + list(PURE_STORE):
        yield from (f"{name} reaches {i}" for i in _reaches(name, IMPURE))


def _stream_rooms() -> Iterator[str]:
    for index, room in enumerate(STREAM_ROOMS):
        above = (*(f"{STREAM}.{r}" for r in STREAM_ROOMS[index + 1 :]), f"{STREAM}.cli")
        for name in [n for n in MODULES if n.startswith(f"{STREAM}.{room}.")]:
            yield from (f"{name} reaches {i}, a room above its own" for i in _reaches(name, above))
            if room == "batch":  # the batch core runs against batch/types' interfaces, without a broker
                yield from (f"{name} reaches {i}" for i in _reaches(name, KAFKA_CLIENTS))
            if room == "clients":  # the short-lived commands need no Faust
                yield from (f"{name} reaches {i}" for i in _reaches(name, ("faust", "mode")))


def _borrowing() -> Iterator[str]:
    for name in MODULES:
        if _within(name, (STREAM,)):
            yield from (
                f"{name} reaches {i} (the stream path borrows from the embedded runner)"
                for i in _reaches(name, (f"{P}.embedded",))
            )
        if _within(name, (f"{P}.web", f"{P}.embedded", f"{P}.explain")):
            # ``recurrence serve`` runs where no broker and no Faust are: aiohttp and the state only.
            yield from (f"{name} reaches {i}" for i in _reaches(name, (*KAFKA_CLIENTS, STREAM)))
        if _within(name, ("recurrence_ledger.schemas", "recurrence_ledger.topics")):
            yield from (
                f"{name} reaches {i}"
                for i in _reaches(
                    name, (P,) + (("recurrence_ledger.topics",) if name.startswith("recurrence_ledger.schemas") else ())
                )
            )
        # devkit is not in the wheel: a product module that needed it would fail where it is installed.
        yield from (f"{name} reaches {i}" for i in _reaches(name, ("devkit", "tests", "bench")))


def _absolute_imports() -> Iterator[str]:
    # Inside the package every import is relative, so a reader (or an import-graph tool) resolves each
    # one from the tree alone, without src/recurrence_ledger's links.
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and not node.level
                and (node.module or "").split(".")[0] == "recurrence"
            ) or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "recurrence" for a in node.names)):
                yield f"{path.relative_to(ROOT)}:{node.lineno} imports recurrence absolutely"


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add((node.module or "").split(".")[0])
    return names


DEVKIT: Final = sorted((ROOT / "dev" / "devkit").rglob("*.py"))
BENCH: Final = sorted((ROOT / "bench").rglob("*.py"))
TESTS: Final = sorted((ROOT / "tests").rglob("*.py"))


def _support() -> Iterator[str]:
    # What tests and benchmarks share lives in dev/devkit, below both: neither reaches into tests/.
    for path in DEVKIT + BENCH:
        if "tests" in _top_level_imports(path):
            yield f"{path.relative_to(ROOT)} imports tests"
    # What several test modules share lives in a helper module (batchfakes, builders, ...) or in
    # dev/devkit, never in a test module that another one imports.
    for path in TESTS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[-1].startswith("test_")
                and (node.level or node.module.split(".")[0] == "tests")
            ):  # not a library's (aiohttp.test_utils)
                yield f"{path.relative_to(ROOT)} imports the test module {node.module}"
    if not any("devkit" in _top_level_imports(path) for path in BENCH):
        yield "no benchmark drives a deployment through dev/devkit"


def test_every_import_follows_the_house_rules() -> None:
    offenders = [
        *_upward_imports(),
        *_impure_core(),
        *_stream_rooms(),
        *_borrowing(),
        *_absolute_imports(),
        *_support(),
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_rules_see_the_house() -> None:
    # Guards against a vacuous pass: every module is in a wing, the core reaches the schemas and pydantic,
    # and a known upward import would be caught.
    assert [n for n in MODULES if n.startswith(P + ".") and _wing(n) is None] == []
    assert _reaches(f"{P}.core.engine", ("recurrence_ledger.schemas", "pydantic"))
    assert _reaches(f"{P}.embedded.runner", ("rocksdict",))
    assert _wing(f"{P}.core.engine") is not None and _wing(f"{P}.cli") == len(WINGS) - 1
    assert any(_within(i, (f"{P}.core",)) for i in _imports(f"{P}.embedded.runner"))
    assert STREAM_ROOMS and all(any(n.startswith(f"{STREAM}.{r}.") for n in MODULES) for r in STREAM_ROOMS)
