"""The statistics page in a real browser: Debian's headless Chromium driven by Selenium and chromedriver.

``make tools`` installs ``chromium`` and ``chromium-driver`` with apt where it
can; elsewhere the browser tests skip and say so. Selenium is pointed at the
system binaries explicitly, so it never tries to download a browser or driver.
"""

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.localrun import chromium_arguments
from tests.support.tools import REPO, find

SCREENSHOTS = REPO / "out"
#: Whether the running test carries the ``browser`` marker (tests/conftest.py sets it before each test):
#: ``make test-fast`` selects by that marker, so a browser test without it would slip into the fast lane.
MARKED = False
PAGE_TIMEOUT = 30.0


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 1300) -> Iterator[Any]:
    """A headless Chromium driven by Selenium, or a skip that says how to install it."""
    assert MARKED, "a test that starts Chromium carries @pytest.mark.browser"
    browser, driver_path = find("chromium"), find("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip(
            "chromium and chromedriver are not installed: `make tools` installs Debian's chromium and "
            "chromium-driver (needs apt as root)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in chromium_arguments(width, height):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, condition: Any, timeout: float = PAGE_TIMEOUT) -> Any:
    """Until ``condition`` holds. An element the page replaced while the condition read it (a table draws
    itself again when its data arrive) means the page has not settled: the condition is asked again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition)


def open_page(driver: Any, url: str, ask_token: str | None = None) -> None:
    """Load the page and wait until it has drawn everything (its sparklines arrive with their own requests).

    With ``ask_token`` the server asks for a token the URL does not carry: the page must ask for it exactly once
    (a prompt, answered with it), however many of its requests were refused."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    driver.get(url)
    if ask_token is not None:
        wait(driver, expected_conditions.alert_is_present())
        prompt = driver.switch_to.alert
        prompt.send_keys(ask_token)
        prompt.accept()  # a second prompt would stop the waits below (an unexpected alert)
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true", driver.find_element(
        By.ID, "status"
    ).text
    wait(driver, lambda d: all(cell.text != "…" for cell in d.find_elements(By.CSS_SELECTOR, "td[data-spark]")))


def number(cell: Any) -> int:
    """A number the page shows: its exact value (``data-value``), checked against the text (thousands separated)."""
    value = int(cell.get_attribute("data-value"))
    assert cell.text == f"{value:,}", (cell.text, value)
    return value


# Read in one script run: the page may draw itself again (a live update) between two WebDriver commands.
_NUMBERS = """
const cell = (c) => [c.getAttribute("data-value"), c.textContent];
return {
  scopes: [...document.querySelectorAll("#scopes td[data-field]")]
    .map((c) => [c.getAttribute("data-scope"), c.getAttribute("data-field"), ...cell(c)]),
  totals: [...document.querySelectorAll("#totals [data-total]")].map((c) => [c.getAttribute("data-total"), ...cell(c)]),
};
"""


def _checked(value: str, text: str) -> int:
    number = int(value)
    assert text == f"{number:,}", (text, number)
    return number


def table_numbers(driver: Any) -> dict[str, Any]:
    """The scopes table's and the totals' numbers (exact values, their text checked to be thousands separated)."""
    found = driver.execute_script(_NUMBERS)
    scopes: dict[str, dict[str, int]] = {}
    for scope, field, value, text in found["scopes"]:
        scopes.setdefault(scope, {})[field] = _checked(value, text)
    totals = {name: _checked(value, text) for name, value, text in found["totals"]}
    return {"scopes": scopes, "totals": totals}


