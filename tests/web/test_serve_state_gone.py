"""``serve`` says when its state is gone or replaced (issue 40, 9): ``/readyz`` 503 and the page says so.

A state folder deleted (here: moved away) under ``serve`` makes ``/readyz`` answer 503 with the reason,
``/progress`` carry it (the page's banner), and the data answers stay the last view's; another state put
at the path is served (200 again, its own numbers); a swap with no gap in between is seen too.
"""

import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.localrun import free_port, recurrence_command, wait_for
from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from tests.support.browser import chromium, open_page, wait
from tests.support.tools import REPO

EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def _replay(journal: Path, state: Path, ledger: Path) -> None:
    command = [*recurrence_command(), "replay", str(journal), "--state", str(state), "--out", str(ledger)]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


def _statistics(state: Path) -> list[dict[str, Any]]:
    store = open_state(state, must_exist=True)
    try:
        return statistics(store, None, 20)
    finally:
        store.close()


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """``serve`` on state A; state B beside it (another journal)."""
    other_journal = tmp_path / "other.jsonl"
    other_journal.write_bytes(b"".join(line + b"\n" for line in generate(JournalSpec(entries=200, scopes=3, seed=8))))
    state, other = tmp_path / "state", tmp_path / "other"
    _replay(EXAMPLE, state, tmp_path / "ledger.jsonl")
    _replay(other_journal, other, tmp_path / "other-ledger.jsonl")
    port = free_port()
    server = subprocess.Popen(
        [*recurrence_command(), "serve", "--state", str(state), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.poll() is None and _alive(url), 30, 0.1, "recurrence serve")
        yield url, state, other
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr
    assert b"Traceback" not in stderr


def _alive(url: str) -> bool:
    try:
        return _get(url + "/livez")[0] == 200
    except OSError:
        return False


def _ready(url: str) -> int:
    return _get(url + "/readyz")[0]


def test_serve_says_when_its_state_is_gone_and_serves_the_state_put_back(serving: tuple[str, Path, Path]) -> None:
    url, state, other = serving
    first = _get(url + "/statistics?top=20")[1]
    assert _ready(url) == 200 and first == _statistics(state)
    moved = state.with_name("moved")
    os.rename(state, moved)
    wait_for(lambda: _ready(url) == 503, 30, 0.1, "/readyz 503 once the state is gone")
    status, body = _get(url + "/readyz")
    assert status == 503 and body["status"] == "not ready"
    (reason,) = body["reasons"]
    assert f"the state folder {state} is gone" in reason and "as of journal line 10" in reason
    progress = _get(url + "/progress")[1]
    assert progress["status"] == "not ready" and progress["reasons"] == [reason]
    assert _get(url + "/livez")[0] == 200
    assert _get(url + "/statistics?top=20")[1] == first  # the last view's, said to be so
    # Another state at the path: served, ready again.
    os.rename(other, state)
    wait_for(lambda: _ready(url) == 200, 30, 0.1, "/readyz 200 once a state is back")
    assert _get(url + "/progress")[1]["reasons"] == []
    assert _get(url + "/statistics?top=20")[1] == _statistics(state) != first
    # Swapped without a gap (the folder replaced between two looks): the new folder is served, not the old.
    os.rename(state, other)
    os.rename(moved, state)
    wait_for(lambda: _get(url + "/statistics?top=20")[1] == first, 30, 0.1, "the state swapped back")
    assert _ready(url) == 200


@pytest.mark.browser
def test_the_page_shows_a_banner_while_the_state_is_gone(serving: tuple[str, Path, Path]) -> None:
    from selenium.webdriver.common.by import By

    url, state, _ = serving
    with chromium() as driver:
        open_page(driver, url + "/ui")
        banner = driver.find_element(By.ID, "state-problem")
        assert not banner.is_displayed()
        moved = state.with_name("moved")
        os.rename(state, moved)
        wait(driver, lambda d: d.find_element(By.ID, "state-problem").is_displayed())
        text = driver.find_element(By.ID, "state-problem").text
        assert text.startswith("not current: the state folder") and "is gone" in text
        assert driver.find_element(By.ID, "live").text == "state not current"
        os.rename(moved, state)
        wait(driver, lambda d: not d.find_element(By.ID, "state-problem").is_displayed())
        assert driver.find_element(By.ID, "live").text == "following"
