"""The worker's read surface beyond statistics: ``/explain``, ``/dead-letters``, ``/patterns``, the page, OpenAPI.

Two workers share four partitions, so every check goes through routing: an
explanation asked without a scope is looked up in the asking worker's own
record indexes and then fanned out; with ``?scope=`` it goes to the scope's
partition owner. Each answer is compared with the embedded runner over the
same journal (the oracle): the same Explainer, only the journal positions'
origins differ (a file line there, a topic offset here).

The workers have a web token (``RECURRENCE_HTTP_TOKEN``), so every check goes
through the guard, the fan-out between workers included; the last tests ask
them as a stranger would (``tests/support/hostile.py``, the same checks as
``recurrence serve``'s), start a second worker on a data folder in use, and
cut a file ``ledger-dump --follow`` writes.
"""

import re
import subprocess
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.deployment import Deployment, Worker, owned_partitions, write_journal
from devkit.localrun import REPO, free_port, recurrence_command, wait_for
from recurrence_ledger.processor.core.patterns import listing
from recurrence_ledger.processor.core.recordindex import dead_letter_counts
from recurrence_ledger.processor.core.state import State
from recurrence_ledger.processor.embedded.archive import FileArchive
from recurrence_ledger.processor.embedded.reading import statistics
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.embedded.statedir import MemoryState
from recurrence_ledger.processor.explain import Explainer
from recurrence_ledger.processor.store.base import StateStore, Transaction
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.tune import tune
from recurrence_ledger.processor.verify import distinct
from recurrence_ledger.processor.web.webtoken import TOKEN_ENV
from recurrence_ledger.schemas.constants import DEFAULT_PATTERN_SCOPES
from recurrence_ledger.schemas.readsurface import DeadLetterListing, Explanation, PatternSuggestions, ThresholdWhatIf
from tests.support.apicheck import failures
from tests.support.browser import (
    SCREENSHOTS,
    expected_pattern_rows,
    expected_readings,
    expected_tune,
    page_readings,
    tune_readings,
)
from tests.support.hostile import PATH_VALUES, TOKEN, check_hostile_requests, check_token_guard, report, request

EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"
_ORIGIN = re.compile(r"journal line \d+|[\w.-]+\[\d+\]@\d+")


class Cluster:
    def __init__(
        self, deployment: Deployment, workers: list[Worker], store: StateStore, ledger: Path, journal: Path
    ) -> None:
        self.deployment, self.workers = deployment, workers
        self.explainer = Explainer(State(Transaction(store)), FileArchive(store, ledger, journal))
        self.store = store
        self.journal = journal
        self.records = [orjson.loads(line) for line in ledger.read_bytes().splitlines() if line.strip()]

    def explain(self, worker: Worker, identity: str, query: str = "format=json") -> dict[str, Any]:
        status, body = worker.get(f"/explain/{urllib.parse.quote(identity, safe='')}?{query}")
        assert status == 200, body
        parsed: dict[str, Any] = orjson.loads(body)
        return parsed


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("web")
    journal = work / "journal.jsonl"
    generated = generate(JournalSpec(entries=400, scopes=6, seed=21, garbage_ratio=0.04, experiences_per_scope=6))
    write_journal(journal, [*EXAMPLE.read_bytes().splitlines(), *generated])
    state, ledger = MemoryState(), work / "oracle.jsonl"
    replay(str(journal), state, ledger)
    store = state.view()
    deployment = Deployment(kafka_bootstrap, work)
    deployment.extra_env[TOKEN_ENV] = TOKEN
    try:
        deployment.apply_topics()
        workers = [deployment.worker("w1").start(), deployment.worker("w2").start()]
        wait_for(lambda: owned_partitions(workers, deployment.partitions), 120, 0.2, "both workers to own partitions")
        deployment.publish(journal)
        expected = len(ledger.read_bytes().splitlines())
        wait_for(lambda: len(distinct(deployment.outputs())) == expected, 180, 0.5, "every output record")
        wait_for(lambda: owned_partitions(workers, deployment.partitions), 60, 0.2, "a stable split")
        yield Cluster(deployment, workers, store, ledger, journal)
    finally:
        deployment.close()


