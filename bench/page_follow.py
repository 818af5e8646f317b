"""How long the page takes to follow a replay (issue 28, section 2), measured in headless Chromium.

A 50-scope journal (``recurrence generate --entries N --scopes 50 --seed 1``,
N = 200,000 by default, or ``--journal``):

1. the first ``--split`` of its lines are replayed into a fresh state;
2. ``recurrence serve`` starts on that state and the page (/ui) opens in
   headless Chromium (Debian's chromium and chromedriver, ``make tools``);
3. the whole journal is replayed into the same state (it resumes after the
   first part) while three observers record what they see and when:
   ``/progress`` polled every 50 ms (what the server serves), the page's
   ``data-line`` every 100 ms (what the reader sees), and the replay's own
   commit times (``written_at``, the writer's clock, on the same host);
4. after the replay ends: how long until ``/progress`` says its last line,
   until ``/statistics`` equals what ``recurrence stats`` prints, and until
   the page shows the last line with every number equal to ``stats``.

The lag during the replay is, for each state the page showed, the time it
showed it minus the time that batch was committed. ``--baseline`` also times
the same resumed replay with nothing following it, before each followed one
(``--rounds`` pairs, interleaved, each from a copy of the same first part),
to see what following costs the writer. ``--screenshots DIR`` saves the
50-scope page after the last replay (an explanation open beside its row) and
a search. One JSON line per phase; the last is written to
bench/results/page_follow.json.

    python bench/page_follow.py [--entries 200000] [--split 0.5] [--rounds 2 --baseline] [--screenshots docs/img]
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from benchdoc import emit  # bench/ is the script's directory, so first on sys.path
from proccpu import cpu_seconds
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from devkit.localrun import chromium_arguments, replay_command, run_recurrence, serve_process
from recurrence_ledger.processor.synthetic import JournalSpec, write

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "page_follow.json"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        body: bytes = response.read()
        return body


def stats_cli(state: Path) -> Any:
    out = run_recurrence("stats", "--state", str(state), "--top", "50", timeout=600, check=True).stdout
    return json.loads(out)


def replay(journal: Path, state: Path, ledger: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one replay (the CPU of children reaped meanwhile: only the replay)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(replay_command(journal, state, ledger), check=True, capture_output=True, timeout=7200)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (the browser's processes under chromedriver)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Watch(threading.Thread):
    """Polls ``read`` every ``interval`` and keeps (wall time, value) whenever the value changes."""

    def __init__(self, read: Any, interval: float) -> None:
        super().__init__(daemon=True)
        self.read, self.interval = read, interval
        self.seen: list[tuple[float, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        last = object()
        while not self.stop.is_set():
            try:
                value = self.read()
            except Exception:  # a poll that fails is retried at the next tick
                value = last
            if value != last:
                self.seen.append((time.time(), value))
                last = value
            time.sleep(self.interval)


def page_numbers(driver: Any) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for cell in driver.find_elements(By.CSS_SELECTOR, "#scopes td[data-field]"):
        found.setdefault(str(cell.get_attribute("data-scope")), {})[str(cell.get_attribute("data-field"))] = int(
            cell.get_attribute("data-value")
        )
    return found


def expected_numbers(stats: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    fields = ("selected", "recurred", "avoided", "unknown", "unlinked_handoff_citations", "needing_review")
    return {s["scope_id"]: {f: s["recurrence"][f] for f in fields} for s in stats}


def browser(width: int = 1400, height: int = 1300) -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in chromium_arguments(width, height):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)


def until(condition: Any, timeout: float, interval: float = 0.05) -> float:
    """Seconds until ``condition()`` holds (polled), or raise after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError("condition not met")
        time.sleep(interval)
    return time.monotonic() - started


def screenshots(driver: Any, where: Path) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    saved = []
    # The review list of the chosen scope, its second revision's explanation open beside its row.
    rows = driver.find_elements(By.CSS_SELECTOR, "#review tr[data-review] button.explain")
    if len(rows) > 1:
        rows[1].click()
        time.sleep(1.5)
    driver.execute_script("window.scrollTo(0, 0)")
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1400, height + 120)
    time.sleep(0.5)
    driver.save_screenshot(str(where / "ui-50-scopes.png"))
    saved.append(str(where / "ui-50-scopes.png"))
    # A search by signature, and the top of the page it opens on.
    driver.set_window_size(1400, 1000)
    box = driver.find_element(By.ID, "search")
    box.clear()
    box.send_keys("port already bound")
    driver.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    time.sleep(1.5)
    first = driver.find_elements(By.CSS_SELECTOR, "#search-table tr[data-found] button.explain")
    if first:
        first[0].click()
        time.sleep(1.5)
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.3)
    driver.save_screenshot(str(where / "ui-search.png"))
    saved.append(str(where / "ui-search.png"))
    return saved


def copy_of(base: tuple[Path, Path], work: Path, name: str) -> tuple[Path, Path]:
    """A fresh copy of the state and ledger after the first part, for one replay."""
    state, ledger = work / f"{name}-state", work / f"{name}-ledger.jsonl"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(base[0], state)
    shutil.copy(base[1], ledger)
    return state, ledger


