"""The page at scale, in headless Chromium: 50 scopes, sorting, filtering, search, explanations beside their
rows, and a page that follows a replay as it appends (issue 28, sections 2 and 3).

Every number the page shows is compared with ``recurrence stats`` (through the exact value each cell
carries, and its thousands-separated text); every explanation with what ``/explain`` answers, which
``tests/web/test_serve.py`` holds to ``recurrence explain``.
"""

import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.localrun import recurrence_command
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from tests.support.browser import (
    SCREENSHOTS,
    chromium,
    expected_readings,
    open_explanation,
    open_page,
    table_numbers,
    wait,
)
from tests.support.embedded_cli import serve_state, stop_server

SCOPES = 50


@dataclass
class Page:
    url: str
    state: Path
    ledger: Path
    journal: Path
    server: "subprocess.Popen[bytes]"

    def cli(self, *args: str) -> Any:
        result = subprocess.run(
            [*recurrence_command(), *args, "--state", str(self.state)], check=True, capture_output=True, timeout=120
        )
        return orjson.loads(result.stdout)

    def text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return str(response.read().decode())


def _journal(path: Path, entries: int) -> list[bytes]:
    lines = [
        line + b"\n"
        for line in generate(JournalSpec(entries=entries, scopes=SCOPES, seed=28, experiences_per_scope=12))
    ]
    path.write_bytes(b"".join(lines))
    return lines


