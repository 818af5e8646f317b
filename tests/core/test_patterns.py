"""Cross-scope failure patterns: one suggestion per signature key that recurs in K scopes."""

import random
from pathlib import Path

import orjson
import pytest

from recurrence_ledger.processor.core.engineconfig import MAX_LISTED
from recurrence_ledger.processor.core.patterns import Pattern, PatternTracker, listing
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.schemas.canonical import digest


def recurred(scope: str, key: str, artifact: str = "E1", revision: int = 1) -> dict[str, object]:
    return {
        "scope_id": scope,
        "signature_key": key,
        "artifact_ref": {"family": "experience", "artifact_id": artifact, "revision": revision},
    }


def test_a_key_recurring_in_k_scopes_is_suggested_once() -> None:
    tracker = PatternTracker(Transaction(MemoryStore()), min_scopes=3)
    emitted = [tracker.observe(recurred(s, "port already bound")) for s in ["a", "a", "b", "a", "c", "d", "c"]]
    suggestions = [e for e in emitted if e is not None]
    assert [emitted.index(e) for e in suggestions] == [4]  # the third distinct scope, and only then
    (only,) = suggestions
    data = only.data()
    assert data["record"] == "pattern" and data["signature_key"] == "port already bound" and data["min_scopes"] == 3
    assert data["pattern_id"] == digest({k: v for k, v in data.items() if k not in ("record", "pattern_id")})


def test_the_suggestion_does_not_depend_on_arrival_order() -> None:
    events = [recurred(f"s{i % 5}", f"key {i % 3}", f"E{i % 4}") for i in range(60)]
    outputs = []
    for seed in range(4):
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        txn = Transaction(MemoryStore())
        tracker = PatternTracker(txn, min_scopes=4)
        lines = sorted(e.line for e in (tracker.observe(x) for x in shuffled) if e is not None)
        outputs.append((lines, listing(txn, 4)))
    assert all(output == outputs[0] for output in outputs)
    assert len(outputs[0][0]) == 3


def test_listing_names_scopes_and_revisions_and_below_the_threshold_only_on_request() -> None:
    txn = Transaction(MemoryStore())
    tracker = PatternTracker(txn, min_scopes=2)
    for event in [recurred("a", "k1"), recurred("b", "k1", "E2", 3), recurred("a", "k2")]:
        tracker.observe(event)
    (row,) = listing(txn, 2)
    assert row["scopes"] == ["a", "b"] and row["recurrences"] == 2
    assert [r["artifact_ref"]["artifact_id"] for r in row["revisions"]] == ["E1", "E2"]
    assert len(listing(txn, 2, suggested_only=False)) == 2


def test_lists_are_bounded() -> None:
    txn = Transaction(MemoryStore())
    tracker = PatternTracker(txn, min_scopes=2)
    for i in range(MAX_LISTED + 10):
        tracker.observe(recurred(f"scope-{i:03d}", "k"))
    (row,) = listing(txn, 2)
    assert len(row["scopes"]) == MAX_LISTED and row["more_than_listed"] is True
    assert row["scopes_more_than_listed"] is True and row["revisions_more_than_listed"] is True
    with pytest.raises(ValueError):
        PatternTracker(txn, min_scopes=MAX_LISTED + 1)


def test_scopes_and_revisions_overflow_separately() -> None:
    """50 scopes with two revisions each: the revision list overflows, the scope list does not (issue 28:
    the page said "50+ scopes")."""
    txn = Transaction(MemoryStore())
    tracker = PatternTracker(txn, min_scopes=2)
    for i in range(50):
        for artifact in ("E1", "E2"):
            tracker.observe(recurred(f"scope-{i:03d}", "k", artifact))
    (row,) = listing(txn, 2)
    assert row["scope_count"] == 50 and row["scopes_more_than_listed"] is False
    assert len(row["revisions"]) == MAX_LISTED and row["revisions_more_than_listed"] is True
    assert row["more_than_listed"] is True


def test_a_row_written_with_one_overflow_flag_reads_as_before() -> None:
    scopes = [f"s{i}" for i in range(50)]
    revisions = [[f"s{i % 50}", "experience", f"E{i}", 1] for i in range(MAX_LISTED)]
    old = Pattern.decode(orjson.dumps([scopes, revisions, 200, True, True]))
    assert (old.more_scopes, old.more_revisions) == (False, True)
    full = Pattern.decode(orjson.dumps([[f"s{i}" for i in range(MAX_LISTED)], revisions, 200, True, True]))
    assert (full.more_scopes, full.more_revisions) == (True, True)
    assert Pattern.decode(old.encode()) == old


def test_the_text_form_summarizes_long_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recurrence_ledger.processor.cli import main
    from recurrence_ledger.processor.store.rocksdb import RocksStore

    state = tmp_path / "state"
    store = RocksStore.open(state)
    txn = Transaction(store)
    tracker = PatternTracker(txn, min_scopes=3)
    for i in range(50):
        for artifact in ("E1", "E2"):
            tracker.observe(recurred(f"scope-{i:03d}", "port already bound", artifact))
    txn.commit()
    store.close()
    assert main(["patterns", "--state", str(state)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "50 scopes, 100 recurrences (suggested): 'port already bound'"
    assert out[1].endswith("scope-007 … 42 more (--json lists them)")
    assert out[2].endswith("… 61 more kept (--json lists them), and more not kept")
    assert out[2].count("scope-") == 3


def test_the_embedded_runner_tracks_patterns_from_the_ledger(tmp_path: Path) -> None:
    from recurrence_ledger.processor.embedded.runner import replay
    from recurrence_ledger.processor.embedded.statedir import MemoryState
    from recurrence_ledger.processor.synthetic import JournalSpec, write

    journal, out = Path(tmp_path) / "j.jsonl", Path(tmp_path) / "l.jsonl"
    write(JournalSpec(entries=3000, scopes=10, seed=8), str(journal))
    state = MemoryState()
    summary = replay(str(journal), state, out)
    found = listing(Transaction(state.view()), 3)
    assert found and summary.patterns == len(found)
    # The same suggestions, recomputed independently from the ledger's recurred observations.
    again = Transaction(MemoryStore())
    tracker = PatternTracker(again, 3)
    for line in out.read_bytes().splitlines():
        record = orjson.loads(line)
        if record.get("event") == "recurred":
            tracker.observe(record)
    assert listing(again, 3) == found
    assert all(len(row["scopes"]) >= 3 for row in found)
