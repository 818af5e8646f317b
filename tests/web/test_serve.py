"""``recurrence serve``: the read surface and the page over an embedded state, checked against the CLI.

One server for the module, over the RFC example plus a generated multi-scope
journal with garbage lines (so there are dead letters and many scopes). Every
JSON endpoint is compared with the command that prints the same thing
(``stats``, ``explain``, ``patterns``); schemathesis runs the OpenAPI
document against the live server; the page is loaded in headless Chromium.
"""

import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.localrun import free_port, recurrence_command, replay_command, wait_for
from recurrence_ledger.processor.core.deadletters import CODES
from recurrence_ledger.processor.embedded.reading import open_state
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.web.follow import state_mark
from recurrence_ledger.processor.web.routes import Ask
from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application
from recurrence_ledger.processor.web.webtoken import TOKEN_ENV
from recurrence_ledger.schemas.readsurface import (
    DeadLetterCounts,
    DeadLetterListing,
    Explanation,
    PatternSuggestions,
    Progress,
    ThresholdWhatIf,
)
from recurrence_ledger.schemas.statistics import RecurrenceStatistics
from tests.support.apicheck import app_failures, failures
from tests.support.browser import (
    SCREENSHOTS,
    expected_pattern_rows,
    expected_readings,
    expected_tune,
    page_readings,
    tune_readings,
)
from tests.support.hostile import TOKEN
from tests.support.tools import REPO, find

EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"


