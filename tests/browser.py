"""The statistics page in a real browser: Debian's headless Chromium driven by Selenium and chromedriver.

``make tools`` installs ``chromium`` and ``chromium-driver`` with apt where it
can; elsewhere the browser tests skip and say so. Selenium is pointed at the
system binaries explicitly, so it never tries to download a browser or driver.
"""

import time
from pathlib import Path
from typing import Any

import pytest

from tests.tools import REPO, find

SCREENSHOTS = REPO / "out"
PAGE_TIMEOUT = 30.0


def page_readings(url: str, screenshot: Path, ask_token: str | None = None) -> dict[str, Any]:
    """Load the page, wait until it has drawn everything, save a screenshot; the numbers it shows.

    With ``ask_token`` the server asks for a token the URL does not carry: the page must ask for it exactly once
    (a prompt, answered with it), however many of its requests were refused. A token in the URL's fragment
    must leave the address bar. The browser's console is read for Content-Security-Policy violations."""
    chromium, driver_path = find("chromium"), find("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("chromium and chromedriver are not installed: `make tools` installs Debian's chromium and "
                    "chromium-driver (needs apt as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1300"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(url)
        if ask_token is not None:
            WebDriverWait(driver, PAGE_TIMEOUT).until(expected_conditions.alert_is_present())
            prompt = driver.switch_to.alert
            prompt.send_keys(ask_token)
            prompt.accept()  # a second prompt would stop the waits below (an unexpected alert)
        WebDriverWait(driver, PAGE_TIMEOUT).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded")
        )
        body = driver.find_element(By.TAG_NAME, "body")
        assert body.get_attribute("data-loaded") == "true", driver.find_element(By.ID, "status").text
        # The top revisions' sparklines arrive with their own requests; wait until none is pending.
        WebDriverWait(driver, PAGE_TIMEOUT).until(
            lambda d: all(cell.text != "…" for cell in d.find_elements(By.CSS_SELECTOR, "td[data-spark]"))
        )
        scopes: dict[str, dict[str, int]] = {}
        for cell in driver.find_elements(By.CSS_SELECTOR, "#scopes td[data-field]"):
            scope = cell.get_attribute("data-scope")
            field = cell.get_attribute("data-field")
            assert scope is not None and field is not None
            scopes.setdefault(scope, {})[field] = int(cell.text)
        totals = {
            cell.get_attribute("data-total"): int(cell.text)
            for cell in driver.find_elements(By.CSS_SELECTOR, "#totals [data-total]")
        }
        dead_letters = {
            cell.get_attribute("data-code"): int(cell.text)
            for cell in driver.find_elements(By.CSS_SELECTOR, "#dead-letters td[data-code]")
        }
        review = [row.get_attribute("data-review") for row in driver.find_elements(By.CSS_SELECTOR, "tr[data-review]")]
        sparks = {
            cell.get_attribute("data-spark"): (cell.find_element(By.TAG_NAME, "svg").get_attribute("data-verdicts")
                                               if cell.find_elements(By.TAG_NAME, "svg") else None)
            for cell in driver.find_elements(By.CSS_SELECTOR, "td[data-spark]")
        }
        patterns = driver.find_element(By.ID, "patterns").text
        # signature key -> its state column ("suggested" or "below K scopes"), in the order shown
        pattern_rows = {
            row.get_attribute("data-pattern"): row.find_elements(By.TAG_NAME, "td")[-1].text
            for row in driver.find_elements(By.CSS_SELECTOR, "#patterns tr[data-pattern]")
        }
        chosen = driver.find_element(By.CSS_SELECTOR, "#scopes tr.chosen").get_attribute("data-scope")
        # Open one explanation in the page, as a person would.
        links = driver.find_elements(By.CSS_SELECTOR, "#top a.explain")
        explanation = ""
        if links:
            links[0].click()
            WebDriverWait(driver, PAGE_TIMEOUT).until(
                lambda d: d.find_element(By.ID, "explanation").text not in ("", "loading…")
            )
            explanation = driver.find_element(By.ID, "explanation").text
            driver.execute_script("window.scrollTo(0, 0)")
            time.sleep(0.2)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(1280, max(1300, height + 120))
        driver.save_screenshot(str(screenshot))
        console = [entry["message"] for entry in driver.get_log("browser")]  # type: ignore[no-untyped-call]
        return {"scopes": scopes, "totals": totals, "dead_letters": dead_letters, "review": review,
                "sparks": sparks, "patterns": patterns, "pattern_rows": pattern_rows, "chosen": chosen,
                "explanation": explanation, "address": driver.current_url,
                "csp_violations": [m for m in console if "Content Security Policy" in m]}
    finally:
        driver.quit()