def open_explanation(driver: Any, row: Any) -> str:
    """Click the row's explain button; the explanation must open in the row right after it. Its text."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    key = row.get_attribute("data-key")
    table = row.find_element(By.XPATH, "./ancestor::table").get_attribute("id")
    button = f'#{table} tr[data-key="{key}"]:not(.explanation-row) button.explain'

    def clicked(d: Any) -> bool:
        # Found again at the click: the table may draw itself again meanwhile (a sparkline arriving).
        try:
            d.find_element(By.CSS_SELECTOR, button).click()
        except StaleElementReferenceException:
            return False
        return True

    wait(driver, clicked)
    # The table draws itself again (rows are replaced) whenever its data arrive: the explanation is found,
    # checked to stand beside its row and read in one script, so no element is held across a redraw.
    found: list[Any] = []

    def opened(d: Any) -> bool:
        found[:] = [d.execute_script(_EXPLANATION, table, key)]
        return found[0] is not None and found[0][1] not in ("", "loading…")

    wait(driver, opened)
    beside, text = found[0]
    # Beside its row: the very next row of the same table, not a box elsewhere on the page.
    assert beside, f"the explanation of {key} is not the row after it"
    return str(text)


_EXPLANATION = r"""
const [table, key] = arguments;
const opened = document.querySelector(`#${table} tr.explanation-row[data-explains="${CSS.escape(key)}"]`);
const own = document.querySelector(`#${table} tr[data-key="${CSS.escape(key)}"]:not(.explanation-row)`);
const pre = opened && opened.querySelector("pre");
if (!opened || !own || !pre) return null;
return [own.nextElementSibling === opened, pre.innerText.replace(/\s+$/, "")];
"""


def page_readings(url: str, screenshot: Path, ask_token: str | None = None) -> dict[str, Any]:
    """Load the page, wait until it has drawn everything, save a screenshot; the numbers it shows.

    ``ask_token``: as ``open_page``. A token in the URL's fragment must leave the address bar. The browser's
    console is read for Content-Security-Policy violations."""
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        open_page(driver, url, ask_token)
        numbers = table_numbers(driver)
        dead_letters = {
            cell.get_attribute("data-code"): number(cell)
            for cell in driver.find_elements(By.CSS_SELECTOR, "#dead-letters td[data-code]")
        }
        chosen = driver.find_element(By.CSS_SELECTOR, "#scopes tr.chosen").get_attribute("data-scope")
        # The review list is the chosen scope's; "every scope" shows them all.
        review_chosen = [
            row.get_attribute("data-review") for row in driver.find_elements(By.CSS_SELECTOR, "tr[data-review]")
        ]
        driver.find_element(By.ID, "review-all").click()
        review = [row.get_attribute("data-review") for row in driver.find_elements(By.CSS_SELECTOR, "tr[data-review]")]
        driver.find_element(By.ID, "review-all").click()
        sparks = {
            cell.get_attribute("data-spark"): (
                cell.find_element(By.TAG_NAME, "svg").get_attribute("data-verdicts")
                if cell.find_elements(By.TAG_NAME, "svg")
                else None
            )
            for cell in driver.find_elements(By.CSS_SELECTOR, "td[data-spark]")
        }
        patterns = driver.find_element(By.ID, "patterns").text
        # signature key -> its state column ("suggested" or "below K scopes"), in the order shown
        pattern_rows = {
            row.get_attribute("data-pattern"): row.find_element(By.CSS_SELECTOR, "td[data-pattern-state]").text
            for row in driver.find_elements(By.CSS_SELECTOR, "#patterns tr[data-pattern]")
        }
        partitions = {
            int(row.get_attribute("data-partition")): [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in driver.find_elements(By.CSS_SELECTOR, "#partitions tr[data-partition]")
        }
        # Open one explanation in the page, as a person would.
        rows = driver.find_elements(By.CSS_SELECTOR, "#top tr[data-revision]")
        explanation = open_explanation(driver, rows[0]) if rows else ""
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.2)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(1280, max(1300, height + 120))
        driver.save_screenshot(str(screenshot))
        console = [entry["message"] for entry in driver.get_log("browser")]
        return {
            **numbers,
            "dead_letters": dead_letters,
            "review": review,
            "review_chosen": review_chosen,
            "address": driver.current_url,
            "csp_violations": [m for m in console if "Content Security Policy" in m],
            "sparks": sparks,
            "patterns": patterns,
            "pattern_rows": pattern_rows,
            "chosen": chosen,
            "explanation": explanation,
            "partitions": partitions,
            "status": driver.find_element(By.ID, "status").text,
            "worker_hidden": driver.find_element(By.ID, "worker").get_attribute("hidden") is not None,
        }


def expected_readings(statistics: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page must show for these statistics (``recurrence stats`` / ``/statistics`` output)."""
    fields = ("selected", "recurred", "avoided", "unknown", "unlinked_handoff_citations", "needing_review")
    scopes = {s["scope_id"]: {f: s["recurrence"][f] for f in fields} for s in statistics}
    totals = {f: sum(s["recurrence"][f] for s in statistics) for f in fields}
    totals["scopes"] = len(statistics)
    return {"scopes": scopes, "totals": totals}


