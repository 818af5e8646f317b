"""Something slow built once per test run, however many processes run the tests (``pytest -n``).

A session-scoped fixture runs once per process; what these helpers build lives in the run's shared
temporary folder, behind a lock, so the first process builds it and the others wait and reuse it.
"""

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every process of this run shares (each worker's own is a folder inside it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``build`` into a fresh folder ``name`` the first time any process asks; that folder every time."""
    root = shared_root(factory)
    folder = root / name
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed halfway
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


REPO = Path(__file__).resolve().parents[2]
# What a build leaves in the checkout (and a build would pick up again), and what is no source at all.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".cache", "build", "dist", "out", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)
#: Beside the wheel: everything pip and the build backend printed (``-v``), for the packaging test.
BUILD_LOG = "build.log"


def pip(*args: str, timeout: float) -> "subprocess.CompletedProcess[str]":
    """This interpreter's pip (``--python ENV/bin/python`` installs into another environment, without a pip
    of its own), its output as text; never raises on its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def built_wheel(factory: pytest.TempPathFactory) -> Path:
    """The product's wheel, built once per run from a clean copy of the checkout (setuptools builds in
    place, and a build/ left by an earlier build in the checkout ships modules since moved or deleted)."""

    def build(out: Path) -> None:
        source = out / "source" / "recurrence"
        shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCE)
        built = pip("wheel", "--no-deps", "-v", str(source), "-w", str(out), timeout=600)
        (out / BUILD_LOG).write_text(built.stdout + built.stderr)
        assert built.returncode == 0, built.stderr[-3000:]

    return next(built_once(factory, "wheel", build).glob("recurrence_ledger-*.whl"))
