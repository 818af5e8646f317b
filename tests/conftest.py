"""Hooks for every test."""

from pathlib import Path

import pytest

from tests.support import browser

HERE = Path(__file__).resolve().parent
#: Every test in these folders carries the folder's marker: ``-m`` selects the lanes by them.
FOLDER_MARKERS = {HERE / "kafka": pytest.mark.kafka, HERE / "cluster": pytest.mark.cluster}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for folder, marker in FOLDER_MARKERS.items():
            if item.path.is_relative_to(folder):
                item.add_marker(marker)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    browser.MARKED = item.get_closest_marker("browser") is not None