def expected_readings(statistics: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page must show for these statistics (``recurrence stats`` / ``/statistics`` output)."""
    fields = ("selected", "recurred", "avoided", "unknown", "unlinked_handoff_citations", "needing_review")
    scopes = {s["scope_id"]: {f: s["recurrence"][f] for f in fields} for s in statistics}
    totals = {f: sum(s["recurrence"][f] for s in statistics) for f in fields}
    totals["scopes"] = len(statistics)
    return {"scopes": scopes, "totals": totals}


def expected_pattern_rows(listed: list[dict[str, Any]]) -> dict[str, str]:
    """What the page's pattern section must show for these rows (``recurrence patterns --all --json``)."""
    return {row["signature_key"]: "suggested" if row["suggested"] else f"below {row['min_scopes']} scopes"
            for row in listed}


def tune_readings(url: str, screenshot: Path) -> dict[str, Any]:
    """Load the page, wait for the what-if chart; what its bars, marker and table say, and a screenshot of it."""
    chromium, driver_path = find("chromium"), find("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("chromium and chromedriver are not installed: `make tools` installs Debian's chromium and "
                    "chromium-driver (needs apt as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1300"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(url)
        WebDriverWait(driver, PAGE_TIMEOUT).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded")
        )
        assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true", \
            driver.find_element(By.ID, "status").text
        bars: dict[int, dict[str, int]] = {}
        for bar in driver.find_elements(By.CSS_SELECTOR, "#tune-chart rect[data-series]"):
            threshold, series = bar.get_attribute("data-threshold"), bar.get_attribute("data-series")
            value, height = bar.get_attribute("data-value"), bar.get_attribute("height")
            assert threshold is not None and series is not None and value is not None and height is not None
            bars.setdefault(int(threshold), {})[series] = int(value)
            # Drawn to scale: a bar of nothing has no height, any other has some.
            assert (float(height) > 0) == (int(value) > 0), (threshold, series, value, height)
        marked = [int(m.get_attribute("data-configured") or 0)
                  for m in driver.find_elements(By.CSS_SELECTOR, "#tune-chart [data-configured]")]
        table: dict[int, dict[str, str]] = {}
        for row in driver.find_elements(By.CSS_SELECTOR, "#tune-table tr[data-tune]"):
            cells = {c.get_attribute("data-field"): c.text
                     for c in row.find_elements(By.CSS_SELECTOR, "td[data-field]")}
            table[int(row.get_attribute("data-tune") or 0)] = {str(k): v for k, v in cells.items()}
        section = driver.find_element(By.ID, "tune")
        driver.execute_script("arguments[0].scrollIntoView()", section)
        time.sleep(0.2)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        section.screenshot(str(screenshot))
        return {"bars": bars, "marked": marked, "table": table,
                "note": driver.find_element(By.ID, "tune-note").text,
                "configured": driver.find_element(By.ID, "tune-configured").text}
    finally:
        driver.quit()


def expected_tune(body: dict[str, Any]) -> dict[str, Any]:
    """What the chart and its table must show for a ``/tune`` body."""
    bars = {row["threshold"]: {"review_proposals": row["review_proposals"],
                               "flags_then_avoided": row["flags_then_avoided"]} for row in body["thresholds"]}
    table = {
        row["threshold"]: {
            **{name: f"{row[name]:,}"
               for name in ("review_proposals", "needing_review", "flags", "flags_then_avoided")},
            "premature": f"{100 * row['flags_then_avoided'] / row['flags']:.1f}%" if row["flags"] else "–",
        }
        for row in body["thresholds"]
    }
    marked = [body["review_threshold"]] if body["review_threshold"] in bars else []
    return {"bars": bars, "table": table, "marked": marked}
