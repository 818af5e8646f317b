"""The repair loop on the Kafka worker answers what the embedded runner answers (issue 42).

Two workers share the partitions, so half the questions are forwarded to the scope's owner. The
journal is the worked example carried past Review (``examples/repair-loop.jsonl``) and a generated
one with revisions; the oracle is the embedded replay of the same journal, read with the same
``repairloop`` functions the CLI uses.
"""

import urllib.parse
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from devkit.deployment import Deployment, Worker, write_journal
from devkit.localrun import REPO
from recurrence_ledger.processor import repairloop
from recurrence_ledger.processor.core.retirement import RetirementRules
from recurrence_ledger.processor.core.state import State
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.embedded.statedir import MemoryState
from recurrence_ledger.processor.store.base import StateStore, Transaction
from recurrence_ledger.processor.synthetic import JournalSpec, generate

EXAMPLE = REPO / "examples" / "repair-loop.jsonl"


@pytest.fixture(scope="module")
def running(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[Worker], StateStore]]:
    work = tmp_path_factory.mktemp("repair-loop")
    journal = work / "journal.jsonl"
    generated = generate(JournalSpec(entries=1500, scopes=5, seed=42, experiences_per_scope=8))
    write_journal(journal, [*EXAMPLE.read_bytes().splitlines(), *generated])
    state, ledger = MemoryState(), work / "oracle.jsonl"
    replay(str(journal), state, ledger)
    deployment = Deployment(kafka_bootstrap, work)
    try:
        yield deployment.two_workers_through(journal, len(ledger.read_bytes().splitlines())), state.view()
    finally:
        deployment.close()


def _get(worker: Worker, path: str) -> Any:
    status, body = worker.get(path)
    assert status == 200, (path, body)
    return orjson.loads(body)


def test_every_worker_answers_history_suggestions_and_trends_as_embedded(
    running: tuple[list[Worker], StateStore],
) -> None:
    workers, store = running
    state = State(Transaction(store))
    scopes = sorted(state.scope_ids())
    assert "team-a" in scopes and len(scopes) > 1
    compared = 0
    for scope in scopes:
        quoted = urllib.parse.quote(scope, safe="")
        want_trends = repairloop.trends(state, scope, 50)
        want_suggestions = repairloop.scope_suggestions(state, scope, RetirementRules(min_selected=2))
        artifacts = sorted({ref[1] for ref in state.heads(scope, "experience")})[:4]
        for worker in workers:
            assert _get(worker, f"/scopes/{quoted}/trends?window=50") == want_trends
            assert _get(worker, f"/scopes/{quoted}/suggestions?min_selected=2") == want_suggestions
            for artifact_id in artifacts:
                got = _get(worker, f"/scopes/{quoted}/history/experience/{urllib.parse.quote(artifact_id, safe='')}")
                assert got == repairloop.history(state, scope, "experience", artifact_id, 3)
                compared += 1
    assert compared > 10
    effect = _get(workers[1], "/scopes/team-a/history/experience/E7")["revisions"][1]["repair_effect"]
    assert effect["verdict"] == "stopped"
    status, csv = workers[0].get("/scopes/team-a/trends?window=5&format=csv")
    assert status == 200 and csv.splitlines()[0].startswith(b"scope_id,family,artifact_id")
    status, _ = workers[0].get("/scopes/team-a/history/experience/E99")
    assert status == 404
