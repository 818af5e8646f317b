"""``recurrence explain``: the evidence chain behind a record, and a revision's yield card."""

from pathlib import Path
from typing import Any

import orjson
import pytest

from recurrence_ledger.processor.core.state import State
from recurrence_ledger.processor.explain import Explainer, NotFoundError, render, sparkline
from recurrence_ledger.processor.store.base import Transaction
from tests.support.builders import CONDITION, CUE, Journal, Runner, check, claim, failure_block, linked_setup

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rfc-minimum.jsonl"


class MemorySources:
    """What a runner keeps: every emitted record by id, every fed line by its origin."""

    def __init__(self, runner: Runner, lines: list[bytes]) -> None:
        self.lines = lines
        self.records: dict[str, bytes] = {}
        self.emitted = runner.emit(lines)
        for record in self.emitted:
            self.records[record.record_id] = record.line

    def record(self, record_id: str) -> bytes | None:
        return self.records.get(record_id)

    def entry(self, origin: dict[str, Any]) -> bytes | None:
        line = origin.get("line")
        return self.lines[line - 1] if isinstance(line, int) and 0 < line <= len(self.lines) else None


def explainer(lines: list[bytes]) -> tuple[Explainer, MemorySources]:
    runner = Runner()
    sources = MemorySources(runner, lines)
    return Explainer(State(Transaction(runner.store)), sources), sources


def _first(sources: MemorySources, **fields: Any) -> dict[str, Any]:
    for emitted in sources.emitted:
        data = emitted.data()
        if all(data.get(k) == v for k, v in fields.items()):
            return data
    raise AssertionError(f"no record with {fields}")


def test_the_rfc_recurred_observation_shows_the_whole_chain() -> None:
    lines = [line for line in EXAMPLE.read_bytes().splitlines() if line.strip()]
    explain, sources = explainer(lines)
    record = _first(sources, record="observation", event="recurred")
    result = explain.explain(record["observation_id"])
    links = [link["link"] for link in result["chain"]]
    assert links == [
        "task_outcome",
        "handoff_receipt",
        "handoff",
        "citation",
        "experience",
        "failure item",
        "match",
        "observation",
    ]
    outcome, _, _, citation, experience, item, match, _ = result["chain"]
    assert "state[0].citations[0]" in citation["text"]
    assert outcome["position"] == record["task_outcome_position"] and outcome["origin"] == {"line": 7}
    assert experience["failure_record"]["repair_surface"] == "experience_content"
    assert item["digest_matches"] is True and item["item_text"]
    assert match["result"] == "matched" and match["match_digest"] == record["recurrence_match_digest"]
    text = render(result)
    assert "failure item: check #0 failed, verified" in text and "frozen candidate set" in text


def test_a_selected_observation_is_linked_through_receipt_handoff_and_citation() -> None:
    journal = linked_setup()
    journal.outcome("O1", checks=[check(CUE)], observations=[claim(CONDITION)])
    explain, sources = explainer(journal.lines())
    selected = _first(sources, record="observation", event="selected")
    result = explain.explain(selected["observation_id"])
    links = {link["link"]: link for link in result["chain"]}
    assert {"handoff_receipt", "handoff", "citation", "experience"} <= set(links)
    assert "state[0].citations[0]" in links["citation"]["text"]
    assert result["verdict"]["verdict"] == "avoided"


@pytest.mark.parametrize(
    ("observations", "checks", "reason"),
    [
        ([claim(CONDITION)], [], "the bound check did not run"),
        ([claim(CONDITION)], [check(CUE, "skipped")], "did not pass (status skipped)"),
        ([claim(CONDITION, verified=False)], [check(CUE)], "no verified observation"),
        ([claim(CONDITION), claim(CONDITION + " ")], [check(CUE)], "ambiguous"),
    ],
)
def test_unknown_says_which_gate_did_not_hold(
    observations: list[dict[str, Any]], checks: list[dict[str, Any]], reason: str
) -> None:
    journal = linked_setup()
    journal.outcome("O1", observations=observations, checks=checks)
    explain, sources = explainer(journal.lines())
    selected = _first(sources, record="observation", event="selected")
    verdict = explain.explain(selected["observation_id"])["verdict"]
    assert verdict["verdict"] == "unknown"
    assert any(reason in why for why in verdict["why"]), verdict


