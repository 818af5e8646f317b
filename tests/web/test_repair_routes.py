"""``/scopes/{scope_id}/history|suggestions|trends`` on ``recurrence serve``: the CLI's answers, the documented shapes.

The worker's surface answers with the same ``repairloop.answer`` over the scope's partition
(``tests/kafka/test_repair_loop.py`` compares the two over a real broker).
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from recurrence_ledger.processor import repairloop
from recurrence_ledger.processor.core.retirement import RetirementRules
from recurrence_ledger.processor.core.state import State
from recurrence_ledger.processor.embedded.reading import open_state
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.store.base import StateStore, Transaction
from recurrence_ledger.processor.web.openapi import document
from recurrence_ledger.processor.web.routes import routes_of
from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application
from recurrence_ledger.schemas.readsurface import ArtifactHistory, RetirementSuggestions, Trends
from tests.support.tools import REPO

EXAMPLE = REPO / "examples" / "repair-loop.jsonl"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateStore]:
    work = tmp_path_factory.mktemp("repair-routes")
    replay(str(EXAMPLE), work / "state", work / "ledger.jsonl")
    opened = open_state(work / "state", must_exist=True)
    yield opened
    opened.close()


def _get(store: StateStore, *paths: str) -> list[tuple[int, str, bytes]]:
    async def ask() -> list[tuple[int, str, bytes]]:
        async with TestClient(TestServer(application(EmbeddedReadSurface(store)))) as client:
            answers = []
            for path in paths:
                response = await client.get(path)
                answers.append((response.status, response.headers.get("Content-Type", ""), await response.read()))
            return answers

    return asyncio.run(ask())


def test_the_routes_answer_what_the_cli_prints(store: StateStore) -> None:
    state = State(Transaction(store))
    (h, _, history), (s, _, suggestions), (t, _, trends), (c, content_type, csv) = _get(
        store,
        "/scopes/team-a/history/experience/E8",
        "/scopes/team-a/suggestions?min_selected=4",
        "/scopes/team-a/trends?window=5",
        "/scopes/team-a/trends?window=5&format=csv",
    )
    assert (h, s, t, c) == (200, 200, 200, 200)
    expected: Any = repairloop.history(state, "team-a", "experience", "E8", 3)
    assert orjson.loads(history) == expected
    ArtifactHistory.model_validate_json(history)
    assert expected["revisions"][1]["repair_effect"]["verdict"] == "not_better"
    assert orjson.loads(suggestions) == repairloop.scope_suggestions(state, "team-a", RetirementRules(min_selected=4))
    RetirementSuggestions.model_validate_json(suggestions)
    assert orjson.loads(trends) == repairloop.trends(state, "team-a", 5)
    Trends.model_validate_json(trends)
    assert content_type.startswith("text/csv") and csv.splitlines()[0].startswith(b"scope_id,family,artifact_id")


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/scopes/team-a/history/experience/E99", 404, "no revision of experience/E99"),
        ("/scopes/nope/history/experience/E7", 404, "no accepted entry for scope"),
        ("/scopes/team-a/history/E7", 400, "family/artifact_id"),
        ("/scopes/team-a/suggestions?unknown_percent=101", 400, "unknown_percent must be an integer 1..100"),
        ("/scopes/team-a/trends?window=0", 400, "window must be an integer"),
        ("/scopes/team-a/trends?format=xml", 400, "format must be json or csv"),
    ],
)
def test_bad_questions_are_refused_with_their_status(store: StateStore, path: str, status: int, says: str) -> None:
    [(got, _, body)] = _get(store, path)
    assert got == status and says in orjson.loads(body)["error"]


def test_a_window_too_small_for_the_scope_is_a_400(tmp_path: Path) -> None:
    from recurrence_ledger.processor.synthetic import JournalSpec, write

    journal = tmp_path / "journal.jsonl"
    write(JournalSpec(entries=12_000, scopes=1, seed=2), str(journal))
    replay(str(journal), tmp_path / "state", tmp_path / "ledger.jsonl")
    opened = open_state(tmp_path / "state", must_exist=True)
    try:
        [(status, _, body)] = _get(opened, "/scopes/scope-000/trends?window=1")
    finally:
        opened.close()
    assert status == 400 and "use a window of at least 2" in orjson.loads(body)["error"]


@pytest.mark.parametrize("server", ["worker", "embedded"])
def test_the_document_describes_the_three_paths(server: str) -> None:
    routes = [(r.documented, r.public) for r in routes_of(server)]  # type: ignore[arg-type]
    paths = document(server, routes)["paths"]  # type: ignore[arg-type]
    history = paths["/scopes/{scope_id}/history/{family}/{artifact_id}"]["get"]
    assert history["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("ArtifactHistory")
    trends = paths["/scopes/{scope_id}/trends"]["get"]["responses"]["200"]["content"]
    assert set(trends) == {"application/json", "text/csv"}
    assert "409" in paths["/scopes/{scope_id}/suggestions"]["get"]["responses"]
