"""``recurrence history``, ``suggestions`` and ``trends`` on the worked example carried past Review.

The example (``examples/repair-loop.jsonl``, built by ``tests/support/repairexample``): E7's
revision 2 stops the failure, E8's does not, E9 recurs without ever being selected, E10's
check never runs.
"""

import csv
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from recurrence_ledger.processor.cli import main
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.store.rocksdb import RocksStore
from recurrence_ledger.processor.synthetic import JournalSpec, write
from tests.support.repairexample import repair_loop_journal

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "repair-loop.jsonl"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("repair-loop")
    replay(str(EXAMPLE), work / "state", work / "ledger.jsonl")
    return work / "state"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return orjson.loads(capsys.readouterr().out)


def test_the_example_file_is_the_fixture_journal() -> None:
    assert EXAMPLE.read_bytes() == b"".join(line + b"\n" for line in repair_loop_journal().lines())


def test_history_says_which_repair_worked(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [e7] = _json(capsys, "history", "experience/E7", "--state", str(state), "--json")
    first, second = e7["revisions"]
    assert (first["selected"], first["recurred"], first["avoided"], first["unknown"]) == (4, 3, 0, 1)
    assert first["proposal_positions"] == [11] and first["needs_review"]
    assert (first["head_from"], first["head_until"], second["head_from"], second["head_until"]) == (2, 11, 12, None)
    assert first["repair_effect"] is None
    effect = second["repair_effect"]
    assert effect["verdict"] == "stopped" and effect["proposal_position"] == 11
    assert (effect["before"]["recurred"], effect["before"]["selected"]) == (3, 4)
    assert (effect["after"]["recurred"], effect["after"]["selected"], effect["after"]["avoided"]) == (0, 5, 4)
    assert effect["before"]["recurrences_per_selection"] == 0.75 and effect["after"]["recurrences_per_selection"] == 0

    [e8] = _json(capsys, "history", "E8", "--state", str(state), "--json")
    effect = e8["revisions"][1]["repair_effect"]
    assert effect["verdict"] == "not_better"
    assert effect["after"]["recurrences_per_selection"] == 0.8
    assert e8["revisions"][1]["proposal_positions"] == [18]  # the repair's own streak reached the threshold

    [e8_strict] = _json(capsys, "history", "E8", "--state", str(state), "--json", "--min-selections", "6")
    assert e8_strict["revisions"][1]["repair_effect"]["verdict"] == "too_little_evidence"

    assert main(["history", "experience/E7", "--state", str(state)]) == 0
    text = capsys.readouterr().out
    assert "repair effect (after the proposal at 11 on experience/E7@1): stopped: the failure stopped recurring" in text
    assert "recurrence explain experience/E7@2" in text


def test_suggestions_name_each_rule_with_its_counts(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [body] = _json(capsys, "suggestions", "--state", str(state), "--json")
    found = {(s["rule"], s["explain"]) for s in body["suggestions"]}
    assert found == {
        ("never_avoids", "experience/E8@2"),
        ("never_selected", "experience/E9@1"),
        ("unknown_binding", "experience/E10@1"),
    }
    never_avoids = next(s for s in body["suggestions"] if s["rule"] == "never_avoids")
    assert (never_avoids["selected"], never_avoids["recurred"], never_avoids["avoided"]) == (5, 4, 0)
    [stricter] = _json(capsys, "suggestions", "--state", str(state), "--json", "--min-selected", "6")
    assert "never_avoids" not in {s["rule"] for s in stricter["suggestions"]}
    assert stricter["rules"]["min_selected"] == 6


@pytest.mark.parametrize("journal", ["example", "generated"])
def test_what_if_counts_are_the_suggestions_made_at_each_threshold(
    journal: str, tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if journal == "generated":  # several scopes, many revisions: counts that move with N
        source = tmp_path / "journal.jsonl"
        write(JournalSpec(entries=3000, scopes=3, seed=5, experiences_per_scope=6), str(source))
        replay(str(source), tmp_path / "state", tmp_path / "ledger.jsonl")
        state = tmp_path / "state"
    capsys.readouterr()
    thresholds = [1, 2, 3, 5, 8]
    body = _json(capsys, "suggestions", "--state", str(state), "--what-if", ",".join(map(str, thresholds)), "--json")
    assert [row["threshold"] for row in body["what_if"]] == thresholds
    for row in body["what_if"]:
        n = str(row["threshold"])
        made = _json(
            capsys,
            *("suggestions", "--state", str(state), "--json"),
            *("--min-selected", n, "--min-unselected-recurred", n, "--min-unknown", n),
        )
        counted = {rule: 0 for rule in ("never_avoids", "never_selected", "unknown_binding")}
        for scope in made:
            for suggestion in scope["suggestions"]:
                counted[suggestion["rule"]] += 1
        assert row["suggestions"] == counted, n
    if journal == "example":  # E8@2: 5 selections; E9@1: 3 unselected recurrences; E10@1: 5 unknown
        assert [tuple(row["suggestions"].values()) for row in body["what_if"]] == [
            (1, 1, 1),
            (1, 1, 1),
            (1, 1, 1),
            (1, 0, 1),
            (0, 0, 0),
        ]


def test_a_bad_what_if_list_is_refused_in_one_line(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suggestions", "--state", str(state), "--what-if", "1,x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "recurrence suggestions: --what-if: 'x' is not a whole number; give integers such as 2,3,4,5"


def test_trends_as_json_and_csv_agree(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [trend] = _json(capsys, "trends", "--state", str(state), "--window", "5")
    assert [w["first_position"] for w in trend["windows"]] == [1, 6, 11, 16, 21]
    assert sum(w["selected"] for w in trend["windows"]) == 23
    assert main(["trends", "--state", str(state), "--window", "5", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    scope_rows = [r for r in rows if not r["artifact_id"]]
    assert [int(r["recurred"]) for r in scope_rows] == [w["recurred"] for w in trend["windows"]]
    e7 = [(int(r["revision"]), int(r["first_position"]), int(r["avoided"])) for r in rows if r["artifact_id"] == "E7"]
    assert e7 == [(1, 6, 0), (1, 11, 0), (2, 16, 4)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["history", "experience/E99"], "recurrence history: no revision of experience/E99 in any scope"),
        (["history", "E7", "--scope", "team-b"], "recurrence history: no scope 'team-b' in this state"),
        (["history", "experience/"], "is not family/artifact_id"),
        (["trends", "--window", "0"], "--window"),
        (["suggestions", "--unknown-percent", "101"], "recurrence suggestions: --unknown-percent must be 1..100"),
    ],
)
def test_refusals_are_one_line_and_exit_2(
    state: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) if "--window" in argv else _nothing():
        assert main([*argv, "--state", str(state)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


class _nothing:  # noqa: N801 - a null context manager that reads as one
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_state_without_marks_is_refused_not_answered_from_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay(str(EXAMPLE), tmp_path / "state", tmp_path / "ledger.jsonl")
    # What a state of an earlier release holds: every row but the marks.
    for partition in sorted((tmp_path / "state" / "partitions").iterdir()):
        store = RocksStore.open(partition)
        try:
            store.apply({key: None for key, _ in store.iterate_prefix(b'["mark",')})
        finally:
            store.close()
    assert main(["history", "E7", "--state", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("recurrence history: the state of scope team-a has observations of experience/E7@1")
    assert err.endswith("replay the journal into a new --state to answer this") and "\n" not in err
