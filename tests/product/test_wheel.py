"""The installed wheel is the product: built from the tree, installed alone, run from elsewhere.

Nothing of the checkout is on the path: a fresh virtual environment outside the
tree gets the wheel (and its dependencies from the index), and every command
runs from an empty folder that holds an application's own ``schemas`` and
``topics`` packages, which must stay its own.
"""

import json
import os
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.once import built_once, built_wheel, pip

#: make test-fast leaves the wheel builds to make test.
pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"
SHIPPED = ("processor", "schemas", "topics")


def _tree_modules() -> set[str]:
    names = set()
    for folder in SHIPPED:
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            names.add(".".join(["recurrence_ledger", *(p for p in parts if p != "__init__")]))
    return names | {"recurrence_ledger"}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_wheel(tmp_path_factory)


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def install(env_dir: Path) -> None:
        # A fresh environment without pip of its own: this interpreter's pip installs into it (--python).
        venv.create(env_dir, clear=True, with_pip=False)
        python = str(env_dir / "bin" / "python")
        done = pip("--python", python, "install", "-q", "--disable-pip-version-check", str(wheel), timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    return built_once(tmp_path_factory, "venv", install)


@pytest.fixture
def application(tmp_path: Path) -> Path:
    """An empty working folder with an application's own ``schemas`` and ``topics`` packages."""
    folder = tmp_path / "app"
    for name in ("schemas", "topics"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"OWNER = 'the application'\nNAME = {name!r}\n")
    return folder


def _run(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_wheel_holds_every_module_of_the_package_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    modules = {n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in names if n.endswith(".py")}
    assert modules == _tree_modules()
    assert not any(n.startswith(("tests/", "bench/", "src/", "processor/", "schemas/", "topics/")) for n in names)
    # Package data comes along the same way: the page and the JSON Schemas.
    data = {n for n in names if not n.endswith(".py")}
    assert {
        f"recurrence_ledger/processor/web/ui/{f}" for f in ("index.html", "app.js", "app.css", "favicon.ico")
    } <= data
    schemas = {p.name for p in (REPO / "schemas" / "json").glob("*.json")}
    assert schemas and {f"recurrence_ledger/schemas/json/{s}" for s in schemas} <= data
    assert "recurrence_ledger/py.typed" in data


def test_the_installed_wheel_imports_every_module(installed: Path, application: Path) -> None:
    script = (
        "import importlib, json, pkgutil, recurrence_ledger, schemas, topics\n"
        "package = recurrence_ledger\n"
        "names = [package.__name__] + [m.name for m in pkgutil.walk_packages(package.__path__, 'recurrence_ledger.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(json.dumps({'modules': names, 'file': recurrence_ledger.__file__,"
        " 'own': [schemas.OWNER, topics.OWNER]}))\n"
    )
    done = _run(installed, application, "python", "-c", script)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report["modules"]) == _tree_modules()
    assert Path(report["file"]).is_relative_to(installed)
    assert report["own"] == ["the application", "the application"]


def test_the_installed_commands_run_the_bundled_example(installed: Path, application: Path) -> None:
    state, ledger = application.parent / "state", application.parent / "ledger.jsonl"
    replay = _run(
        installed, application, "recurrence", "replay", str(EXAMPLE), "--state", str(state), "--out", str(ledger)
    )
    assert replay.returncode == 0, replay.stderr[-3000:]
    stats = _run(installed, application, "recurrence", "stats", "--state", str(state))
    assert stats.returncode == 0, stats.stderr[-3000:]
    assert json.loads(stats.stdout) == json.loads((REPO / "examples" / "rfc-minimum.expected-stats.json").read_text())
    recurred = next(r for r in map(json.loads, ledger.read_text().splitlines()) if r.get("event") == "recurred")
    explain = _run(installed, application, "recurrence", "explain", recurred["observation_id"], "--state", str(state))
    assert explain.returncode == 0, explain.stderr[-3000:]
    assert "recurred for experience/E7@" in explain.stdout
    for command in ("worker", "serve"):
        shown = _run(installed, application, "recurrence", command, "--help")
        assert shown.returncode == 0, shown.stderr[-3000:]
        assert f"usage: recurrence {command}" in shown.stdout


def test_the_installed_serve_follows_its_state_and_ledger_dump_reads_its_flags(
    installed: Path, application: Path
) -> None:
    import urllib.request

    from devkit.localrun import free_port, wait_for

    state, ledger = application.parent / "state", application.parent / "ledger.jsonl"
    replay = _run(
        installed, application, "recurrence", "replay", str(EXAMPLE), "--state", str(state), "--out", str(ledger)
    )
    assert replay.returncode == 0, replay.stderr[-3000:]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    server = subprocess.Popen(
        [str(installed / "bin" / "recurrence"), "serve", "--state", str(state), "--port", str(port)],
        cwd=application,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def get(path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            body: bytes = response.read()
            return body

    def progress() -> dict[str, object] | None:
        try:
            found: dict[str, object] = json.loads(get("/progress"))
            return found
        except OSError:
            return None

    try:
        shown = wait_for(lambda: server.poll() is None and progress(), 60, 0.2, "the installed serve")
        assert shown["journal"] == {"line": len(EXAMPLE.read_bytes().splitlines()), "offset": EXAMPLE.stat().st_size}
        assert b'recurrence_dead_letters_total{code="invalid_json"} 0.0' in get("/metrics")
        assert b"class Grid" in get("/ui/app.js")
        assert get("/favicon.ico")[:4] == b"\x00\x00\x01\x00"  # an icon file, from the wheel's package data
    finally:
        server.terminate()
        server.wait(timeout=30)
    refused = _run(installed, application, "recurrence", "ledger-dump", "--format", "%x")
    assert refused.returncode == 2 and "unknown token %x" in refused.stderr
