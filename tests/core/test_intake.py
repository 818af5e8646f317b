"""Bad input never stops a run and never loses data; positions and immutability rules."""

import orjson
import pytest
from pydantic import ValidationError

from recurrence_ledger.processor.core import deadletters
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.schemas.journal import JOURNAL_ENTRY
from recurrence_ledger.schemas.records import DeadLetterRecord
from tests.support.builders import SCOPE, Journal, Runner, failure_block, kinds, linked_setup, run


def dead(records: list) -> list[DeadLetterRecord]:  # type: ignore[type-arg]
    return [r for r in records if isinstance(r, DeadLetterRecord)]


def one_dead_letter(lines: list[bytes]) -> DeadLetterRecord:
    records = Runner().feed(lines)
    assert len(records) == 1 and isinstance(records[0], DeadLetterRecord), records
    return records[0]


def entry(**overrides: object) -> dict[str, object]:
    journal = Journal()
    base = journal.evidence("ev-1")
    return {**base, **overrides}


@pytest.mark.parametrize(
    "raw,code",
    [
        (b"{not json", deadletters.INVALID_JSON),
        (b"\xff\xfe binary", deadletters.INVALID_ENCODING),
        (b"[1, 2]", deadletters.INVALID_ENTRY),
        (orjson.dumps(entry(type="mystery")), deadletters.UNKNOWN_TYPE),
        (orjson.dumps(entry(position="7")), deadletters.INVALID_ENTRY),
        (orjson.dumps(entry(position=7.0)), deadletters.INVALID_ENTRY),
        (orjson.dumps(entry(position=True)), deadletters.INVALID_ENTRY),
        (orjson.dumps(entry(position=0)), deadletters.INVALID_ENTRY),
        (orjson.dumps(entry(scope_id="")), deadletters.INVALID_ENTRY),
        (orjson.dumps(entry(surprise=1)), deadletters.INVALID_ENTRY),
    ],
)
def test_invalid_entries_become_dead_letters_with_stable_codes(raw: bytes, code: str) -> None:
    letter = one_dead_letter([raw])
    assert letter.error == code
    assert letter.detail
    if code == deadletters.INVALID_ENCODING:
        assert letter.raw.startswith("base64:")
    else:
        assert letter.raw == raw.decode()


def test_dead_letter_carries_scope_and_position_when_readable() -> None:
    letter = one_dead_letter([orjson.dumps(entry(type="mystery", position=5))])
    assert (letter.scope_id, letter.position) == (SCOPE, 5)


def test_unknown_fields_are_rejected_at_every_level_but_metadata() -> None:
    journal = Journal()
    journal.evidence("ev-1")
    ok = journal.evidence("ev-2")
    ok["source"]["metadata"]["anything"] = {"goes": True}
    exp = journal.experience("E7", 1, failure_block())
    exp["artifact"]["content"]["failure"]["signature"]["extra"] = "x"
    records, _ = run(journal)
    assert kinds(records) == ["dead_letter:invalid_entry"]
    detail = dead(records)[0].detail
    assert "failure.signature.<key>: unknown field" in detail
    assert "extra" not in detail  # an unknown key is user input: named by place, never echoed


def test_invalid_source_content_is_a_dead_letter() -> None:
    journal = linked_setup()
    journal.source("O1", "task-outcome", {"schema": "powercontext.task-outcome.v1", "status": "failed"})
    journal.source("O2", "task-outcome", "{not json")
    journal.source("R2", "handoff-receipt", {"status": "accepted"})
    journal.source("O3", "task-outcome", {"x": 1}, schema="powercontext.task-outcome.v2")
    records, _ = run(journal)
    assert kinds(records) == ["dead_letter:invalid_source_content"] * 4