def _comparable(value: Any) -> Any:
    """An explanation without what names a journal position's origin (a line there, an offset here)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k != "origin"}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return _ORIGIN.sub("<origin>", value) if isinstance(value, str) else value


def _revision(record: dict[str, Any]) -> str:
    art = record["artifact_ref"]
    return f"{art['family']}/{art['artifact_id']}@{art['revision']}"


def test_explain_on_any_worker_equals_the_embedded_explanation(cluster: Cluster) -> None:
    records = cluster.records
    recurred = next(r for r in records if r.get("event") == "recurred" and r["scope_id"] == "rfc-minimum")
    selected = [r for r in records if r.get("event") == "selected"][:3]
    match = next(r for r in records if r["record"] == "match" and r["scope_id"] != "rfc-minimum")
    cases = [
        (recurred["observation_id"], recurred["scope_id"]),
        (match["match_digest"], match["scope_id"]),
        *((r["observation_id"], r["scope_id"]) for r in selected),
        (_revision(recurred), None),
    ]
    for identity, scope_id in cases:
        want = _comparable(cluster.explainer.explain(identity))
        for worker in cluster.workers:
            got = cluster.explain(worker, identity)
            Explanation.model_validate_json(orjson.dumps(got))
            assert _comparable(got) == want, identity
            if scope_id is not None:  # routed to the scope's owner instead of searched for
                assert _comparable(cluster.explain(worker, identity, f"format=json&scope={scope_id}")) == want
    # The chain's texts came from the topics: the Outcome's failure item and the frozen candidate set.
    chain = {link["link"]: link for link in cluster.explain(cluster.workers[0], recurred["observation_id"])["chain"]}
    assert chain["failure item"]["digest_matches"] is True and chain["match"]["result"] == "matched"
    assert chain["task_outcome"]["origin"]["topic"] == f"{cluster.deployment.prefix}.journal"
    # Human text by default, as the CLI prints it.
    status, text = cluster.workers[1].get(f"/explain/{recurred['observation_id']}")
    assert status == 200 and text.decode().startswith(f"observation {recurred['observation_id']} (recurred)")
    assert "failure item: check #0 failed, verified" in text.decode()
    assert cluster.workers[0].get("/explain/no-such-record")[0] == 404


def test_dead_letters_are_explained_and_counted(cluster: Cluster) -> None:
    dumped = [orjson.loads(r) for r in distinct(cluster.deployment.outputs())]
    dead = [r for r in dumped if r["record"] == "dead_letter"]
    assert dead
    for record in dead[:4]:
        got = cluster.explain(cluster.workers[0], record["dead_letter_id"])
        assert got["kind"] == "dead_letter" and got["chain"][1]["error"] == record["error"]
        assert got["chain"][0]["origin"] == record["origin"]
    want = dict(Counter(r["error"] for r in cluster.records if r["record"] == "dead_letter"))
    assert dead_letter_counts(Transaction(cluster.store)) == want
    for worker in cluster.workers:
        status, body = worker.get_json("/dead-letters")
        assert status == 200 and body == {"total": sum(want.values()), "by_code": dict(sorted(want.items()))}
    # Each code lists its dead letters on either worker: the embedded ledger's, but for where each came from (a
    # line there, a topic offset here: ordered by journal partition and offset); the first N, and how many more.
    for code, count in want.items():
        embedded = [r for r in cluster.records if r["record"] == "dead_letter" and r["error"] == code]
        for worker in cluster.workers:
            status, body = worker.get_json(f"/dead-letters/{code}")
            assert status == 200, body
            DeadLetterListing.model_validate(body)
            assert body["total"] == count and body["more"] == 0
            assert sorted((d["scope_id"] or "", d["detail"], d["raw"]) for d in body["dead_letters"]) == sorted(
                (r["scope_id"] or "", r["detail"], r["raw"][:2000]) for r in embedded
            )
            origins = [(d["origin"]["partition"], d["origin"]["offset"]) for d in body["dead_letters"]]
            assert origins == sorted(origins)
            assert all(d["origin"]["topic"] == f"{cluster.deployment.prefix}.journal" for d in body["dead_letters"])
    code = max(want, key=lambda c: want[c])
    status, body = cluster.workers[1].get_json(f"/dead-letters/{code}?limit=1")
    assert status == 200 and len(body["dead_letters"]) == 1 and body["more"] == want[code] - 1
    assert cluster.workers[0].get_json("/dead-letters/no_such_code")[0] == 404


def _embedded_patterns(cluster: Cluster) -> list[dict[str, Any]]:
    """``recurrence patterns --all --json`` of the embedded replay; once every worker's /patterns equals it."""
    want = listing(Transaction(cluster.store), DEFAULT_PATTERN_SCOPES, suggested_only=False)

    def served() -> bool:
        return all(
            worker.get_json("/patterns")
            == (200, {"available": True, "note": None, "min_scopes": DEFAULT_PATTERN_SCOPES, "patterns": want})
            for worker in cluster.workers
        )

    # The patterns agent runs behind the journal agent: its rows arrive after the outputs.
    wait_for(served, 120, 0.5, "/patterns on both workers to equal the embedded listing")
    return want


