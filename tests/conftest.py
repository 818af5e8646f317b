"""Hooks for every test."""

import pytest

from tests import browser


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    browser.MARKED = item.get_closest_marker("browser") is not None
