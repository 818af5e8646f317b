"""What both runners keep per written record: where it went, and the distinct dead letters by code.

The state never keeps a record's bytes (they are in the ledger file or the
output topics); it keeps one small row per record id, ``["rid", id]`` -> where
the record was written (embedded: the ledger byte offset; Kafka: topic
partition and offset), so ``explain`` reads the record back with one seek.
Next to it, ``["dlc", code]`` counts dead letters by their stable code, once
per ``dead_letter_id``: an entry dead-lettered again (published twice, a batch
re-run after a crash) writes the same id and is not counted again, so the
count is the number of distinct rejected entries, the same on both runners.
"""

from typing import Final

import orjson

from ..store.base import Transaction
from .records import Emitted
from .state import compact, key

RECORD_INDEX: Final = "rid"
DEAD_LETTER_COUNTS: Final = "dlc"
_COUNTS_PREFIX: Final = b'["dlc",'


def record_key(record_id: str) -> bytes:
    return key(RECORD_INDEX, record_id)


def index_record(txn: Transaction, record: Emitted, location: bytes) -> None:
    """Stage the record's location; a dead letter seen for the first time also bumps its code's count."""
    row = record_key(record.record_id)
    if record.error is not None and txn.get(row) is None:
        counter = key(DEAD_LETTER_COUNTS, record.error)
        raw: bytes | None = txn.get(counter)
        txn.put(counter, b"%d" % (1 + (0 if raw is None else int(raw))))
    txn.put(row, compact(location))


def dead_letter_counts(txn: Transaction) -> dict[str, int]:
    """Distinct dead letters by code (codes with none are absent)."""
    return {orjson.loads(row)[1]: int(raw) for row, raw in txn.iterate_prefix(_COUNTS_PREFIX)}
