"""The state store interface and the one transaction every runner uses.

A ``StateStore`` is four byte-level operations (get, ordered prefix scan,
atomic apply, close); backends live beside this module (``memory``,
``rocksdb``) and the Kafka path adapts Faust's per-partition databases to the
same interface. Nothing here imports a backend.

A ``Transaction`` is one batch of changes over a store, in the style of Quix
Streams' ``PartitionTransaction``: reads see the batch's own writes; each
journal entry runs inside an entry savepoint (``begin_entry`` /
``end_entry`` / ``abort_entry``) so an entry that fails halfway leaves no
trace; ``prepare`` turns the staged rows into the byte change set (the thing a
runner makes durable first: a ledger file, a changelog topic) and records the
tracking position, refusing to move it backwards; ``flush`` then writes the
change set to the store in one atomic batch.

A transaction may run *after* another whose change set is not yet in the
store (``after``): the Kafka worker runs a batch's engine while the batch
before it is still being made durable (``processing``). Its reads then see
that batch's rows as if they were committed; staged rows are never changed
once their entry ended (a row is copied before it is changed), so reading
them in place is safe.

Rows are staged as decoded objects (anything with ``encode() -> bytes``, or
raw ``bytes``) and encoded once per batch, however often an entry touches
them. A ``RowCache`` keeps decoded committed rows between batches, bounded, so
hot rows (a scope's counters, its failure heads, cited evidence) are neither
read from the backend nor decoded again on every entry.
"""

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Final, Literal, Protocol

from ..exceptions import PositionRegressionError, TransactionStateError