def _replay(journal: Path, state: Path, ledger: Path, batch: int = 1000) -> "subprocess.Popen[bytes]":
    return subprocess.Popen(
        [
            *recurrence_command(),
            "replay",
            str(journal),
            "--state",
            str(state),
            "--out",
            str(ledger),
            "--batch",
            str(batch),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(scope="module")
def fifty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    work = tmp_path_factory.mktemp("page")
    journal, state, ledger = work / "journal.jsonl", work / "state", work / "ledger.jsonl"
    _journal(journal, 6000)
    writer = _replay(journal, state, ledger)
    assert writer.wait(timeout=300) == 0, writer.stderr
    url, server = serve_state(state)
    try:
        yield Page(url, state, ledger, journal, server)
    finally:
        stop_server(server)


def _attrs(driver: Any, selector: str, name: str) -> list[str]:
    """``name`` of every element ``selector`` finds, in document order."""
    from selenium.webdriver.common.by import By

    return [str(found.get_attribute(name)) for found in driver.find_elements(By.CSS_SELECTOR, selector)]


def _chosen(driver: Any) -> str:
    return _attrs(driver, "#scopes tr.chosen", "data-scope")[0]


def _column(driver: Any, field: str) -> list[int]:
    """One column of the scopes table, top to bottom (read in one script run: a live update may redraw it)."""
    cells = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((c) => [c.getAttribute('data-value'), c.textContent])",
        f'#scopes td[data-field="{field}"]',
    )
    values = [int(value) for value, _ in cells]
    assert [text for _, text in cells] == [f"{value:,}" for value in values]
    return values


def _scopes_shown(driver: Any) -> list[str]:
    return _attrs(driver, "#scopes tr.scope-row", "data-scope")


def _sort_by(driver: Any, field: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f'#scopes th[data-sort="{field}"] button').click()


@pytest.mark.browser
def test_fifty_scopes_sort_and_filter(fifty: Page) -> None:
    from selenium.webdriver.common.by import By

    stats = fifty.cli("stats", "--top", "50")
    assert len(stats) == SCOPES
    with chromium(1400, 1300) as driver:
        open_page(driver, fifty.url + "/ui")
        shown = table_numbers(driver)
        assert shown == expected_readings(stats)
        assert _scopes_shown(driver) == sorted(s["scope_id"] for s in stats)  # by scope, as stats prints them
        # A number column sorts most first, then least first; the header says which.
        _sort_by(driver, "recurred")
        recurred = _column(driver, "recurred")
        assert recurred == sorted(recurred, reverse=True) and len(recurred) == SCOPES
        header = driver.find_element(By.CSS_SELECTOR, '#scopes th[data-sort="recurred"]')
        assert header.get_attribute("aria-sort") == "descending"
        _sort_by(driver, "recurred")
        assert _column(driver, "recurred") == sorted(recurred)
        assert header.get_attribute("aria-sort") == "ascending"
        _sort_by(driver, "unknown")
        by_unknown = [s["scope_id"] for s in sorted(stats, key=lambda s: (-s["recurrence"]["unknown"], s["scope_id"]))]
        assert _scopes_shown(driver) == by_unknown
        # The filter keeps the sort; the count says how many rows are shown.
        driver.find_element(By.ID, "scopes-filter").send_keys("scope-04")
        wait(driver, lambda d: len(_scopes_shown(d)) == 10)
        assert _scopes_shown(driver) == [s for s in by_unknown if s.startswith("scope-04")]
        assert driver.find_element(By.ID, "scopes-count").text == "10 of 50 rows"
        driver.find_element(By.ID, "scopes-filter").send_keys("9")
        wait(driver, lambda d: _scopes_shown(d) == ["scope-049"])
        driver.find_element(By.ID, "scopes-filter").clear()
        driver.find_element(By.ID, "scopes-filter").send_keys("no such scope")
        wait(driver, lambda d: not _scopes_shown(d))
        assert "none of the 50 rows matches" in driver.find_element(By.ID, "scopes").text
        # Every definition is on the page, once per place the word is shown.
        defined = [d.get_attribute("data-define") for d in driver.find_elements(By.CSS_SELECTOR, "[data-define]")]
        assert defined == ["unknown", "unlinked_handoff_citations"]
        for field in ("unknown", "unlinked_handoff_citations"):
            title = driver.find_element(By.CSS_SELECTOR, f'#scopes th[data-sort="{field}"]').get_attribute("title")
            assert title and title.split(":")[0] in ("unknown", "unlinked citations")


@pytest.mark.browser
def test_the_review_list_is_the_chosen_scopes_and_explanations_open_beside_their_rows(fifty: Page) -> None:
    from selenium.webdriver.common.by import By

    stats = {s["scope_id"]: s for s in fifty.cli("stats", "--top", "50")}
    # the scope with most revisions needing review, not the one the page chooses first
    chosen = max(stats.values(), key=lambda s: (s["recurrence"]["needing_review"], s["scope_id"]))["scope_id"]
    needing = [
        f"{chosen} {r['artifact_ref']['family']}/{r['artifact_ref']['artifact_id']}@{r['artifact_ref']['revision']}"
        for r in stats[chosen]["recurrence"]["top_revisions"][: stats[chosen]["recurrence"]["needing_review"]]
    ]
    assert len(needing) >= 2
    with chromium(1400, 1300) as driver:
        open_page(driver, fifty.url + "/ui")
        driver.find_element(By.CSS_SELECTOR, f'#scopes tr[data-scope="{chosen}"] td').click()
        wait(driver, lambda d: _chosen(d) == chosen)
        assert _attrs(driver, "#review tr[data-review]", "data-review") == needing
        assert driver.current_url.endswith(f"#scope={chosen}")
        # The second revision's explanation opens in the row after it, and says what /explain says.
        row = driver.find_elements(By.CSS_SELECTOR, "#review tr[data-review]")[1]
        revision = needing[1].split(" ")[1]
        text = open_explanation(driver, row)
        want = fifty.text(f"/explain/{urllib.parse.quote(revision, safe='')}?scope={chosen}&format=text")
        assert text == want.rstrip("\n")
        assert driver.find_element(By.CSS_SELECTOR, "#review tr[data-review] + tr.explanation-row") is not None
        # A second one opens beside its own row; closing the first leaves the second.
        top = driver.find_elements(By.CSS_SELECTOR, "#top tr[data-revision]")[2]
        open_explanation(driver, top)
        row = driver.find_elements(By.CSS_SELECTOR, "#review tr[data-review]")[1]
        row.find_element(By.CSS_SELECTOR, "button.explain").click()
        wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#review tr.explanation-row"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "#top tr.explanation-row")) == 1
        # Every scope's list, then filtered by signature.
        driver.find_element(By.ID, "review-all").click()
        every = _attrs(driver, "#review tr[data-review]", "data-review")
        assert len(every) == sum(s["recurrence"]["needing_review"] for s in stats.values())
        signature = stats[chosen]["recurrence"]["top_revisions"][0]["signature_key"]
        driver.find_element(By.ID, "review-filter").send_keys(signature)
        wanted = [
            key
            for key, s in ((k, stats[k.split(" ")[0]]) for k in every)
            if any(
                f"{r['artifact_ref']['family']}/{r['artifact_ref']['artifact_id']}@{r['artifact_ref']['revision']}"
                == key.split(" ")[1]
                and r["signature_key"] == signature
                for r in s["recurrence"]["top_revisions"]
            )
        ]
        wait(driver, lambda d: _attrs(d, "#review tr[data-review]", "data-review") == wanted)


def _search(driver: Any, query: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "search")
    box.clear()
    box.send_keys(query)
    driver.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    wait(
        driver,
        lambda d: (
            d.find_element(By.ID, "search-results").get_attribute("hidden") is None
            and d.find_element(By.ID, "search-what").text
        ),
    )


@pytest.mark.browser
def test_search_by_observation_id_revision_and_signature(fifty: Page) -> None:
    from selenium.webdriver.common.by import By

    records = [orjson.loads(line) for line in fifty.ledger.read_bytes().splitlines()]
    recurred = next(r for r in records if r.get("event") == "recurred")
    stats = fifty.cli("stats", "--top", "50")
    with chromium(1400, 1300) as driver:
        open_page(driver, fifty.url + "/ui")
        # An observation id: its evidence chain, and the way to its scope.
        observation = recurred["observation_id"]
        _search(driver, observation)
        pre = driver.find_element(By.ID, "search-explanation")
        wait(driver, lambda d: pre.text.startswith("observation "))
        assert pre.text == fifty.text(f"/explain/{observation}?format=text").rstrip("\n")
        driver.find_element(By.ID, "search-scope").click()
        wait(driver, lambda d: _chosen(d) == recurred["scope_id"])
        # Without its prefix too.
        _search(driver, observation.removeprefix("sha256:"))
        wait(driver, lambda d: pre.text.startswith("observation "))
        # A revision: one row per scope that holds it, each with its explanation beside it.
        revision = recurred["artifact_ref"]
        name = f"{revision['family']}/{revision['artifact_id']}@{revision['revision']}"
        _search(driver, name)
        cards = fifty.cli("explain", name, "--json")["cards"]
        wait(
            driver,
            lambda d: (
                _attrs(d, "#search-table tr[data-found]", "data-found")
                == [f"{card['scope_id']} {name}" for card in cards]
            ),
        )
        text = open_explanation(driver, driver.find_elements(By.CSS_SELECTOR, "#search-table tr[data-found]")[0])
        assert text.startswith(f"revision {name} in scope {cards[0]['scope_id']}")
        # A signature: every top revision of every scope under it.
        signature = recurred["signature_key"]
        _search(driver, signature.upper()[:12])
        found = [
            f"{s['scope_id']} {r['artifact_ref']['family']}/{r['artifact_ref']['artifact_id']}@"
            f"{r['artifact_ref']['revision']}"
            for s in stats
            for r in s["recurrence"]["top_revisions"]
            if signature[:12].lower() in r["signature_key"].lower()
        ]
        assert found
        wait(driver, lambda d: _attrs(d, "#search-table tr[data-found]", "data-found") == found[:200])
        # Nothing found says what to try.
        _search(driver, "sha256:" + "0" * 64)
        wait(driver, lambda d: "no record with this id" in d.find_element(By.ID, "search-note").text)
        driver.find_element(By.ID, "search-clear").click()
        wait(driver, lambda d: d.find_element(By.ID, "search-results").get_attribute("hidden") is not None)
        # The 50-scope page, for the record.
        driver.execute_script("window.scrollTo(0, 0)")
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(1400, max(1300, height + 120))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "ui-50-scopes.png"))


