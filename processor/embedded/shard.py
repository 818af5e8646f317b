"""The engine over a set of partitions of an embedded state: what one ``replay --jobs`` process runs.

The coordinator (``coordinator``) reads the journal and sends each shard the
lines of its partitions, batch by batch, with each line's number and
partition. A shard runs ``Engine.process`` on them in line order, one
``Transaction`` and one ``Engine`` per partition per batch (a scope's rows all
live in its partition), and returns the records of each line by its number,
so the coordinator can merge every shard's records back into journal order.

A batch's changes are *prepared* when it returns and *flushed* only when the
coordinator says the batch is committed: its ledger lines are durable and the
main store recorded them. Meanwhile the next batches run against them
(``Transaction(after=...)``), so a shard never waits for the ledger's fsync.
Each flush also records, in every partition the shard owns, how far into the
journal it has applied (``Applied``); those writes are not fsync'ed (a
partition left behind by a crash is caught up from the journal by the next
run), except when a partition is created and when the run ends (``sync``).

Catch-up batches carry lines the ledger already holds: they are applied to
the partitions that are behind and their records are dropped.
"""

import contextlib
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from ..core.engine import Engine
from ..core.engineconfig import EngineConfig
from ..core.records import Emitted
from ..core.state import row_cache
from ..exceptions import REBUILD, StateDirError
from .mainkeys import IDENTITY_KEY
from .parts import Expected, check_header, partition_identity, read_header
from .statedir import APPLIED_KEY, Applied, Store

if TYPE_CHECKING:
    from .statedir import MemoryState, StateDir
from ..core.stateheader import check_layout, check_pinned
from ..store.base import RowCache, Transaction

log = logging.getLogger("recurrence.shard")

#: (journal line number, entry bytes, partition) in line order.
Line = tuple[int, bytes, int]
#: (journal line number, its records) for the lines that produced any, in line order.
Results = list[tuple[int, list[Emitted]]]

_REBUILD: Final = f"rebuild it: {REBUILD}"


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """One batch as the coordinator read it: its number, the journal span it covers, whether it catches up."""

    number: int
    epoch: int
    start: tuple[int, int]  # (byte offset, line) where the batch starts
    end: tuple[int, int]  # (byte offset, line) after its last whole line
    catch_up: bool = False

    @property
    def applied(self) -> Applied:
        return Applied(self.epoch, *self.end)


@dataclass(frozen=True, slots=True)
class OpenSpec:
    """How a shard opens its partitions: the run's engine configuration, the partitions whose store exists,
    whether to make them durable first (a new epoch's first batch), the state's id each is stamped with and
    what each is checked against as it is opened (``parts``)."""

    config: EngineConfig
    existing: tuple[int, ...]
    sync_first: bool = False
    identity: str | None = None
    expected: Expected | None = None


@dataclass(slots=True)
class _Pending:
    spec: BatchSpec
    txns: dict[int, Transaction] = field(default_factory=dict)


def _later(applied: Applied, than: Applied | None) -> bool:
    return than is None or (applied.epoch, applied.line) > (than.epoch, than.line)


