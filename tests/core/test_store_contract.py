"""One contract for every state store, run against each backend (eventsourcing's per-backend suites).

A backend is four byte-level operations: get, ordered prefix scan, atomic
apply, close. The same suite runs over ``MemoryStore``, ``RocksStore`` (a
database it owns, and a handle it only borrows, as the Kafka path's
partitions do) and a ``Transaction`` seen as a store (reads merged with its
staged writes). The transaction's own protocol (entry savepoints, prepare /
flush, the tracking position that never goes backwards, the row cache) has
its tests below the suite.
"""

import random
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Rdict

from recurrence_ledger.processor.exceptions import PositionRegressionError, TransactionStateError
from recurrence_ledger.processor.store.base import RowCache, StateStore, Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.store.rocksdb import RocksStore, rocks_options
from tests.support.rocksdb_options import latest_options


class TransactionStore:
    """A Transaction over a MemoryStore, used as a store: apply stages, reads merge."""

    def __init__(self) -> None:
        self.base = MemoryStore()
        self.txn = Transaction(self.base, RowCache(100))

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.txn.get(key)
        return value

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        yield from self.txn.iterate_prefix(prefix)

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        self.txn.begin_entry()
        for key, value in changes.items():
            if value is None:
                self.txn.delete(key)
            else:
                self.txn.put(key, value)
        self.txn.end_entry()

    def close(self) -> None:
        return None


def _memory(_: Path) -> StateStore:
    return MemoryStore()


def _rocks(path: Path) -> StateStore:
    return RocksStore.open(path / "db")


def _borrowed_rocks(path: Path) -> StateStore:
    return RocksStore(Rdict(str(path / "borrowed"), options=rocks_options()), owned=False)


def _transaction(_: Path) -> StateStore:
    return TransactionStore()


BACKENDS: dict[str, Callable[[Path], StateStore]] = {
    "memory": _memory,
    "rocksdb": _rocks,
    "rocksdb-borrowed": _borrowed_rocks,
    "transaction": _transaction,
}


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    backend = BACKENDS[request.param](tmp_path)
    yield backend
    backend.close()


def test_get_of_a_missing_key_is_none(store: StateStore) -> None:
    assert store.get(b"missing") is None


def test_apply_puts_and_deletes_together(store: StateStore) -> None:
    store.apply({b"a": b"1", b"b": b"2", b"c": b"3"})
    store.apply({b"a": None, b"b": b"22", b"d": b"4"})
    assert [store.get(k) for k in (b"a", b"b", b"c", b"d")] == [None, b"22", b"3", b"4"]


def test_deleting_a_missing_key_is_harmless(store: StateStore) -> None:
    store.apply({b"nothing": None})
    assert store.get(b"nothing") is None
    assert list(store.iterate_prefix(b"")) == []


