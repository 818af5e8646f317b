"""Installing recurrence beside an application that has its own ``schemas``, ``topics`` and ``processor``.

The product installs under the one import name ``recurrence``; an
application's own top-level packages of the same names come first on the path
and must change nothing. The build itself must raise no setuptools
deprecation warning.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.once import BUILD_LOG, built_wheel, pip

#: make test-fast leaves the wheel builds to make test.
pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"


def _fake_application(root: Path) -> Path:
    app = root / "app"
    for name in ("schemas", "topics", "processor"):
        package = app / name
        package.mkdir(parents=True)
        # Importing any of them by accident fails loudly.
        (package / "__init__.py").write_text(f"raise ImportError('the application\\'s own {name} was imported')\n")
    (app / "schemas" / "records.py").write_text("VALUE = 'application'\n")
    return app


def test_an_application_with_its_own_schemas_topics_and_processor_runs_recurrence(tmp_path: Path) -> None:
    app = _fake_application(tmp_path)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(app)}
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "recurrence_ledger.processor.cli", *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    replay = run("replay", str(EXAMPLE), "--state", str(state), "--out", str(ledger))
    assert replay.returncode == 0, replay.stderr
    stats = run("stats", "--state", str(state))
    assert stats.returncode == 0, stats.stderr
    expected = json.loads((REPO / "examples" / "rfc-minimum.expected-stats.json").read_text())
    assert json.loads(stats.stdout) == expected
    # The Kafka commands' parsers import too (no broker needed for --help).
    assert run("worker", "--help").returncode == 0
    # And the application's own package is still its own.
    own = subprocess.run(
        [sys.executable, "-c", "import schemas.records as r; print(r.VALUE)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "the application's own schemas was imported" in own.stderr


def test_the_build_and_the_development_install_raise_no_setuptools_warning(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # ``make venv`` is a development install: it used to open every first ``make run`` with a
    # setuptools "!!" block (a meta path finder for a layout setuptools could not express as one
    # path entry). src/recurrence_ledger makes it one path entry; the wheel build (the one every wheel test
    # uses, built with -v) stays quiet too.
    import venv

    outputs = [(built_wheel(tmp_path_factory).parent / BUILD_LOG).read_text()]
    venv.create(tmp_path / "v", with_pip=False)
    result = pip(
        "--python", str(tmp_path / "v" / "bin" / "python"), "install", "--no-deps", "-v", "-e", str(REPO), timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs.append(result.stdout + result.stderr)
    noisy = [
        line
        for output in outputs
        for line in output.splitlines()
        if "deprecat" in line.lower()
        or line.strip() == "!!"
        or "SetuptoolsWarning" in line
        or "BuildBackendWarning" in line
    ]
    assert not noisy, "\n".join(noisy)
    assert "Created wheel for recurrence" in outputs[0] or "Saved" in outputs[0]
    pth = next((tmp_path / "v").rglob("__editable__.recurrence*.pth")).read_text().split()
    assert pth == [str(REPO / "src")]