class StateStore(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Yield (key, value) for keys starting with ``prefix``, in byte order."""
        ...

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        """Write all changes atomically; ``None`` deletes."""
        ...

    def close(self) -> None: ...


class Row(Protocol):
    def encode(self) -> bytes: ...


Staged = Row | bytes | None
Decoder = Callable[[bytes], Any]
Status = Literal["open", "prepared", "flushed", "failed"]


def identity(raw: bytes) -> bytes:
    return raw


_MISSING: Final = object()
_ABSENT: Final = object()


class RowCache:
    """Decoded rows of committed state, at most ``capacity`` of them.

    Eviction drops the least recently used half when full (a hit or a write
    moves a row to the end of the dict's order): one bulk eviction instead of
    one per insert, while rows every entry touches (a scope's counters, its
    failure heads, cited evidence) are never the ones dropped.
    Keys under ``uncached`` prefixes (rows written once and rarely read again)
    are never kept. Only a transaction's ``flush`` and the backend's own
    readers fill it, so it never holds a value the store does not.
    """

    def __init__(self, capacity: int = 50_000, uncached: tuple[bytes, ...] = ()) -> None:
        self.capacity = capacity
        self.uncached = uncached
        self.rows: dict[bytes, Any] = {}

    def keep(self, key: bytes, value: Any) -> None:
        if self.capacity <= 0 or (self.uncached and key.startswith(self.uncached)):
            return
        rows = self.rows
        if rows.pop(key, _MISSING) is _MISSING and len(rows) >= self.capacity:
            self._evict()
        rows[key] = _ABSENT if value is None else value  # at the end: the most recently used

    def keep_all(self, changes: Mapping[bytes, Any]) -> None:
        """``keep`` for each row of a committed batch (one call per batch, not one per row)."""
        capacity, uncached, rows = self.capacity, self.uncached, self.rows
        if capacity <= 0:
            return
        pop = rows.pop
        for key, value in changes.items():
            if uncached and key.startswith(uncached):
                continue
            if pop(key, _MISSING) is _MISSING and len(rows) >= capacity:
                self._evict()
            rows[key] = _ABSENT if value is None else value

    def _evict(self) -> None:
        rows = self.rows
        for old in list(rows)[: max(1, self.capacity // 2)]:
            del rows[old]

    def clear(self) -> None:
        """Forget everything (the store changed behind the cache, e.g. a restore)."""
        self.rows.clear()

    def __len__(self) -> int:
        return len(self.rows)


class Transaction:
    """One batch of staged changes over a store; see the module docstring for the protocol."""

    def __init__(
        self,
        store: StateStore,
        cache: RowCache | None = None,
        *,
        position_key: bytes | None = None,
        after: "Transaction | None" = None,
    ) -> None:
        self.store = store
        self.cache = cache if cache is not None else RowCache(0)
        self.position_key = position_key
        self.status: Status = "open"
        self._changes: dict[bytes, Staged] = {}
        self._entry: dict[bytes, Staged] | None = None
        self._prepared: dict[bytes, bytes | None] | None = None
        # The earlier batches whose change sets are not yet in the store, latest first, and their rows:
        # what this batch reads as committed. Only those not flushed when this one begins (a flushed
        # batch's rows are in the store), and none once this one is flushed: however long a run of
        # pipelined batches, each holds at most the one being made durable.
        self._after: tuple[Transaction, ...] = () if after is None else after.unflushed_chain()
        self._earlier: tuple[Mapping[bytes, Staged], ...] = tuple(t.staged_rows() for t in self._after)

    # -- reads -------------------------------------------------------------------------
    def get(self, key: bytes, decode: Decoder = identity) -> Any:
        """The value as staged (decoded form), else as committed (decoded with ``decode``)."""
        entry = self._entry
        if entry is not None and key in entry:
            return entry[key]
        changes = self._changes
        if key in changes:
            return changes[key]
        for earlier in self._earlier:
            if key in earlier:
                return earlier[key]
        rows = self.cache.rows  # the hottest read: straight into the cache's dict
        cached = rows.pop(key, _MISSING)
        if cached is not _MISSING:
            rows[key] = cached  # now the most recently used: eviction drops the least recently used half
            return None if cached is _ABSENT else cached
        raw = self.store.get(key)
        value = None if raw is None else decode(raw)
        self.cache.keep(key, value)
        return value

    def committed(self, key: bytes, decode: Decoder = identity) -> Any:
        """The value as committed before this batch, ignoring what the batch staged.

        Only correct until ``flush``: a reader that needs a row's value before the batch (e.g. to
        undo its contribution to a running aggregate) asks between ``prepare`` and ``flush``.
        An earlier batch not yet flushed (``after``) counts as committed.
        """
        for earlier in self._earlier:
            if key in earlier:
                return earlier[key]
        rows = self.cache.rows
        cached = rows.get(key, _MISSING)
        if cached is not _MISSING:
            return None if cached is _ABSENT else cached
        raw = self.store.get(key)
        value = None if raw is None else decode(raw)
        self.cache.keep(key, value)
        return value

    def iterate_prefix(self, prefix: bytes, decode: Decoder = identity) -> Iterator[tuple[bytes, Any]]:
        """Committed rows merged with staged ones, in key order (a read path, not a hot one)."""
        staged: dict[bytes, Staged] = {}
        for earlier in reversed(self._earlier):  # oldest first: a later batch's row wins
            staged.update((k, v) for k, v in earlier.items() if k.startswith(prefix))
        staged.update((k, v) for k, v in self._changes.items() if k.startswith(prefix))
        if self._entry:
            staged.update((k, v) for k, v in self._entry.items() if k.startswith(prefix))
        if not staged:
            for key, raw in self.store.iterate_prefix(prefix):
                yield key, decode(raw)
            return
        merged: dict[bytes, Any] = {key: decode(raw) for key, raw in self.store.iterate_prefix(prefix)}
        merged.update(staged)
        for key in sorted(merged):
            value = merged[key]
            if value is not None:
                yield key, value

    # -- writes ------------------------------------------------------------------------
    def put(self, key: bytes, value: Row | bytes) -> None:
        # ``_stage`` inlined: every row an entry writes comes through here.
        if self.status != "open":
            raise TransactionStateError(f"cannot write to a {self.status} transaction")
        entry = self._entry
        if entry is not None:
            entry[key] = value
        else:
            self._changes[key] = value

    def delete(self, key: bytes) -> None:
        self._stage(key, None)

    def _stage(self, key: bytes, value: Staged) -> None:
        if self.status != "open":
            raise TransactionStateError(f"cannot write to a {self.status} transaction")
        if self._entry is not None:
            self._entry[key] = value
        else:
            self._changes[key] = value

    # -- entry savepoints --------------------------------------------------------------
    def begin_entry(self) -> None:
        self._entry = {}

    def end_entry(self) -> None:
        """The entry succeeded: its changes join the batch."""
        if self._entry:
            self._changes.update(self._entry)
        self._entry = None

    def abort_entry(self) -> None:
        """The entry failed: drop everything it staged."""
        self._entry = None

    @property
    def staged(self) -> int:
        return len(self._changes)

    def staged_rows(self) -> Mapping[bytes, Staged]:
        """The rows the batch has staged so far (a live view), decoded; ``None`` for a deletion."""
        return self._changes

    def earlier_rows(self) -> tuple[Mapping[bytes, Staged], ...]:
        """The staged rows of the earlier batches this one reads as committed (``after``), latest first."""
        return self._earlier

    def unflushed_chain(self) -> tuple["Transaction", ...]:
        """This transaction and the earlier ones it reads through, those not yet flushed, latest first."""
        if self.status == "flushed":
            return ()
        return (self, *(earlier for earlier in self._after if earlier.status != "flushed"))

    def staged_keys(self) -> Collection[bytes]:
        """The keys the batch has changed so far (a live view: rows staged later join it)."""
        return self._changes.keys()

    # -- prepare / flush ---------------------------------------------------------------
    def recorded_position(self) -> int | None:
        if self.position_key is None:
            return None
        raw = self.store.get(self.position_key)
        return None if raw is None else int(raw)

    def prepare(self, position: int | None = None) -> dict[bytes, bytes | None]:
        """The batch as a byte change set, with the tracking position; nothing is written yet."""
        if self.status != "open" or self._entry is not None:
            raise TransactionStateError(f"cannot prepare a {self.status} transaction inside an entry")
        changes = {
            key: value if value is None or isinstance(value, bytes) else value.encode()
            for key, value in self._changes.items()
        }
        if position is not None:
            if self.position_key is None:
                raise TransactionStateError("this transaction records no position")
            recorded = self.recorded_position()
            if recorded is not None and position < recorded:
                self.status = "failed"
                raise PositionRegressionError(f"tracking position would go back from {recorded} to {position}")
            changes[self.position_key] = str(position).encode()
        self._prepared = changes
        self.status = "prepared"
        return changes

    def flush(self, extra: Mapping[bytes, bytes | None] | None = None) -> None:
        """Write the prepared change set (plus ``extra``, e.g. a changelog offset) atomically."""
        if self.status != "prepared" or self._prepared is None:
            raise TransactionStateError(f"cannot flush a {self.status} transaction; prepare it first")
        changes = self._prepared if not extra else {**self._prepared, **extra}
        if changes:
            try:
                self.store.apply(changes)
            except BaseException:
                self.status = "failed"
                raise
        self.cache.keep_all(self._changes)
        self.status = "flushed"
        self._after, self._earlier = (), ()  # flushed after them (batches flush in order): the store holds theirs

    def commit(self, position: int | None = None) -> dict[bytes, bytes | None]:
        """``prepare`` then ``flush``, for runners with nothing to make durable in between."""
        changes = self.prepare(position)
        self.flush()
        return changes