def test_patterns_on_either_worker_equal_the_embedded_listing(cluster: Cluster) -> None:
    want = _embedded_patterns(cluster)
    assert any(row["suggested"] for row in want) and not all(row["suggested"] for row in want)
    status, body = cluster.workers[1].get("/patterns")
    assert status == 200 and PatternSuggestions.model_validate_json(body).patterns
    # Each worker's own rows (?local=1) are the rows of the keys it owns: together exactly the listing.
    local = [worker.get_json("/patterns?local=1") for worker in cluster.workers]
    assert all(status == 200 for status, _ in local)
    keys = [row["signature_key"] for _, body in local for row in body["patterns"]]
    assert sorted(keys) == sorted(row["signature_key"] for row in want)
    assert all(body["patterns"] for _, body in local), "both workers own pattern keys: the answer was merged"


def test_the_openapi_document_holds_against_a_live_worker(cluster: Cluster) -> None:
    worker = cluster.workers[0]
    _, document = worker.get_json("/openapi.json")
    assert "/metrics" in document["paths"] and "/explain/{id}" in document["paths"]
    found, ran = failures(worker.url, max_examples=15, token=TOKEN)
    assert set(ran) == set(document["paths"]) - {"/openapi.json"}
    assert not found, "\n\n".join(found)


@pytest.mark.browser
def test_the_worker_page_shows_what_statistics_say(cluster: Cluster) -> None:
    worker = cluster.workers[1]
    patterns = _embedded_patterns(cluster)
    # The token in the URL's fragment (never sent to the server): the page takes it, and drops it from the address.
    shown = page_readings(f"{worker.url}/ui#token={TOKEN}", SCREENSHOTS / "ui-worker.png")
    assert "token" not in shown["address"] and not shown["csp_violations"], shown["csp_violations"]
    status, served = worker.get_json("/statistics?top=50")
    assert status == 200
    want = expected_readings(served)
    assert want == expected_readings(statistics(cluster.store, None, 50))  # = `recurrence stats --top 50`
    assert shown["scopes"] == want["scopes"] and shown["totals"] == want["totals"]
    assert shown["dead_letters"] == dict(Counter(r["error"] for r in cluster.records if r["record"] == "dead_letter"))
    assert list(shown["pattern_rows"].items()) == list(expected_pattern_rows(patterns).items())
    assert shown["explanation"].startswith("revision ")
    # Its own partitions, their positions and lag, and its readiness, as /progress says.
    status, progress = worker.get_json("/progress")
    assert status == 200 and progress["runner"] == "worker"
    assert not shown["worker_hidden"] and progress["partitions"]
    assert shown["partitions"] == {
        p["partition"]: [
            str(p["partition"]),
            f"{p['position']:,}" if p["position"] is not None else "–",
            f"{p['lag']:,}" if p["lag"] is not None else "–",
            "ready" if p["ready"] else "restoring",
        ]
        for p in progress["partitions"]
    }
    assert shown["status"].startswith(f"worker {progress['url']}: journal partitions ")


def test_tune_on_either_worker_is_recurrence_tune_of_the_journal(cluster: Cluster) -> None:
    # The worker's state tables keep the same shadow counters, through the same engine.
    want = tune(str(cluster.journal), range(1, 11))[0]["thresholds"]
    assert any(row["review_proposals"] for row in want)
    for worker in cluster.workers:
        status, body = worker.get_json("/tune")
        assert status == 200, body
        ThresholdWhatIf.model_validate(body)
        assert body["review_threshold"] == 3 and body["incomplete_scopes"] == []
        assert body["thresholds"] == want
    # Each worker's own answer (?local=1) holds the scopes of its partitions: together every scope, once.
    local = [worker.get_json("/tune?local=1&thresholds=3") for worker in cluster.workers]
    scopes = [row["scope_id"] for _, body in local for row in body["thresholds"][0]["by_scope"]]
    assert sorted(scopes) == [row["scope_id"] for row in want[0]["by_scope"]]
    assert all(body["thresholds"][0]["by_scope"] for _, body in local), "both workers own scopes: merged"