def expected_pattern_rows(listed: list[dict[str, Any]]) -> dict[str, str]:
    """What the page's pattern section must show for these rows (``recurrence patterns --all --json``)."""
    return {
        row["signature_key"]: "suggested" if row["suggested"] else f"below {row['min_scopes']} scopes" for row in listed
    }


def tune_readings(url: str, screenshot: Path) -> dict[str, Any]:
    """Load the page, wait for the what-if chart; what its bars, marker and table say, and a screenshot of it."""
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        open_page(driver, url)
        bars: dict[int, dict[str, int]] = {}
        for bar in driver.find_elements(By.CSS_SELECTOR, "#tune-chart rect[data-series]"):
            threshold, series = bar.get_attribute("data-threshold"), bar.get_attribute("data-series")
            value, height = bar.get_attribute("data-value"), bar.get_attribute("height")
            assert threshold is not None and series is not None and value is not None and height is not None
            bars.setdefault(int(threshold), {})[series] = int(value)
            # Drawn to scale: a bar of nothing has no height, any other has some.
            assert (float(height) > 0) == (int(value) > 0), (threshold, series, value, height)
        marked = [
            int(m.get_attribute("data-configured") or 0)
            for m in driver.find_elements(By.CSS_SELECTOR, "#tune-chart [data-configured]")
        ]
        table: dict[int, dict[str, str]] = {}
        for row in driver.find_elements(By.CSS_SELECTOR, "#tune-table tr[data-tune]"):
            cells = {
                c.get_attribute("data-field"): c.text for c in row.find_elements(By.CSS_SELECTOR, "td[data-field]")
            }
            table[int(row.get_attribute("data-tune") or 0)] = {str(k): v for k, v in cells.items()}
        section = driver.find_element(By.ID, "tune")
        driver.execute_script("arguments[0].scrollIntoView()", section)
        time.sleep(0.2)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        section.screenshot(str(screenshot))
        return {
            "bars": bars,
            "marked": marked,
            "table": table,
            "note": driver.find_element(By.ID, "tune-note").text,
            "change": driver.find_element(By.ID, "tune-change").text,
            "configured": driver.find_element(By.ID, "tune-configured").text,
        }


def expected_tune(body: dict[str, Any]) -> dict[str, Any]:
    """What the chart and its table must show for a ``/tune`` body."""
    bars = {
        row["threshold"]: {"review_proposals": row["review_proposals"], "flags_then_avoided": row["flags_then_avoided"]}
        for row in body["thresholds"]
    }
    table = {
        row["threshold"]: {
            **{
                name: f"{row[name]:,}" for name in ("review_proposals", "needing_review", "flags", "flags_then_avoided")
            },
            "premature": f"{100 * row['flags_then_avoided'] / row['flags']:.1f}%" if row["flags"] else "–",
        }
        for row in body["thresholds"]
    }
    marked = [body["review_threshold"]] if body["review_threshold"] in bars else []
    return {"bars": bars, "table": table, "marked": marked}
