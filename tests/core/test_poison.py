"""No entry can stop the stream (issue: poison entries, numbers, internal errors, dead-letter identity)."""

import copy
from typing import Any

import orjson
import pytest

from recurrence_ledger.processor.core import deadletters, ledger
from recurrence_ledger.schemas.canonical import canonical_json, digest, dumps
from recurrence_ledger.schemas.records import DeadLetterRecord
from tests.support.builders import CUE, SCOPE, Journal, Runner, check, failure_block, kinds, linked_setup, run

HUGE = 2**64 + 7


def _with_huge_numbers() -> Journal:
    journal = Journal()
    journal.evidence("ev-1")
    meta = journal.evidence("ev-2")
    meta["source"]["metadata"]["count"] = HUGE
    meta["source"]["metadata"]["nested"] = [-(2**70), {"x": 10**30}]
    journal.artifact("skill", "S1", 1, {"steps": [HUGE, 1.5, "text"]})
    journal.experience("E7", 1, failure_block())
    return journal


def test_integers_of_any_size_in_free_form_places_are_kept_and_nothing_after_them_is_lost() -> None:
    journal = _with_huge_numbers()
    journal.outcome("O1", status="failed", receipt=None, checks=[check(CUE, "failed")])
    records, runner = run(journal)
    assert kinds(records) == ["match:matched", "observation:recurred"]
    assert runner.last_position() == journal.positions[SCOPE]


def test_canonical_json_writes_big_integers_in_decimal() -> None:
    value = {"b": HUGE, "a": [-(2**70), 1, 2**63], "c": {"z": 10**30, "y": "ü"}}
    assert canonical_json(value) == (
        b'{"a":[-1180591620717411303424,1,9223372036854775808],"b":18446744073709551623,'
        b'"c":{"y":"\xc3\xbc","z":1000000000000000000000000000000}}'
    )
    assert digest(value).startswith("sha256:")


def test_the_same_big_integer_entry_sent_again_is_a_no_op_and_a_different_one_a_conflict() -> None:
    journal = _with_huge_numbers()
    again = copy.deepcopy(journal.entries[1])
    changed = copy.deepcopy(journal.entries[1])
    changed["source"]["metadata"]["count"] = HUGE + 1
    runner = Runner()
    runner.feed(journal.lines())
    assert runner.feed([dumps(again)]) == []
    (letter,) = runner.feed([dumps(changed)])
    assert isinstance(letter, DeadLetterRecord) and letter.error == deadletters.POSITION_CONFLICT


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1.7976931348623157e309"])
@pytest.mark.parametrize("place", ["metadata", "position", "content"])
def test_nan_infinity_and_double_overflow_are_invalid_json_anywhere(number: bytes, place: str) -> None:
    base = Journal().evidence("ev-1")
    text = orjson.dumps(base)
    if place == "metadata":
        raw = text.replace(b'"kind":"git-change"', b'"kind":"git-change","n":' + number)
    elif place == "position":
        raw = text.replace(b'"position":1', b'"position":' + number)
    else:
        raw = text.replace(b'"type":"source"', b'"type":"source","x":[' + number + b"]")
    assert raw != text
    records = Runner().feed([raw])
    assert kinds(records) == ["dead_letter:invalid_json"]


@pytest.mark.parametrize("field", ["position", "revision"])
def test_contract_integers_above_2_63_minus_1_are_invalid_entries(field: str) -> None:
    journal = Journal()
    entry = journal.experience("E7", 1, failure_block())
    if field == "position":
        entry["position"] = 2**63
    else:
        entry["artifact"]["revision"] = 2**63
    records = Runner().feed(journal.lines())
    assert kinds(records) == ["dead_letter:invalid_entry"]


def test_an_entry_that_makes_the_engine_raise_is_dead_lettered_and_the_stream_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = linked_setup()
    poison = journal.outcome("O-poison", status="failed", checks=[check(CUE, "failed")])
    journal.outcome("O-next", status="failed", checks=[check(CUE, "failed")])
    real = ledger.OutcomeLedger.process

    def exploding(self: ledger.OutcomeLedger, scope_id: str, meta: Any, ref: Any, *rest: Any) -> Any:
        if ref == ("content", "O-poison"):
            meta.selected += 1000  # a half-done change that must not survive
            raise KeyError("SECRET-OUTCOME-TEXT")
        return real(self, scope_id, meta, ref, *rest)

    monkeypatch.setattr(ledger.OutcomeLedger, "process", exploding)
    records, runner = run(journal)
    letters = [r for r in records if isinstance(r, DeadLetterRecord)]
    assert [(r.error, r.position) for r in letters] == [(deadletters.INTERNAL_ERROR, poison["position"])]
    assert "KeyError" in letters[0].detail and "SECRET" not in letters[0].detail
    # The entry after it ran, and none of the failed entry's effects were kept.
    assert kinds(records)[-3:] == ["match:matched", "observation:selected", "observation:recurred"]
    stats = runner.stats()
    assert (stats["selected"], stats["recurred"]) == (1, 1)
    # The failed entry did not consume its position: fixed, it can be sent again... at a new position.
    assert runner.last_position() == journal.positions[SCOPE]


def test_two_identical_bad_lines_are_two_dead_letters_each_with_its_own_identity() -> None:
    runner = Runner()
    records = runner.emit([b"{broken", b"{broken"])
    assert [r.record for r in records] == ["dead_letter", "dead_letter"]
    first, second = (r.model() for r in records)
    assert isinstance(first, DeadLetterRecord) and isinstance(second, DeadLetterRecord)
    assert first.origin.model_dump() == {"line": 1} and second.origin.model_dump() == {"line": 2}
    assert first.dead_letter_id != second.dead_letter_id
    # The id is the digest of the record without ``record`` and itself (contract section 2).
    data = records[0].data()
    assert data["dead_letter_id"] == digest({k: v for k, v in data.items() if k not in ("record", "dead_letter_id")})


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.update(type="SECRET-TYPE"),
        lambda e: e["source"].update({"SECRET-KEY": 1}),
        lambda e: e.update({"SECRET-TOP-KEY": True}),
    ],
)
def test_detail_never_repeats_user_supplied_strings(mutate: Any) -> None:
    entry = Journal().evidence("ev-1")
    mutate(entry)
    (letter,) = Runner().feed([orjson.dumps(entry)])
    assert isinstance(letter, DeadLetterRecord)
    assert "SECRET" not in letter.detail
    assert "SECRET" in letter.raw  # nothing is lost


def test_an_unknown_citation_kind_is_named_by_place_not_by_value() -> None:
    journal = Journal()
    handoff = journal.handoff("H1", [("E7", 1)])
    handoff["artifact"]["content"]["state"][0]["citations"][0]["kind"] = "SECRET-KIND"
    (letter,) = Runner().feed(journal.lines())
    assert isinstance(letter, DeadLetterRecord) and letter.error == deadletters.INVALID_ENTRY
    assert "SECRET" not in letter.detail and "expected one of" in letter.detail


def test_immutable_conflicts_name_the_field_not_the_identifier() -> None:
    journal = Journal()
    journal.evidence("SECRET-SOURCE-ID", position=1)
    other = journal.evidence("SECRET-SOURCE-ID", position=2)
    other["source"]["content"] = "different"
    records = Runner().feed(journal.lines())
    (letter,) = [r for r in records if isinstance(r, DeadLetterRecord)]
    assert letter.error == deadletters.IMMUTABLE_CONFLICT
    assert "SECRET" not in letter.detail and "source_ref" in letter.detail