# The header's journal line, and the line of the view the totals were drawn from (one script run).
_HEADER_AND_NUMBERS = """
const line = /journal line ([0-9,]+)/.exec(document.getElementById("status").textContent);
return [line ? line[1].replace(/,/g, "") : null, document.getElementById("totals").getAttribute("data-line")];
"""


@pytest.mark.browser
def test_the_page_follows_a_replay_that_appends(tmp_path: Path) -> None:
    """The page open on a state; a replay appends to it; the page shows the new state without reloading."""
    from selenium.webdriver.common.by import By

    journal, state, ledger = tmp_path / "journal.jsonl", tmp_path / "state", tmp_path / "ledger.jsonl"
    lines = _journal(journal, 4000)
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"".join(lines[:1500]))
    assert _replay(first, state, ledger).wait(timeout=300) == 0
    url, server = serve_state(state)
    try:
        with chromium(1400, 1300) as driver:
            open_page(driver, url + "/ui")
            body = driver.find_element(By.TAG_NAME, "body")
            assert body.get_attribute("data-line") == "1500"
            status = driver.find_element(By.ID, "status").text
            assert status.startswith("the state as of journal line 1,500 (byte ") and " UTC" in status
            before = table_numbers(driver)
            # Anything the page holds in memory survives only if the page is never reloaded.
            driver.execute_script("window.__sameDocument = true")
            # The reader's choices: a sort, and an explanation open.
            _sort_by(driver, "recurred")
            open_explanation(driver, driver.find_elements(By.CSS_SELECTOR, "#top tr[data-revision]")[0])
            writer = _replay(journal, state, ledger, batch=200)
            # While it follows, the header and the numbers come from one read: the header's line is the
            # line of the view the totals were computed from, in every sample.
            samples = []
            while writer.poll() is None:
                samples.append(driver.execute_script(_HEADER_AND_NUMBERS))
                time.sleep(0.05)
            assert writer.wait(timeout=300) == 0, writer.stderr
            assert samples and all(header == numbers for header, numbers in samples), samples
            ended = time.monotonic()
            # drawn for the last line (the header says it first, the tables once they are drawn)
            wait(
                driver,
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-shown-line") == str(len(lines)),
            )
            wait(driver, lambda d: all(c.text != "…" for c in d.find_elements(By.CSS_SELECTOR, "td[data-spark]")))
            followed = time.monotonic() - ended
            after = table_numbers(driver)
            stats = subprocess.run(
                [*recurrence_command(), "stats", "--state", str(state), "--top", "50"],
                check=True,
                capture_output=True,
                timeout=60,
            ).stdout
            assert after == expected_readings(orjson.loads(stats)) and after != before
            assert driver.execute_script("return window.__sameDocument") is True
            assert _column(driver, "recurred") == sorted(_column(driver, "recurred"), reverse=True)
            assert driver.find_elements(By.CSS_SELECTOR, "#top tr.explanation-row")
            assert driver.find_element(By.ID, "status").text.startswith(f"the state as of journal line {len(lines):,} ")
            print(f"the page showed the replay's end {followed:.2f} s after it")
    finally:
        stop_server(server)