class Served:
    def __init__(self, url: str, state: Path, ledger: Path, journal: Path) -> None:
        self.url, self.state, self.ledger, self.journal = url, state, ledger, journal

    def get(self, path: str, accept: str | None = None) -> tuple[int, str, bytes]:
        status, headers, body = self.fetch(path, {"Accept": accept} if accept else {})
        return status, headers.get("Content-Type", ""), body

    def fetch(self, path: str, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        """Status, headers and body (a 304 included); every request carries the server's token."""
        headers = {"Authorization": f"Bearer {TOKEN}", **headers}
        request = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def json(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, body
        return orjson.loads(body)

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [*recurrence_command(), *args, "--state", str(self.state)],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.stdout

    def text_of(self, path: str) -> str:
        status, _, body = self.get(path)
        assert status == 200, body
        return body.decode()

    def journal_lines(self) -> list[bytes]:
        return self.journal.read_bytes().splitlines()

    def records(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.ledger.read_bytes().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("serve")
    journal = work / "journal.jsonl"
    generated = generate(JournalSpec(entries=400, scopes=5, seed=21, garbage_ratio=0.04, experiences_per_scope=6))
    journal.write_bytes(EXAMPLE.read_bytes() + b"".join(line + b"\n" for line in generated))
    state, ledger = work / "state", work / "ledger.jsonl"
    subprocess.run(replay_command(journal, state, ledger), check=True, capture_output=True, timeout=120)
    port = free_port()
    # With a token: every check below goes through the guard (tests/web/test_serve_security.py tests the guard).
    server = subprocess.Popen(
        [*recurrence_command(), "serve", "--state", str(state), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, TOKEN_ENV: TOKEN},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        running = Served(url, state, ledger, journal)
        wait_for(lambda: server.poll() is None and _answers(running), 30, 0.1, "recurrence serve")
        yield running
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode == 0, "serve did not stop cleanly on SIGTERM"


def _answers(running: Served) -> bool:
    try:
        return running.get("/livez")[0] == 200
    except OSError:
        return False


def _revision(record: dict[str, Any]) -> str:
    art = record["artifact_ref"]
    return f"{art['family']}/{art['artifact_id']}@{art['revision']}"


def test_statistics_are_those_recurrence_stats_prints(served: Served) -> None:
    assert served.json("/statistics") == orjson.loads(served.cli("stats"))
    assert served.json("/statistics?top=1") == orjson.loads(served.cli("stats", "--top", "1"))
    (one,) = orjson.loads(served.cli("stats", "--scope", "rfc-minimum"))
    assert served.json("/scopes/rfc-minimum/statistics") == one
    assert served.get("/scopes/no-such-scope/statistics")[0] == 404
    assert served.get("/statistics?top=x")[0] == 400


def test_explain_answers_what_the_cli_prints(served: Served) -> None:
    records = served.records()
    recurred = next(r for r in records if r.get("event") == "recurred" and r["scope_id"] == "rfc-minimum")
    match = next(r for r in records if r["record"] == "match")
    dead = next(r for r in records if r["record"] == "dead_letter")
    for identity in (recurred["observation_id"], match["match_digest"], dead["dead_letter_id"], _revision(recurred)):
        path = "/explain/" + urllib.parse.quote(identity, safe="")
        status, content_type, text = served.get(path)
        assert status == 200 and content_type.startswith("text/plain")
        assert text.decode() == served.cli("explain", identity)
        as_json = orjson.loads(served.cli("explain", identity, "--json"))
        for variant in (path + "?format=json", path):
            status, content_type, body = served.get(variant, accept="application/json")
            assert status == 200 and content_type == "application/json"
            assert orjson.loads(body) == as_json
        Explanation.model_validate_json(body)  # the OpenAPI schema describes it
    # A revision's id may also be sent unencoded; ?scope narrows to one scope's card.
    status, _, body = served.get(f"/explain/{_revision(recurred)}?format=json&scope=rfc-minimum")
    assert status == 200 and [c["scope_id"] for c in orjson.loads(body)["cards"]] == ["rfc-minimum"]
    assert served.get(f"/explain/{_revision(recurred)}?scope=elsewhere")[0] == 404
    assert served.get("/explain/no-such-id")[0] == 404
    assert served.get(f"/explain/{recurred['observation_id']}?format=yaml")[0] == 400


def test_dead_letters_and_patterns(served: Served) -> None:
    counts = DeadLetterCounts.model_validate_json(served.get("/dead-letters")[2])
    by_code = Counter(r["error"] for r in served.records() if r["record"] == "dead_letter")
    assert counts.by_code == dict(by_code) and counts.total == sum(by_code.values()) > 0
    patterns = PatternSuggestions.model_validate_json(served.get("/patterns")[2])
    assert patterns.available and patterns.min_scopes == 3
    listed = orjson.loads(served.cli("patterns", "--all", "--json"))
    assert [p.model_dump(mode="json") for p in patterns.patterns] == listed


def _dead_letters(served: Served, code: str) -> list[dict[str, Any]]:
    return [r for r in served.records() if r["record"] == "dead_letter" and r["error"] == code]


def test_the_dead_letters_of_a_code_are_the_ledgers_in_order(served: Served) -> None:
    counts = DeadLetterCounts.model_validate_json(served.get("/dead-letters")[2])
    assert len(counts.by_code) >= 2
    for code, count in counts.by_code.items():
        body = DeadLetterListing.model_validate_json(served.get(f"/dead-letters/{code}")[2])
        want = _dead_letters(served, code)
        assert body.code == code and body.total == count == len(want) and body.more == 0
        assert [d.dead_letter_id for d in body.dead_letters] == [r["dead_letter_id"] for r in want]
        assert [(d.origin, d.detail, d.raw) for d in body.dead_letters] == [
            (r["origin"], r["detail"], r["raw"][:2000]) for r in want
        ]
        # Each one opens: its id is one /explain knows.
        assert served.get(f"/explain/{body.dead_letters[0].dead_letter_id}")[0] == 200
    code = max(counts.by_code, key=lambda c: counts.by_code[c])
    first = DeadLetterListing.model_validate_json(served.get(f"/dead-letters/{code}?limit=2")[2])
    assert len(first.dead_letters) == 2 and first.more == counts.by_code[code] - 2
    assert served.get("/dead-letters/no_such_code")[0] == 404
    assert served.get("/dead-letters/" + CODES[0] + "?limit=0")[0] == 400
    assert served.get("/dead-letters/" + CODES[0] + "?limit=1001")[0] == 400


def test_the_dead_letter_scan_reads_only_what_the_ledger_grew_by(tmp_path: Path) -> None:
    from recurrence_ledger.processor.embedded.deadletterscan import DeadLetterScan
    from recurrence_ledger.processor.web.httpapi import listed_dead_letter

    def dead(line: int, code: str) -> bytes:
        return (
            orjson.dumps(
                {
                    "record": "dead_letter",
                    "dead_letter_id": f"sha256:{line:064x}",
                    "origin": {"line": line},
                    "error": code,
                    "detail": "d",
                    "raw": "x" * 3000,
                }
            )
            + b"\n"
        )

    ledger = tmp_path / "ledger.jsonl"
    other = b'{"record":"match","text":"\\"record\\":\\"dead_letter\\""}\n'
    ledger.write_bytes(dead(1, "invalid_json") + other + dead(3, "unknown_type"))
    scan = DeadLetterScan()
    committed = len(dead(1, "invalid_json") + other)  # the state committed only this much so far
    scan.update(ledger, committed, listed_dead_letter)
    assert scan.counts == {"invalid_json": 1} and scan.scanned == committed
    assert scan.kept["invalid_json"][0]["raw_cut"] and len(scan.kept["invalid_json"][0]["raw"]) == 2000
    with ledger.open("ab") as out:
        out.write(dead(4, "invalid_json"))
    scan.update(ledger, ledger.stat().st_size, listed_dead_letter)
    assert scan.counts == {"invalid_json": 2, "unknown_type": 1}
    assert [d["origin"]["line"] for d in scan.kept["invalid_json"]] == [1, 4]
    # A shorter ledger (another one, rebuilt) is read again from its start.
    ledger.write_bytes(dead(9, "unknown_type"))
    scan.update(ledger, ledger.stat().st_size, listed_dead_letter)
    assert scan.counts == {"unknown_type": 1}


def test_the_page_and_the_document_are_served(served: Served) -> None:
    status, content_type, body = served.get("/ui")
    assert status == 200 and content_type.startswith("text/html") and b'src="/ui/app.js"' in body
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        status, content_type, _ = served.get(f"/ui/{name}")
        assert status == 200 and content_type.startswith(kind)
    assert served.get("/ui/../README.md")[0] == 404
    # Offline: the page loads nothing from another host.
    for name in ("index.html", "app.js", "app.css"):
        text = (REPO / "processor" / "web" / "ui" / name).read_text()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    document = served.json("/openapi.json")
    assert document["openapi"].startswith("3.1") and {"/metrics", "/progress"} <= set(document["paths"])
    assert {"/statistics", "/scopes/{scope_id}/statistics", "/explain/{id}", "/livez", "/readyz"} <= set(
        document["paths"]
    )


@pytest.mark.browser
def test_the_page_shows_what_recurrence_stats_says(served: Served) -> None:
    # The server has a token the URL does not carry: the page asks for it once, then shows everything.
    shown = page_readings(served.url + "/ui", SCREENSHOTS / "ui-embedded.png", ask_token=TOKEN)
    assert not shown["csp_violations"], shown["csp_violations"]
    stats = orjson.loads(served.cli("stats", "--top", "50"))
    want = expected_readings(stats)
    assert shown["scopes"] == want["scopes"]
    assert shown["totals"] == want["totals"]
    by_code = Counter(r["error"] for r in served.records() if r["record"] == "dead_letter")
    assert shown["dead_letters"] == dict(by_code)
    needing = [
        f"{s['scope_id']} {_revision(r)}"
        for s in stats
        for r in s["recurrence"]["top_revisions"][: s["recurrence"]["needing_review"]]
    ]
    assert shown["review"] == needing
    assert shown["review_chosen"] == [row for row in needing if row.split(" ")[0] == shown["chosen"]]
    lines = len(served.journal_lines())
    assert shown["worker_hidden"] and shown["status"].startswith(f"the state as of journal line {lines:,} ")
    # The chosen scope's sparklines are its revisions' verdicts, as `explain` lists them.
    chosen = next(s for s in stats if s["scope_id"] == shown["chosen"])
    for revision in chosen["recurrence"]["top_revisions"][:3]:
        identity = _revision(revision)
        card = orjson.loads(served.cli("explain", identity, "--json"))["cards"]
        (history,) = [c["history"] for c in card if c["scope_id"] == chosen["scope_id"]]
        assert shown["sparks"][identity] == "".join("R" if e == "recurred" else "a" for _, e in history)
    assert shown["explanation"].startswith("revision ")
    listed = orjson.loads(served.cli("patterns", "--all", "--json"))
    assert listed
    assert list(shown["pattern_rows"].items()) == list(expected_pattern_rows(listed).items())


def test_progress_is_the_states_checkpoint_and_answers_304_until_it_moves(served: Served) -> None:
    store = open_state(served.state, must_exist=True)
    try:
        mark = state_mark(store)
    finally:
        store.close()
    status, headers, body = served.fetch("/progress", {})
    assert status == 200 and headers["Content-Type"] == "application/json"
    progress = Progress.model_validate_json(body)
    assert progress.runner == "embedded" and progress.following is True
    assert progress.journal is not None and progress.journal.line == mark.line == len(served.journal_lines())
    assert progress.journal.offset == mark.offset and progress.ledger_bytes == served.ledger.stat().st_size
    assert progress.written_at == mark.body()["written_at"]
    tag = headers["ETag"]
    assert served.fetch("/progress", {"If-None-Match": tag})[0] == 304
    assert served.fetch("/progress", {"If-None-Match": '"other"'})[0] == 200
    # The data paths are tagged from the same version: a poller re-reads them only when the state moved.
    status, headers, _ = served.fetch("/statistics?top=50", {})
    assert status == 200 and served.fetch("/statistics?top=50", {"If-None-Match": headers["ETag"]})[0] == 304
    assert served.fetch("/statistics?top=5", {"If-None-Match": headers["ETag"]})[0] == 200
    # ...and each names the view it was computed from: the page's header comes from the numbers' own answer.
    for path in ("/statistics?top=50", "/dead-letters", "/patterns"):
        assert orjson.loads(served.fetch(path, {})[1]["Recurrence-State"]) == orjson.loads(body), path


def test_metrics_are_the_states_readings(served: Served) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    status, content_type, body = served.get("/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    by_code = Counter(r["error"] for r in served.records() if r["record"] == "dead_letter")
    for code in CODES:  # every code from the start, 0 until written
        assert samples[("recurrence_dead_letters_total", (("code", code),))] == by_code.get(code, 0)
    stats = orjson.loads(served.cli("stats"))
    for field in ("selected", "recurred", "avoided", "unknown", "unlinked_handoff_citations", "needing_review"):
        want = sum(s["recurrence"][field] for s in stats)
        assert samples[("recurrence_statistics", (("field", field),))] == want
    assert samples[("recurrence_scopes", ())] == len(stats)
    assert samples[("recurrence_journal_lines_applied", ())] == len(served.journal_lines())
    assert samples[("recurrence_ledger_bytes", ())] == served.ledger.stat().st_size
    promtool = find("promtool")
    if promtool is not None:
        checked = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_path_that_does_not_exist_is_a_404_listing_those_that_do(served: Served) -> None:
    status, content_type, body = served.get("/statistic")
    assert status == 404 and content_type == "application/json"
    answer = orjson.loads(body)
    assert answer["error"] == "no such path: /statistic"
    assert answer["paths"] == list(served.json("/openapi.json")["paths"])
    assert "/statistics" in answer["paths"] and "/progress" in answer["paths"]


def _tune_cli(served: Served, thresholds: str) -> dict[str, Any]:
    result = subprocess.run(
        [*recurrence_command(), "tune", str(served.journal), "--thresholds", thresholds, "--json"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    body: dict[str, Any] = orjson.loads(result.stdout)
    return body


def test_tune_answers_what_recurrence_tune_says_of_the_journal(served: Served) -> None:
    # The served state's shadow counters, kept by the replay, against a dry run over the same journal.
    body = served.json("/tune?thresholds=4,1,2,3")
    ThresholdWhatIf.model_validate(body)
    assert body["review_threshold"] == 3 and body["incomplete_scopes"] == []
    assert body["thresholds"] == _tune_cli(served, "4,1,2,3")["thresholds"]
    assert [s["scope_id"] for s in body["thresholds"][0]["by_scope"]] == [
        s["scope_id"] for s in orjson.loads(served.cli("stats"))
    ]
    # By default the page's thresholds: 1..10 (two past the configured 3 is within them).
    default = served.json("/tune")
    assert [row["threshold"] for row in default["thresholds"]] == list(range(1, 11))
    for bad in ("0", "101", "x", "2,,3", "1.5"):
        status, _, answer = served.get(f"/tune?thresholds={bad}")
        assert status == 400 and orjson.loads(answer)["error"].startswith("thresholds: "), (bad, answer)


@pytest.mark.browser
def test_the_page_draws_the_tune_chart(served: Served) -> None:
    shown = tune_readings(f"{served.url}/ui#token={TOKEN}", SCREENSHOTS / "tune-chart.png")
    body = served.json("/tune")
    assert any(row["review_proposals"] and row["flags_then_avoided"] for row in body["thresholds"])
    want = expected_tune(body)
    assert shown["bars"] == want["bars"]
    assert shown["table"] == want["table"]
    assert shown["marked"] == want["marked"] == [3]
    assert shown["configured"] == "the state runs at 3"
    assert "rebuild" not in shown["note"]
    # What changing it takes, as recurrence tune says it.
    assert shown["change"].startswith(
        "The state runs at 3, fixed when it was built: to run at another K, replay "
        "the journal into a fresh --state with a fresh --out and --review-threshold K"
    )


def test_the_openapi_document_holds_against_the_server(served: Served) -> None:
    found, ran = failures(served.url, token=TOKEN)
    assert set(ran) == set(served.json("/openapi.json")["paths"]) - {"/openapi.json"}
    assert not found, "\n\n".join(found)


def test_the_api_check_finds_an_answer_the_document_does_not_describe(served: Served) -> None:
    class Wrong(EmbeddedReadSurface):
        async def dead_letters(self, ask: Ask) -> dict[str, Any]:
            return {"total": "many", "by_code": {}}

    store = open_state(served.state)
    try:
        found = app_failures(application(Wrong(store, served.ledger)))
    finally:
        store.close()
    assert [f.split(":")[0] for f in found] == ["GET /dead-letters"]


def test_the_page_names_every_count_of_the_statistics_model() -> None:
    # The page's columns and totals are its LABELS' keys: each count of RecurrenceStatistics, in its order.
    script = (Path(__file__).resolve().parents[2] / "processor" / "web" / "ui" / "app.js").read_text()
    labels = re.search(r"const LABELS = \{(.*?)\};", script, re.S)
    assert labels is not None
    named = re.findall(r"(\w+):", labels.group(1))
    assert named == [name for name in RecurrenceStatistics.model_fields if name != "top_revisions"]


@pytest.mark.browser
def test_the_page_lists_dead_letters_and_patterns_and_opens_one(served: Served) -> None:
    from selenium.webdriver.common.by import By

    from recurrence_ledger.processor.statstable import unknown_flagged
    from tests.support.browser import chromium, open_explanation, open_page, wait

    counts = orjson.loads(served.get("/dead-letters")[2])["by_code"]
    listed = orjson.loads(served.cli("patterns", "--all", "--json"))
    stats = orjson.loads(served.cli("stats", "--top", "50"))
    with chromium(1400, 1300) as driver:
        open_page(driver, f"{served.url}/ui#token={TOKEN}")
        # Dead letters: a code opens the list of its entries, in journal order; one opens its explanation.
        code = max(counts, key=lambda c: counts[c])
        driver.find_element(By.CSS_SELECTOR, f'tr[data-dead-code="{code}"] button.explain').click()
        rows = f'table[data-dead-list="{code}"] tr[data-dead-letter]'
        wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == counts[code])
        want = _dead_letters(served, code)
        assert [r.get_attribute("data-dead-letter") for r in driver.find_elements(By.CSS_SELECTOR, rows)] == [
            r["dead_letter_id"] for r in want
        ]
        first = driver.find_elements(By.CSS_SELECTOR, rows)[0]
        assert first.find_elements(By.TAG_NAME, "td")[0].text == f"line {want[0]['origin']['line']:,}"
        text = open_explanation(driver, first)
        assert text == served.text_of(f"/explain/{want[0]['dead_letter_id']}?format=text").rstrip("\n")
        # Patterns: a row opens its scopes and revisions; a revision opens its yield card in its scope.
        pattern = listed[0]
        driver.find_element(
            By.CSS_SELECTOR, f'#patterns tr[data-pattern="{pattern["signature_key"]}"] button.explain'
        ).click()
        detail = f'[data-pattern-detail="{pattern["signature_key"]}"]'
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, detail + " tr[data-pattern-revision]"))
        revisions = [
            r.get_attribute("data-pattern-revision")
            for r in driver.find_elements(By.CSS_SELECTOR, detail + " tr[data-pattern-revision]")
        ]
        assert revisions == [f"{r['scope_id']} {_revision(r)}" for r in pattern["revisions"]]
        assert ", ".join(pattern["scopes"]) in driver.find_element(By.CSS_SELECTOR, detail).text
        scope, revision = revisions[0].split(" ")
        text = open_explanation(driver, driver.find_element(By.CSS_SELECTOR, detail + " tr[data-pattern-revision]"))
        want_text = served.text_of(f"/explain/{urllib.parse.quote(revision, safe='')}?scope={scope}&format=text")
        assert text == want_text.rstrip("\n")
        # The unknown share: flagged by the rule stats --table uses, per scope and in total.
        flags = {
            c.get_attribute("data-share"): c.get_attribute("data-flagged")
            for c in driver.find_elements(By.CSS_SELECTOR, "#scopes td[data-share]")
        }
        assert flags == {s["scope_id"]: str(unknown_flagged(s["recurrence"])).lower() for s in stats}
        fields = ("selected", "unknown")
        totals = {f: sum(s["recurrence"][f] for s in stats) for f in fields}
        banner = driver.find_element(By.ID, "unknown-flag")
        assert banner.get_attribute("data-flagged") == str(unknown_flagged(totals)).lower()
        if unknown_flagged(totals):
            share = round(100 * totals["unknown"] / totals["selected"])
            assert banner.is_displayed() and banner.text.startswith(f"{share}% of the selections")
        driver.execute_script("window.scrollTo(0, 0)")
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(1400, height + 120)
        SCREENSHOTS.mkdir(exist_ok=True)
        assert driver.save_screenshot(str(SCREENSHOTS / "ui-lists.png"))


@pytest.mark.browser
def test_a_search_and_an_explanation_have_links_that_show_them_again(served: Served) -> None:
    from selenium.webdriver.common.by import By

    from tests.support.browser import chromium, open_explanation, open_page, wait

    stats = orjson.loads(served.cli("stats", "--top", "50"))
    scope = next(s for s in stats if s["recurrence"]["top_revisions"])
    revision = _revision(scope["recurrence"]["top_revisions"][0])
    signature = scope["recurrence"]["top_revisions"][0]["signature_key"]
    with chromium(1400, 1300) as driver:
        open_page(driver, f"{served.url}/ui#token={TOKEN}")
        driver.find_element(By.CSS_SELECTOR, f'#scopes tr[data-scope="{scope["scope_id"]}"] td').click()
        row = driver.find_element(By.CSS_SELECTOR, f'#top tr[data-revision="{revision}"]')
        text = open_explanation(driver, row)
        link = driver.find_element(By.CSS_SELECTOR, "#top tr.explanation-row a[data-share=explanation]")
        href = str(link.get_attribute("href"))
        assert TOKEN not in href
        # The link, opened as someone else would (a new load of the page): the same explanation.
        driver.get(href)
        wait(driver, lambda d: d.find_element(By.ID, "search-explanation").text == text)
        assert scope["scope_id"] in driver.find_element(By.ID, "search-what").text
        # A search: its link shows the same rows, and the box holds the query again.
        box = driver.find_element(By.ID, "search")
        box.clear()
        box.send_keys(signature)
        driver.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#search-table tr[data-found]"))
        found = [
            r.get_attribute("data-found") for r in driver.find_elements(By.CSS_SELECTOR, "#search-table tr[data-found]")
        ]
        href = str(driver.find_element(By.ID, "search-link").get_attribute("href"))
        fragment = urllib.parse.parse_qs(urllib.parse.urlsplit(href).fragment)
        assert fragment == {"search": [signature], "scope": [scope["scope_id"]]} and TOKEN not in href
        driver.get("about:blank")
        driver.get(href)
        wait(
            driver,
            lambda d: (
                [
                    r.get_attribute("data-found")
                    for r in d.find_elements(By.CSS_SELECTOR, "#search-table tr[data-found]")
                ]
                == found
            ),
        )
        assert driver.find_element(By.ID, "search").get_attribute("value") == signature
