"""The record index both runners keep: one row per record id, and distinct dead letters counted by code."""

from collections import Counter
from pathlib import Path

import orjson

from recurrence_ledger.processor.core.recordindex import dead_letter_counts, index_record, record_key
from recurrence_ledger.processor.core.records import Emitted
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.embedded.statedir import MemoryState
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.synthetic import JournalSpec, generate


def _dead_letter(ident: str, code: str) -> Emitted:
    return Emitted("dead_letter", None, ident, b"{}", code)


def test_a_dead_letter_written_again_is_counted_once() -> None:
    txn = Transaction(MemoryStore())
    index_record(txn, _dead_letter("d1", "invalid_json"), b"1")
    index_record(txn, _dead_letter("d1", "invalid_json"), b"7")  # the same id again: a re-run, a re-publish
    index_record(txn, _dead_letter("d2", "invalid_json"), b"9")
    index_record(txn, _dead_letter("d3", "unknown_type"), b"12")
    assert dead_letter_counts(txn) == {"invalid_json": 2, "unknown_type": 1}
    assert txn.get(record_key("d1")) == b"7"  # the index points at the latest copy (identical bytes)


def test_the_embedded_counts_are_the_ledgers_dead_letters(tmp_path: Path) -> None:
    lines = list(generate(JournalSpec(entries=500, scopes=4, seed=9, garbage_ratio=0.05)))
    journal, ledger = tmp_path / "journal.jsonl", tmp_path / "ledger.jsonl"
    journal.write_bytes(b"".join(line + b"\n" for line in lines))
    state = MemoryState()
    replay(str(journal), state, ledger)
    # A rewritten journal (the first line dropped) is replayed whole: the counts stay those of the ledger.
    rewritten = tmp_path / "rewritten.jsonl"
    rewritten.write_bytes(b"".join(line + b"\n" for line in lines[1:]))
    replay(str(rewritten), state, ledger)
    store = state.view()
    records = [orjson.loads(line) for line in ledger.read_bytes().splitlines()]
    dead = Counter(r["error"] for r in records if r["record"] == "dead_letter")
    assert dead and dead_letter_counts(Transaction(store)) == dict(dead)
    for record in records:
        ident = record.get("dead_letter_id") or record.get("observation_id") or record.get("match_digest")
        if ident is not None:
            assert store.get(record_key(ident)) is not None