@pytest.mark.browser
def test_the_page_opens_at_the_top_and_says_why_it_chose_a_scope(fifty: Page) -> None:
    from selenium.webdriver.common.by import By

    stats = fifty.cli("stats")
    busiest = sorted(stats, key=lambda s: -s["recurrence"]["recurred"])[0]["scope_id"]
    with chromium(1400, 1300) as driver:
        open_page(driver, fifty.url + "/ui")
        assert _chosen(driver) == busiest and _scopes_shown(driver).index(busiest) > 5  # not the first rows
        box = driver.find_element(By.CSS_SELECTOR, "#scopes").find_element(By.XPATH, "./ancestor::div[1]")
        assert int(box.get_property("scrollTop")) == 0 and int(driver.execute_script("return window.scrollY")) == 0
        assert driver.find_element(By.ID, "top-scope").text == (
            f"in {busiest}, the scope with the most recurrences (click a scope to choose another)"
        )
        header = driver.find_element(By.CSS_SELECTOR, "header .state").text
        assert header.startswith("following the state as of journal line 6,000 (byte "), header
        assert "state state" not in header
        # A scope chosen by a link is shown: its row scrolled into the table's view.
        last = _scopes_shown(driver)[-1]
        driver.get(f"{fifty.url}/ui#scope={last}")
        driver.refresh()
        open_page(driver, f"{fifty.url}/ui#scope={last}")
        wait(driver, lambda d: _chosen(d) == last and int(box_of(d).get_property("scrollTop")) > 0)
        assert driver.find_element(By.ID, "top-scope").text == f"in {last}"


