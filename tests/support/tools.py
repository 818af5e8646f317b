"""External checkers the tests use when present (``make tools`` installs them into .cache/bin)."""

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE_BIN = REPO / ".cache" / "bin"
K8S_SCHEMAS = REPO / ".cache" / "k8s-schemas"


def find(name: str) -> str | None:
    local = CACHE_BIN / name
    if local.is_file():
        return str(local)
    return shutil.which(name)


def tool(name: str) -> str:
    """The tool's path, or skip the test saying how to get it."""
    path = find(name)
    if path is None:
        pytest.skip(f"{name} is not installed: `make tools` puts it in .cache/bin (needs apt or Go)")
    return path