def test_receipt_rules_are_enforced() -> None:
    base = {
        "receiver": "b",
        "status": "accepted",
        "selection": "exact",
        "selected_revision": {"family": "handoff", "artifact_id": "H", "revision": 1},
        "evidence_status": "available",
    }
    bad = [
        {
            **base,
            "evidence_status": "unavailable",
            "unavailable_evidence": [{"kind": "source", "source_ref": {"source_type": "a", "source_id": "b"}}],
        },
        {**base, "selected_revision": None},
        {**base, "selection": "prepared"},
        {**base, "evidence_status": "unavailable"},
        {
            **base,
            "receiver_checks": {"live_state": "mismatch", "capability": "confirmed", "authorization": "confirmed"},
        },
    ]
    journal = Journal()
    for index, content in enumerate(bad):
        journal.source(f"R{index}", "handoff-receipt", content)
    journal.source("R-ok", "handoff-receipt", base)
    records, _ = run(journal)
    assert kinds(records) == ["dead_letter:invalid_source_content"] * len(bad)


def test_blank_cue_condition_or_subject_make_an_invalid_revision() -> None:
    journal = Journal()
    journal.experience("E1", 1, failure_block(cue=" ... "))
    journal.experience("E2", 1, failure_block(condition="\t!?"))
    journal.experience("E3", 1, failure_block(check_subject="  ,  "))
    journal.experience("E4", 1, failure_block(cue="x" * 513))
    records, _ = run(journal)
    assert kinds(records) == ["dead_letter:invalid_entry"] * 4


def test_invalid_entry_does_not_consume_its_position() -> None:
    journal = Journal()
    bad = journal.evidence("ev-1", position=1)
    bad["source"]["surprise"] = 1
    journal.evidence("ev-1", position=1)
    records, runner = run(journal)
    assert kinds(records) == ["dead_letter:invalid_entry"]
    assert runner.last_position() == 1


def test_redelivery_is_a_silent_no_op_and_conflicts_are_dead_letters() -> None:
    journal = Journal()
    journal.evidence("ev-1", position=1)
    journal.evidence("ev-2", position=3)
    lines = journal.lines()
    conflict = Journal()
    conflict.evidence("ev-other", position=3)
    gap = Journal()
    gap.evidence("ev-gap", position=2)
    records = Runner().feed([*lines, *lines, *conflict.lines(), *gap.lines()])
    assert kinds(records) == ["dead_letter:position_conflict", "dead_letter:position_out_of_order"]


def test_immutable_sources_and_revisions() -> None:
    journal = linked_setup()
    journal.evidence("ev-1")  # identical content at a new position: no-op
    again = journal.evidence("ev-1")
    again["source"]["content"] = '{"note": "changed"}'
    journal.experience("E7", 1, failure_block())  # identical revision again: no-op
    journal.experience("E7", 1, failure_block(cue="another cue"))
    records, runner = run(journal)
    assert kinds(records) == ["dead_letter:immutable_conflict", "dead_letter:immutable_conflict"]
    # The no-ops consumed their positions; the conflicts did not.
    assert runner.last_position() == 7  # ev-1 at 5 and E7 at 7


def test_a_scope_appears_in_statistics_once_it_has_an_accepted_entry() -> None:
    journal = Journal()
    bad = journal.evidence("ev-1", scope="only-garbage")
    bad["surprise"] = True
    journal.evidence("ev-1", scope="good")
    _, runner = run(journal)
    assert [s.scope_id for s in runner.engine.statistics()] == ["good"]


def test_garbage_lines_do_not_change_the_statistics_of_the_clean_part() -> None:
    noisy = list(generate(JournalSpec(entries=1500, scopes=5, seed=7, garbage_ratio=0.10)))
    clean = list(generate(JournalSpec(entries=1500, scopes=5, seed=7, garbage_ratio=0.0)))
    garbage_runner, clean_runner = Runner(), Runner()
    garbage_records = garbage_runner.feed(noisy)
    clean_runner.feed([line for line in noisy if _is_clean(line)])
    assert len(dead(garbage_records)) >= 100
    assert garbage_runner.engine.statistics() == clean_runner.engine.statistics()
    assert len(clean) == 1500


def _is_clean(line: bytes) -> bool:
    try:
        JOURNAL_ENTRY.validate_json(line)
    except ValidationError:
        return False
    return True


def test_dead_letters_never_echo_content_into_detail() -> None:
    journal = Journal()
    secret = "SECRET-LESSON-TEXT"
    exp = journal.experience("E1", 1, failure_block(cue=secret))
    exp["artifact"]["content"]["lesson"] = 42
    letter = one_dead_letter(journal.lines())
    assert secret not in letter.detail
    assert secret in letter.raw