def test_prefix_scan_is_in_byte_order_and_stops_at_the_prefix(store: StateStore) -> None:
    keys = [b'["grp","s",', b'["grp","s","a"]', b'["grp","s","b"]', b'["grp","t","a"]', b"\x00", b"\xff\xff", b"a\x00"]
    store.apply({key: key[::-1] for key in keys})
    assert [k for k, _ in store.iterate_prefix(b'["grp","s",')] == sorted(keys[:3])
    assert [k for k, _ in store.iterate_prefix(b"")] == sorted(keys)
    assert [v for _, v in store.iterate_prefix(b"a")] == [b"\x00a"]
    assert list(store.iterate_prefix(b"zz")) == []


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.dictionaries(st.binary(min_size=1, max_size=3), st.one_of(st.none(), st.binary(max_size=3)), max_size=10),
        max_size=5,
    ),
    prefix=st.binary(max_size=2),
)
def test_every_backend_agrees_with_a_dict(batches: list[dict[bytes, bytes | None]], prefix: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, factory in BACKENDS.items():
            backend = factory(Path(tmp) / name)
            try:
                model: dict[bytes, bytes] = {}
                for batch in batches:
                    backend.apply(batch)
                    for key, value in batch.items():
                        if value is None:
                            model.pop(key, None)
                        else:
                            model[key] = value
                expected = sorted((k, v) for k, v in model.items() if k.startswith(prefix))
                assert list(backend.iterate_prefix(prefix)) == expected, name
                assert all(backend.get(k) == v for k, v in model.items()), name
            finally:
                backend.close()


def test_rocksdb_state_survives_reopening(tmp_path: Path) -> None:
    first = RocksStore.open(tmp_path / "db")
    first.apply({b"k": b"v", b"gone": b"x"})
    first.apply({b"gone": None})
    first.close()
    again = RocksStore.open(tmp_path / "db", read_only=True)
    try:
        assert list(again.iterate_prefix(b"")) == [(b"k", b"v")]
    finally:
        again.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_reopened_rocksdb_state_keeps_its_bloom_filter(tmp_path: Path, read_only: bool) -> None:
    # Without its filter a reopened state reads a data block for every miss (and most engine
    # lookups of a new Source or revision are misses): resumed runs were several times slower.
    first = RocksStore.open(tmp_path / "db")
    first.apply({b"k": b"v"})
    first.close()
    assert "filter_policy=bloomfilter" in latest_options(tmp_path / "db")
    again = RocksStore.open(tmp_path / "db", read_only=read_only)
    try:
        assert again.get(b"k") == b"v"
        if not read_only:  # a read-only open writes no OPTIONS file
            assert "filter_policy=bloomfilter" in latest_options(tmp_path / "db")
    finally:
        again.close()


# -- the transaction's own protocol ---------------------------------------------------------------
class Row:
    def __init__(self, value: str) -> None:
        self.value = value

    def encode(self) -> bytes:
        return self.value.encode()


def _decode(raw: bytes) -> Row:
    return Row(raw.decode())


def test_an_aborted_entry_leaves_no_trace_and_a_finished_one_joins_the_batch() -> None:
    base = MemoryStore()
    txn = Transaction(base)
    txn.begin_entry()
    txn.put(b"a", b"1")
    txn.end_entry()
    txn.begin_entry()
    txn.put(b"a", b"2")
    txn.put(b"b", b"2")
    assert txn.get(b"a") == b"2"  # read-your-writes inside the entry
    txn.abort_entry()
    assert (txn.get(b"a"), txn.get(b"b")) == (b"1", None)
    assert txn.commit() == {b"a": b"1"}
    assert base.get(b"a") == b"1" and base.get(b"b") is None


def test_rows_are_staged_as_objects_and_encoded_once_at_prepare() -> None:
    base = MemoryStore()
    txn = Transaction(base)
    row = Row("first")
    txn.put(b"row", row)
    row.value = "last"  # the engine may keep changing a staged row until the batch ends
    assert txn.get(b"row", _decode) is row
    assert txn.prepare() == {b"row": b"last"}
    txn.flush()
    assert base.get(b"row") == b"last"


def test_prepare_then_flush_is_the_only_order() -> None:
    txn = Transaction(MemoryStore())
    with pytest.raises(TransactionStateError):
        txn.flush()
    txn.prepare()
    with pytest.raises(TransactionStateError):
        txn.put(b"late", b"x")
    txn.flush()
    with pytest.raises(TransactionStateError):
        txn.prepare()
    entry = Transaction(MemoryStore())
    entry.begin_entry()
    with pytest.raises(TransactionStateError):
        entry.prepare()


def test_the_tracking_position_is_recorded_with_the_batch_and_never_goes_backwards() -> None:
    base = MemoryStore()
    first = Transaction(base, position_key=b"pos")
    first.put(b"k", b"v")
    assert first.commit(10) == {b"k": b"v", b"pos": b"10"}
    assert Transaction(base, position_key=b"pos").recorded_position() == 10
    same = Transaction(base, position_key=b"pos")
    same.commit(10)  # an empty batch at the same position is fine
    backwards = Transaction(base, position_key=b"pos")
    backwards.put(b"k", b"older")
    with pytest.raises(PositionRegressionError):
        backwards.prepare(9)
    assert backwards.status == "failed"
    assert base.get(b"k") == b"v"


def test_flush_writes_extra_keys_atomically_with_the_batch() -> None:
    base = MemoryStore()
    txn = Transaction(base)
    txn.put(b"k", b"v")
    txn.prepare()
    txn.flush({b"offset": b"7"})
    assert (base.get(b"k"), base.get(b"offset")) == (b"v", b"7")


def test_a_failed_flush_marks_the_transaction_failed_and_keeps_the_cache_clean() -> None:
    class Failing(MemoryStore):
        def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
            raise OSError("disk full")

    cache = RowCache(10)
    txn = Transaction(Failing(), cache)
    txn.put(b"k", b"v")
    txn.prepare()
    with pytest.raises(OSError):
        txn.flush()
    assert txn.status == "failed"
    assert len(cache) == 0


def test_the_row_cache_serves_committed_rows_without_reading_the_store_again() -> None:
    reads: list[bytes] = []

    class Counting(MemoryStore):
        def get(self, key: bytes) -> bytes | None:
            reads.append(key)
            return super().get(key)

    base = Counting()
    base.apply({b"row": b"v1"})
    cache = RowCache(10)
    first = Transaction(base, cache)
    assert first.get(b"row", _decode).value == "v1"
    assert first.get(b"absent") is None
    second = Transaction(base, cache)
    assert second.get(b"row", _decode).value == "v1" and second.get(b"absent") is None
    assert reads == [b"row", b"absent"]
    second.put(b"row", Row("v2"))
    second.commit()
    assert Transaction(base, cache).get(b"row", _decode).value == "v2"
    assert reads == [b"row", b"absent"]


def test_the_row_cache_is_bounded_and_skips_uncached_prefixes() -> None:
    cache = RowCache(capacity=100, uncached=(b"pos",))
    rng = random.Random(1)
    for i in range(1000):
        cache.keep(f"k{rng.randrange(10_000)}-{i}".encode(), i)
        cache.keep(f"pos{i}".encode(), i)
        assert len(cache) <= 100
    assert all(not key.startswith(b"pos") for key in cache.rows)


def test_the_row_cache_evicts_the_least_recently_used_rows() -> None:
    store = MemoryStore()
    store.apply({b"hot": b"1", **{b"cold%d" % i: b"x" for i in range(500)}})
    cache = RowCache(capacity=100)
    reads = 0

    class Counting:
        def get(self, key: bytes) -> bytes | None:
            nonlocal reads
            reads += key == b"hot"
            return store.get(key)

        def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
            return store.iterate_prefix(prefix)

        def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
            store.apply(changes)

        def close(self) -> None:
            store.close()

    txn = Transaction(Counting(), cache)
    for i in range(500):
        assert txn.get(b"hot") == b"1"  # read first, so it is the oldest insertion
        txn.get(b"cold%d" % i)
    assert reads == 1  # a row read on every step is never the one evicted


def test_transaction_prefix_scans_merge_staged_rows_in_order() -> None:
    base = MemoryStore()
    base.apply({b"p1": b"a", b"p2": b"b", b"p3": b"c", b"q": b"z"})
    txn = Transaction(base)
    txn.delete(b"p2")
    txn.begin_entry()
    txn.put(b"p0", b"new")
    txn.put(b"p3", b"changed")
    rows: list[tuple[bytes, Any]] = list(txn.iterate_prefix(b"p"))
    assert rows == [(b"p0", b"new"), (b"p1", b"a"), (b"p3", b"changed")]


def test_a_group_changed_by_an_aborted_entry_leaves_the_cached_row_as_committed() -> None:
    """Group.copy shares its lists: safe only because the engine replaces them, never changes them."""
    from recurrence_ledger.processor.core.state import State

    base, cache = MemoryStore(), RowCache(100)
    ref = ("experience", "E1", 1)
    first = Transaction(base, cache)
    group = State(first).group_for_update("s", ref, "key")
    group.recurred, group.streak, group.streak_sources = 1, 1, [["content", "O1"]]
    group.verdict(5, "recurred")
    group.crossed(5, "proposed")
    first.commit()

    txn = Transaction(base, cache)
    txn.begin_entry()
    changed = State(txn).group_for_update("s", ref, "key")
    changed.streak += 1
    changed.streak_sources = [*changed.streak_sources, ["content", "O2"]]
    changed.verdict(9, "recurred")
    changed.crossed(9, "no proposal: a newer revision is the head")
    txn.abort_entry()

    committed = State(txn).group("s", ref, "key")
    assert committed is not None
    assert (committed.streak, committed.streak_sources) == (1, [["content", "O1"]])
    assert (committed.history, committed.crossings) == ([[5, "recurred"]], [[5, "proposed"]])


def test_a_batch_after_one_not_yet_flushed_reads_its_rows_as_committed() -> None:
    # The worker runs a batch's engine while the batch before is still being made durable.
    store = MemoryStore()
    store.apply({b"a": b"0", b"b": b"0", b"c": b"0"})
    cache = RowCache()
    first = Transaction(store, cache)
    first.put(b"a", b"1")
    first.delete(b"b")
    first.put(b"d", b"1")
    second = Transaction(store, cache, after=first)
    assert [second.get(k) for k in (b"a", b"b", b"c", b"d")] == [b"1", None, b"0", b"1"]
    assert second.committed(b"a") == b"1" and second.committed(b"b") is None
    assert list(second.iterate_prefix(b"")) == [(b"a", b"1"), (b"c", b"0"), (b"d", b"1")]
    first.put(b"c", b"1")  # the record index joins the first batch while the second runs
    second.put(b"a", b"2")
    assert second.get(b"c") == b"1" and second.get(b"a") == b"2" and second.committed(b"a") == b"1"
    first.prepare()
    first.flush()
    assert store.get(b"a") == b"1"
    assert second.get(b"a") == b"2" and second.committed(b"c") == b"1"
    second.prepare()
    second.flush()
    assert second.earlier_rows() == (), "a flushed batch still holds the one before it"
    assert Transaction(store, cache, after=second).earlier_rows() == (), "a flushed batch is read from the store"
    assert [store.get(k) for k in (b"a", b"b", b"c", b"d")] == [b"2", None, b"1", b"1"]


def test_a_chain_of_batches_reads_the_latest_staged_row_first() -> None:
    store = MemoryStore()
    first = Transaction(store)
    first.put(b"k", b"1")
    second = Transaction(store, after=first)
    second.put(b"j", b"2")
    third = Transaction(store, after=second)
    assert third.get(b"k") == b"1" and third.get(b"j") == b"2"
    second.put(b"k", b"2")
    assert third.get(b"k") == b"2" and list(third.iterate_prefix(b"")) == [(b"j", b"2"), (b"k", b"2")]


@pytest.mark.parametrize("depth", [1, 2])
def test_a_long_run_of_pipelined_batches_holds_only_the_batches_being_made_durable(depth: int) -> None:
    # The worker's pattern (``processing.PIPELINE_DEPTH``): batch n begins while the ``depth`` batches
    # before it are being made durable, and the oldest of them is flushed before n+1 begins. Each batch
    # must read through those alone, not every batch since the first.
    store = MemoryStore()
    cache = RowCache()
    pending = [Transaction(store, cache)]
    pending[0].put(b"k0", b"0")
    for n in range(1, 50):
        current = Transaction(store, cache, after=pending[-1])
        earlier = current.earlier_rows()
        assert len(earlier) == min(n, depth) and b"k%d" % (n - 1) in earlier[0]
        current.put(b"k%d" % n, b"%d" % n)
        pending.append(current)
        if len(pending) > depth:
            oldest = pending.pop(0)
            oldest.prepare()
            oldest.flush()
    assert current.get(b"k0") == b"0" and current.get(b"k48") == b"48"