@pytest.mark.browser
def test_the_worker_page_draws_the_tune_chart(cluster: Cluster) -> None:
    worker = cluster.workers[0]
    shown = tune_readings(f"{worker.url}/ui#token={TOKEN}", SCREENSHOTS / "tune-chart-worker.png")
    status, body = worker.get_json("/tune")
    assert status == 200
    want = expected_tune(body)
    assert shown["bars"] == want["bars"] and shown["table"] == want["table"]
    assert shown["marked"] == want["marked"] == [3]


# -- a stranger's requests, a second worker, a cut file (issue 26) --------------------------------------------
def test_every_data_path_of_a_worker_asks_for_the_token(cluster: Cluster) -> None:
    worker = cluster.workers[0]
    documented = request(worker.url, "/openapi.json", TOKEN).json()["paths"]
    asked = check_token_guard(worker.url, documented, PATH_VALUES)
    assert {"/metrics", "/statistics", "/dead-letters", "/patterns", "/openapi.json"} <= set(asked)
    # Faust's own views are not served: not the app's details at /, not the tables at /table/.
    for path in ("/router/", "/table/", "/table/recurrence-state/", "/graph", "/stats/", "/performance/"):
        assert request(worker.url, path).status == 401
        assert request(worker.url, path, TOKEN).status == 404, path
    assert request(worker.url, "/", TOKEN).headers["location"] == "/ui"


def test_hostile_requests_to_a_worker_are_refused_with_a_4xx_and_little_log(cluster: Cluster) -> None:
    worker = cluster.workers[1]
    before = worker.log_path.read_bytes()
    for _ in range(2):
        seen = check_hostile_requests(worker.url)
    assert seen["GET /explain/experience%2FE7@18446744073709551616 (token)"] == 404
    print(f"\n[hostile: worker]\n{report(seen)}")
    logged = worker.log_path.read_bytes()[len(before) :].decode(errors="replace")
    assert "Traceback" not in logged and "\x1b" not in logged
    refusals = [line for line in logged.splitlines() if "recurrence.web" in line]
    assert len(refusals) <= 6, refusals


def _rebalances(worker: Worker) -> float:
    status, body = worker.get("/metrics")
    assert status == 200
    found = re.search(rb"^recurrence_rebalances(?:_total)? (\S+)$", body, re.MULTILINE)
    assert found is not None
    return float(found.group(1))


def test_a_second_worker_on_a_data_folder_in_use_exits_2_at_once_and_the_first_is_left_alone(
    cluster: Cluster,
) -> None:
    first = cluster.workers[0]
    split = owned_partitions(cluster.workers, cluster.deployment.partitions)
    assert split is not None and first.proc is not None
    rebalances = _rebalances(first)
    second = Worker(cluster.deployment, "w1-again", free_port(), first.datadir).start()
    assert second.proc is not None
    began = time.monotonic()
    code = second.proc.wait(timeout=30)
    took = time.monotonic() - began
    said = [line for line in second.log_path.read_text().splitlines() if line and not line.startswith("=====")]
    assert code == 2 and took < 5, (code, took, said)
    assert len(said) == 1 and str(first.datadir) in said[0] and f"pid {first.proc.pid}" in said[0], said
    time.sleep(3)  # a join would have started a rebalance by now
    assert _rebalances(first) == rebalances
    assert owned_partitions(cluster.workers, cluster.deployment.partitions) == split


def test_ledger_dump_follow_stops_when_its_file_is_cut(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "followed.jsonl"
    process = subprocess.Popen(
        [*recurrence_command(), "ledger-dump", "--follow", "--out", str(out)],
        env=cluster.deployment.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: out.exists() and out.stat().st_size > 0, 60, 0.2, "ledger-dump to write the records")
        with out.open("r+b") as handle:
            handle.truncate(0)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 2, stderr
    assert len(stderr.strip().splitlines()) == 1 and "was truncated" in stderr, stderr
    assert out.read_bytes() == b"", "nothing was written at the old position"
    # And an existing file is not overwritten without --force.
    out.write_bytes(b"keep\n")
    result = cluster.deployment.run("ledger-dump", "--out", str(out), check=False)
    assert result.returncode == 2 and "--force" in result.stderr and out.read_bytes() == b"keep\n"