def box_of(driver: Any) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, "#scopes").find_element(By.XPATH, "./ancestor::div[1]")


@pytest.mark.browser
def test_search_counts_its_matches_and_a_revision_without_a_failure_record_says_so(fifty: Page) -> None:
    from selenium.webdriver.common.by import By

    stats = fifty.cli("stats", "--top", "50")
    signature = stats[0]["recurrence"]["top_revisions"][0]["signature_key"]
    matches = sum(signature in r["signature_key"] for s in stats for r in s["recurrence"]["top_revisions"])
    bare = None  # a revision that carries no failure record: its card has no counts
    for line in fifty.journal.read_bytes().splitlines():
        entry = orjson.loads(line)
        artifact = entry.get("artifact")
        if entry.get("type") == "artifact" and b"failure_record" not in orjson.dumps(artifact["content"]):
            name = f"{artifact['family']}/{artifact['artifact_id']}@{artifact['revision']}"
            cards = orjson.loads(fifty.text(f"/explain/{urllib.parse.quote(name, safe='')}?format=json"))["cards"]
            if cards and cards[0]["failure_record"] is False:
                bare = name
                break
    assert bare is not None
    with chromium(1400, 1300) as driver:
        open_page(driver, fifty.url + "/ui")
        _search(driver, signature)
        note = driver.find_element(By.ID, "search-note")
        wait(driver, lambda d: "match" in note.text)
        assert note.text.startswith(
            f"{matches:,} revisions match by signature, revision or scope, searched among the top 50 revisions "
            "of each scope"
        ), note.text
        _search(driver, bare)
        wait(driver, lambda d: _attrs(d, "#search-table tr[data-found]", "data-found"))
        assert note.text == "its yield card in 1 scope: click a row to choose the scope"
        row = driver.find_element(By.CSS_SELECTOR, "#search-table tr[data-found]").text
        assert "carries no failure record: the ledger never counts it" in row, row
        assert "selected –" not in row and "recurred –" not in row, row  # no counts drawn as dashes


@pytest.mark.browser
def test_the_page_fits_a_narrow_window_without_sideways_scrolling(fifty: Page) -> None:
    with chromium(420, 900) as driver:
        # 420 CSS pixels exactly (a headless window has a minimum width of its own).
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride", {"width": 420, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        )
        open_page(driver, fifty.url + "/ui")
        wide = driver.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert wide[0] == 420 and wide[1] <= wide[2], wide  # the width within the vertical scroll bar