class Shard:
    """The partitions ``owned`` of one state (all of them when ``owned`` is None)."""

    def __init__(
        self,
        open_store: Callable[[int], Store],
        owned: Collection[int] | None,
        spec: OpenSpec,
        cache: RowCache | None = None,
    ) -> None:
        self._open_store = open_store
        self._identity = spec.identity
        self._expected = spec.expected  # ``parts.Parts.deferred``
        self._sync_first = spec.sync_first
        self._owned = None if owned is None else frozenset(owned)
        self._existing = [p for p in spec.existing if self._owns(p)]
        self.config = spec.config
        self.cache = cache if cache is not None else row_cache()
        self.stores: dict[int, Store] = {}
        self.applied: dict[int, Applied | None] = {}
        self._pending: list[_Pending] = []
        self._latest: dict[int, Transaction] = {}  # per partition: its newest batch transaction

    def _owns(self, partition: int) -> bool:
        return self._owned is None or partition in self._owned

    def open(self) -> dict[int, Applied | None]:
        """Open the partitions that exist; how far each has applied the journal (``OpenSpec.sync_first``: made
        durable first)."""
        stamped = False
        for partition in self._existing:
            store = self._open_store(partition)
            self.stores[partition] = store
            if self._expected is not None:
                check_header(self._expected, partition, read_header(store))
            where = f"the state's partition {partition}"
            if check_layout(store.get, where, _REBUILD) or check_pinned(
                store.get, self.config.pinned(), where, _REBUILD
            ):
                raise StateDirError(f"{where} has no header (not written by this recurrence); {_REBUILD}")
            raw = store.get(APPLIED_KEY)
            self.applied[partition] = None if raw is None else Applied.decode(raw)
            if self._identity is not None and store.get(IDENTITY_KEY) is None:
                # A partition of a state 1.0.0 wrote (``parts`` accepted it): stamped on its first replay.
                store.apply({IDENTITY_KEY: partition_identity(self._identity, partition)})
                stamped = True
        if self._sync_first or stamped:
            self.sync()
        return dict(self.applied)

    def _create(self, partition: int, spec: BatchSpec) -> Store:
        """A partition's first line: its store, stamped and durable before any record of it is."""
        store = self._open_store(partition)
        where = f"the state's partition {partition}"
        rows = check_layout(store.get, where, _REBUILD)
        rows.update(check_pinned(store.get, self.config.pinned(), where, _REBUILD))
        # Nothing of it before this batch exists: it has applied every line of its own up to here.
        applied = Applied(spec.epoch, *spec.start)
        rows[APPLIED_KEY] = applied.encode()
        if self._identity is not None:
            rows[IDENTITY_KEY] = partition_identity(self._identity, partition)
        store.apply(rows)
        store.sync()
        self.stores[partition] = store
        self.applied[partition] = applied
        return store

    def process(self, spec: BatchSpec, lines: Sequence[Line]) -> Results:
        """Run the batch's lines; prepared, not flushed (``commit``)."""
        pending = _Pending(spec)
        txns = pending.txns
        engines: dict[int, Engine] = {}
        results: Results = []
        skip = self._behind(spec) if spec.catch_up else None
        for number, entry, partition in lines:
            if skip is not None and number <= skip.get(partition, 0):
                continue  # this partition applied the line before the crash
            engine = engines.get(partition)
            if engine is None:
                store = self.stores.get(partition) or self._create(partition, spec)
                txn = txns[partition] = Transaction(store, self.cache, after=self._latest.get(partition))
                self._latest[partition] = txn
                engine = engines[partition] = Engine(txn, self.config)
            records = engine.process(entry, {"line": number})
            if records and not spec.catch_up:
                results.append((number, records))
        for txn in txns.values():
            txn.prepare()
        self._pending.append(pending)
        return results

    def _behind(self, spec: BatchSpec) -> Mapping[int, int]:
        """Per partition, the last line it applied in this epoch (lines up to it are skipped)."""
        return {
            partition: applied.line
            for partition, applied in self.applied.items()
            if applied is not None and applied.epoch == spec.epoch
        }

    def commit(self, through: int) -> None:
        """The coordinator committed every batch up to ``through``: flush them, in order."""
        try:
            self._commit(through)
        except StateDirError as error:
            raise StateDirError(
                f"{error}; the ledger and its batch are committed, this partition is behind them: free space (or "
                "fix the disk) and run again to resume (it catches up)"
            ) from error

    def _commit(self, through: int) -> None:
        done = [p for p in self._pending if p.spec.number <= through]
        if not done:
            return
        self._pending = self._pending[len(done) :]
        for pending in done:
            applied = pending.spec.applied
            for partition, txn in pending.txns.items():
                if _later(applied, self.applied.get(partition)):
                    txn.flush({APPLIED_KEY: applied.encode()})
                    self.applied[partition] = applied
                else:  # a catch-up batch behind what this partition had applied already
                    txn.flush()
        last = done[-1].spec.applied
        for partition, store in self.stores.items():
            if _later(last, self.applied.get(partition)):
                store.apply({APPLIED_KEY: last.encode()})
                self.applied[partition] = last

    def sync(self) -> None:
        for store in self.stores.values():
            store.sync()

    def finish(self, committed: int | None) -> None:
        """Flush every batch through ``committed``, make the partitions durable and close them."""
        try:
            if committed is not None:
                self.commit(committed)
            self.sync()
        except BaseException:
            with contextlib.suppress(Exception):  # a failing disk may refuse the close too: keep the first error
                self.close()
            raise
        self.close()

    def close(self) -> None:
        stores, self.stores = self.stores, {}
        failure: BaseException | None = None
        for store in stores.values():
            try:
                store.close()
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise StateDirError(f"cannot close the state: {failure}")


class ShardClient(Protocol):
    """What the coordinator needs of a shard, wherever it runs."""

    def open(
        self, state: "StateDir | MemoryState", owned: Sequence[int] | None, spec: OpenSpec
    ) -> dict[int, Applied | None]: ...

    def submit(self, spec: BatchSpec, lines: Sequence[Line], committed: int | None) -> None: ...

    def results(self, number: int) -> Results: ...

    def finish(self, committed: int | None) -> None:
        """Flush every batch through ``committed``, make the partitions durable and close them (begun, at
        least: ``finished`` waits for the end)."""

    def finished(self) -> None: ...

    def abort(self) -> None: ...


class LocalShard:
    """The shard in this process: ``--jobs 1``, and small journals (no start-up cost)."""

    def __init__(self) -> None:
        self.shard: Shard | None = None
        self._results: dict[int, Results] = {}

    def open(
        self, state: "StateDir | MemoryState", owned: Sequence[int] | None, spec: OpenSpec
    ) -> dict[int, Applied | None]:
        self.shard = Shard(state.opener(), owned, spec)
        return self.shard.open()

    def submit(self, spec: BatchSpec, lines: Sequence[Line], committed: int | None) -> None:
        assert self.shard is not None
        if committed is not None:
            self.shard.commit(committed)
        self._results[spec.number] = self.shard.process(spec, lines)

    def results(self, number: int) -> Results:
        return self._results.pop(number)

    def finish(self, committed: int | None) -> None:
        shard, self.shard = self.shard, None
        if shard is not None:
            shard.finish(committed)

    def finished(self) -> None:
        return None  # ``finish`` did it all

    def abort(self) -> None:
        shard, self.shard = self.shard, None
        if shard is not None:
            with contextlib.suppress(Exception):
                shard.close()