def test_evidence_accepted_after_the_outcome_does_not_count_when_re_deriving() -> None:
    journal = linked_setup()
    journal.outcome("O1", observations=[claim(CONDITION, evidence="late")], checks=[check(CUE, evidence="late")])
    journal.evidence("late")
    explain, sources = explainer(journal.lines())
    selected = _first(sources, record="observation", event="selected")
    assert explain.explain(selected["observation_id"])["verdict"]["verdict"] == "unknown"


def test_a_match_and_a_dead_letter_explain_themselves() -> None:
    journal = linked_setup()
    journal.outcome("O1", status="failed", receipt=None, checks=[check("something else", "failed")])
    lines = [
        *journal.lines(),
        b"{broken",
        orjson.dumps({**journal.entries[0], "source_ref": {"source_type": "content", "source_id": "other"}}),
    ]
    explain, sources = explainer(lines)
    match = _first(sources, record="match")
    assert explain.explain(match["match_digest"])["result"] == "unmatched"
    broken = _first(sources, record="dead_letter", error="invalid_json")
    text = render(explain.explain(broken["dead_letter_id"]))
    assert "journal line 6" in text and "did not consume its position" in text
    conflict = _first(sources, record="dead_letter", error="position_conflict")
    chain = explain.explain(conflict["dead_letter_id"])["chain"]
    assert any("holds the entry from journal line 1" in link["text"] for link in chain)


def test_a_revision_card_counts_streak_and_crossings() -> None:
    journal = linked_setup()
    for i in range(3):
        journal.outcome(f"O{i}", status="failed", checks=[check(CUE, "failed")])
    journal.outcome("O-pass", checks=[check(CUE)], observations=[claim(CONDITION)])
    journal.outcome("O-quiet", checks=[], observations=[claim("nothing")])
    journal.experience("E9", 1, None)
    explain, _ = explainer(journal.lines())
    (card,) = explain.explain("experience/E7@1")["cards"]
    assert (card["selected"], card["recurred"], card["avoided"], card["unknown"]) == (5, 3, 1, 1)
    assert card["streak"] == 0 and sparkline(card["history"]) == "RRRa"
    assert [outcome for _, outcome in card["crossings"]] == ["proposed"]
    assert "verdicts" in render(explain.explain("experience/E7@1"))
    (plain,) = explain.explain("experience/E9@1")["cards"]
    assert plain["failure_record"] is False
    with pytest.raises(NotFoundError):
        explain.explain("experience/E404@1")
    with pytest.raises(NotFoundError):
        explain.explain("sha256:" + "0" * 64)


def test_a_crossing_without_a_proposal_says_why() -> None:
    journal = Journal()
    linked_setup(journal, failure=failure_block(surface="recall_policy"))
    for i in range(3):
        journal.outcome(f"O{i}", status="failed", checks=[check(CUE, "failed")])
    explain, _ = explainer(journal.lines())
    (card,) = explain.explain("experience/E7@1")["cards"]
    assert card["crossings"][0][1] == "no proposal: repair_surface recall_policy"


def test_explain_and_patterns_on_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"

    def cli(*args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            [sys.executable, "-m", "recurrence_ledger.processor.cli", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    assert cli("replay", str(EXAMPLE), "--state", str(state), "--out", str(out)).returncode == 0
    recurred = next(r for r in map(orjson.loads, out.read_bytes().splitlines()) if r.get("event") == "recurred")
    text = cli("explain", recurred["observation_id"], "--state", str(state))
    assert text.returncode == 0, text.stderr
    assert "Handoff Receipt content/R12" in text.stdout and "frozen candidate set" in text.stdout
    as_json = orjson.loads(cli("explain", recurred["observation_id"], "--state", str(state), "--json").stdout)
    assert as_json["event"] == "recurred" and len(as_json["chain"]) == 8
    card = cli("explain", "experience/E7@1", "--state", str(state))
    assert "selected 3  recurred 1  avoided 1  unknown 1" in card.stdout
    missing = cli("explain", "sha256:" + "1" * 64, "--state", str(state))
    assert missing.returncode == 2 and "no record with id" in missing.stderr
    # The journal moved away: the chain still comes, without the item texts.
    moved = cli("explain", recurred["observation_id"], "--state", str(state), "--journal", str(tmp_path / "gone"))
    assert moved.returncode == 0 and "text not readable here" in moved.stdout
    patterns = cli("patterns", "--state", str(state), "--all", "--json")
    (row,) = orjson.loads(patterns.stdout)
    assert row["scopes"] == ["rfc-minimum"] and row["suggested"] is False
