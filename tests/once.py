"""Something slow built once per test run, however many processes run the tests (``pytest -n``).

A session-scoped fixture runs once per process; what these helpers build lives in the run's shared
temporary folder, behind a lock, so the first process builds it and the others wait and reuse it.
"""

import fcntl
import os
import shutil
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
