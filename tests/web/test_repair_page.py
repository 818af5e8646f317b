"""The repair loop on the page, in headless Chromium, over the worked example carried past Review.

The trend chart is drawn by the page itself (inline SVG, its series' totals equal ``recurrence trends``);
the history view opens from the search box; a retirement suggestion opens its explanation beside its row.
"""

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.localrun import recurrence_command
from tests.support.browser import SCREENSHOTS, chromium, open_explanation, open_page, wait
from tests.support.embedded_cli import serve_state, stop_server
from tests.support.tools import REPO

EXAMPLE = REPO / "examples" / "repair-loop.jsonl"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("repair-page")
    state = work / "state"
    subprocess.run(
        [*recurrence_command(), "replay", str(EXAMPLE), "--state", str(state), "--out", str(work / "l.jsonl")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    url, server = serve_state(state)
    try:
        yield url, state
    finally:
        stop_server(server)


def _cli(state: Path, *args: str) -> Any:
    result = subprocess.run(
        [*recurrence_command(), *args, "--state", str(state)], check=True, capture_output=True, timeout=120
    )
    return orjson.loads(result.stdout)


@pytest.mark.browser
def test_trends_suggestions_and_history_on_the_page(served: tuple[str, Path]) -> None:
    from selenium.webdriver.common.by import By

    url, state = served
    with chromium() as driver:
        open_page(driver, url + "/ui")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#trend-chart svg polyline"))
        chart = driver.find_element(By.CSS_SELECTOR, "#trend-chart svg")
        window = int(chart.get_attribute("data-window"))
        [trend] = _cli(state, "trends", "--scope", "team-a", "--window", str(window))
        assert int(chart.get_attribute("data-windows")) == len(trend["windows"])
        for series in ("selected", "recurred", "avoided", "unknown"):
            drawn = driver.find_element(By.CSS_SELECTOR, f'#trend-chart polyline[data-series="{series}"]')
            assert int(drawn.get_attribute("data-total")) == sum(w[series] for w in trend["windows"])

        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#suggestions tr[data-suggestion]"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#suggestions tr[data-suggestion]")
        assert {r.get_attribute("data-suggestion") for r in rows} == {
            "never_avoids experience/E8@2",
            "never_selected experience/E9@1",
            "unknown_binding experience/E10@1",
        }
        unbound = next(r for r in rows if r.get_attribute("data-suggestion").endswith("E10@1"))
        text = open_explanation(driver, unbound)
        assert "experience/E10@1" in text
        driver.save_screenshot(str(SCREENSHOTS / "repair-loop-trends-suggestions.png"))

        box = driver.find_element(By.ID, "search")
        box.clear()
        box.send_keys("experience/E7")
        driver.find_element(By.CSS_SELECTOR, "#search-form button").click()
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#search-history [data-effect]"))
        effect = driver.find_element(By.CSS_SELECTOR, "#search-history [data-effect]")
        assert effect.get_attribute("data-effect") == "stopped"
        bars = driver.find_elements(By.CSS_SELECTOR, "#search-history svg rect")
        assert [b.get_attribute("data-rate") for b in bars] == ["0.75", "0"]
        revisions = driver.find_elements(By.CSS_SELECTOR, "#search-history tr[data-revision]")
        assert [r.get_attribute("data-revision") for r in revisions] == ["1", "2"]
        driver.save_screenshot(str(SCREENSHOTS / "repair-loop-history.png"))