def followed(journal: Path, state: Path, ledger: Path, total: int, resumed: int, shots: Path | None) -> dict[str, Any]:
    """The resumed replay with serve and the page following it; what each saw and when."""
    url, server = serve_process(state, stderr=subprocess.DEVNULL, timeout=60)
    driver = None
    try:
        driver = browser()
        page = driver

        def body() -> Any:
            return page.find_element(By.TAG_NAME, "body")

        driver.get(url + "/ui")
        until(lambda: body().get_attribute("data-loaded") == "true", 120)
        served = Watch(lambda: json.loads(get(url + "/progress")), 0.05)
        answered = Watch(lambda: get(url + "/statistics?top=50"), 0.25)
        # One WebDriver command per look (each costs the browser some CPU too).
        shown = Watch(
            lambda: tuple(
                page.execute_script(
                    "return [document.body.getAttribute('data-line'), document.body.getAttribute('data-shown-line')]"
                )
            ),
            0.25,
        )
        for watch in (served, answered, shown):
            watch.start()
        browser_pids = descendants(driver.service.process.pid)
        serve_cpu, browser_cpu = cpu_seconds(server.pid), cpu_of(browser_pids)
        seconds, replay_cpu = replay(journal, state, ledger)
        ended = time.time()
        serve_cpu, browser_cpu = cpu_seconds(server.pid) - serve_cpu, cpu_of(browser_pids) - browser_cpu
        until(lambda: shown.seen and shown.seen[-1][1][1] == str(total), 120)
        for watch in (served, answered, shown):
            watch.stop.set()
            watch.join()
        want = stats_cli(state)
        assert page_numbers(driver) == expected_numbers(want), "the page's numbers are not what stats prints"

        def first(seen: list[tuple[float, Any]], test: Any) -> float:
            return round(next(at for at, value in seen if test(value)) - ended, 2)

        # During the replay: for each state shown, how long after its batch was committed.
        written = {v["journal"]["line"]: epoch(v["written_at"]) for _, v in served.seen if v["written_at"]}
        page_lags = [
            at - written[int(v[1])]
            for at, v in shown.seen
            if v[1] is not None and int(v[1]) in written and int(v[1]) not in (resumed, total)
        ]
        server_lags = [
            at - written[v["journal"]["line"]]
            for at, v in served.seen
            if v["journal"]["line"] in written and v["journal"]["line"] not in (resumed, total)
        ]
        found: dict[str, Any] = {
            "replay_seconds": round(seconds, 2),
            "replay_cpu_s": round(replay_cpu, 2),
            # CPU the followers took while the replay ran (serve includes the watches' own requests)
            "serve_cpu_s": round(serve_cpu, 2),
            "browser_cpu_s": round(browser_cpu, 2),
            "views_served": len(served.seen),
            "states_drawn": len({v[1] for _, v in shown.seen}),
            "progress_after_end_s": first(served.seen, lambda v: v["journal"]["line"] == total),
            "statistics_after_end_s": first(answered.seen, lambda v: json.loads(v) == want),
            "page_after_end_s": first(shown.seen, lambda v: v[1] == str(total)),
            "server_lag_during_s": spread(server_lags),
            "page_lag_during_s": spread(page_lags),
        }
        if shots is not None:
            found["screenshots"] = screenshots(driver, shots)
        return found
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=30)


def spread(values: list[float]) -> dict[str, float] | None:
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)} if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--journal", type=Path, help="a journal to use instead of generating one")
    parser.add_argument("--split", type=float, default=0.5, help="share of the journal replayed before serve starts")
    parser.add_argument("--rounds", type=int, default=1, help="followed replays (each after a baseline run)")
    parser.add_argument("--baseline", action="store_true", help="also time the resumed replay with nothing following")
    parser.add_argument("--screenshots", type=Path, help="save the page's screenshots into this directory")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="page-follow-"))
    work.mkdir(parents=True, exist_ok=True)
    journal = args.journal or work / "journal.jsonl"
    if args.journal is None:
        write(JournalSpec(entries=args.entries, scopes=50, seed=1), str(journal))
    lines = journal.read_bytes().splitlines(keepends=True)
    total, resumed = len(lines), int(len(lines) * args.split)
    first = work / "first.jsonl"
    first.write_bytes(b"".join(lines[:resumed]))
    base = (work / "base-state", work / "base-ledger.jsonl")
    shutil.rmtree(base[0], ignore_errors=True)
    base[1].unlink(missing_ok=True)
    emit(
        "setup",
        entries=total,
        first=resumed,
        cores=os.cpu_count(),
        load=os.getloadavg()[0],
        python=platform.python_version(),
    )
    emit("first part", seconds=round(replay(first, *base)[0], 2))
    rounds = []
    for number in range(args.rounds):
        # Interleaved: the same resumed replay with nothing following, then followed, from the same copy.
        baseline = replay(journal, *copy_of(base, work, "baseline")) if args.baseline else None
        shots = args.screenshots if number == args.rounds - 1 else None
        found = followed(journal, *copy_of(base, work, "followed"), total, resumed, shots)
        rounds.append(
            emit(
                "round",
                number=number,
                baseline_seconds=None if baseline is None else round(baseline[0], 2),
                baseline_cpu_s=None if baseline is None else round(baseline[1], 2),
                **found,
                load=os.getloadavg()[0],
            )
        )
    result = emit(
        "follow",
        entries=total,
        resumed_after=resumed,
        rounds=rounds,
        page_after_end_s=statistics.median(r["page_after_end_s"] for r in rounds),
        statistics_after_end_s=statistics.median(r["statistics_after_end_s"] for r in rounds),
        replay_seconds=statistics.median(r["replay_seconds"] for r in rounds),
        baseline_seconds=statistics.median(r["baseline_seconds"] for r in rounds) if args.baseline else None,
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
