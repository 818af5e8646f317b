"""The Faust table adapter and its recovery path, directly (no broker: a Faust app is only built).

Recovery and standby replicas hand the store batches of changelog records;
each change set must land whole, per partition, in one write together with
the changelog offset Faust resumes from, and every such write must tell the
batch processor to drop its row cache for that partition.
"""

import types
from pathlib import Path
from typing import Any

import pytest

from recurrence_ledger.processor.store.base import RowCache, Transaction
from recurrence_ledger.processor.stream.batch import changeset
from recurrence_ledger.processor.stream.worker.tablestore import OFFSET_KEY
from tests.support.faust_tables import BACKENDS, state_table_data, table_rows


def _event(partition: int, offset: int, value: bytes | None, key: bytes = b"scope") -> Any:
    message = types.SimpleNamespace(partition=partition, offset=offset, key=key, value=value)
    return types.SimpleNamespace(message=message)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return state_table_data(request.param, tmp_path, "ts")


def test_recovery_applies_change_sets_whole_per_partition(store: Any) -> None:
    before = store.generation(0)
    store.apply_changelog_batch(
        [
            _event(0, 5, changeset.encode({b"a": b"1", b"b": b"2"})),
            _event(1, 3, changeset.encode({b"c": b"3"})),
            _event(0, 6, changeset.encode({b"a": None, b"d": b"4"})),
        ],
        None,
        None,
    )
    assert table_rows(store, 0) == [(b"b", b"2"), (b"d", b"4")]
    assert table_rows(store, 1) == [(b"c", b"3")]
    assert store.generation(0) > before
    if hasattr(store, "_dbs"):  # the RocksDB store records where recovery resumes, in the same write
        assert store.partition_state(0).get(OFFSET_KEY) == b"6"
        assert store.partition_state(1).get(OFFSET_KEY) == b"3"


def test_a_plain_faust_changelog_record_applies_as_one_key(store: Any) -> None:
    store.apply_changelog_batch([_event(0, 1, b"plain", key=b"k"), _event(0, 2, None, key=b"gone")], None, None)
    assert table_rows(store, 0) == [(b"k", b"plain")]


def test_flush_local_writes_a_prepared_batch_with_its_changelog_offset(store: Any) -> None:
    txn = Transaction(store.partition_state(1), RowCache(10))
    txn.put(b"row", b"value")
    txn.prepare()
    generation = store.generation(1)
    store.flush_local(1, txn, 42)
    assert table_rows(store, 1) == [(b"row", b"value")]
    assert store.generation(1) == generation  # our own write: the row cache stays valid
    if hasattr(store, "_dbs"):
        assert store.partition_state(1).get(OFFSET_KEY) == b"42"


def test_a_truncated_change_set_is_refused_not_half_applied(store: Any) -> None:
    whole = changeset.encode({b"a": b"1", b"b": b"2"})
    with pytest.raises(changeset.ChangeSetError):
        store.apply_changelog_batch([_event(0, 1, whole[:-1])], None, None)
    assert table_rows(store, 0) == []


def test_a_change_set_at_or_below_the_applied_offset_is_not_applied_again(store: Any) -> None:
    # A restore that reads back what the state already holds must not move keys back.
    store.apply_changelog(0, [(4, b"s", changeset.encode({b"a": b"old"})), (6, b"s", changeset.encode({b"a": b"new"}))])
    assert store.changelog_offset(0) == 6
    generation = store.generation(0)
    store.apply_changelog(0, [(4, b"s", changeset.encode({b"a": b"old"})), (6, b"s", changeset.encode({b"b": b"x"}))])
    assert table_rows(store, 0) == [(b"a", b"new")]
    assert store.generation(0) == generation  # nothing applied: the row cache stays valid
    store.apply_changelog(0, [(6, b"s", None), (8, b"s", changeset.encode({b"b": b"2"}))])
    assert table_rows(store, 0) == [(b"a", b"new"), (b"b", b"2")]
    assert store.changelog_offset(0) == 8
    assert store.changelog_offset(1) is None
