"""The stream path's interfaces and wire names, free of Faust and aiokafka (as faust's own ``types``).

``processing`` runs batches against these protocols; ``tablestore``, ``sink``
and ``journal`` implement them over Faust and aiokafka; tests implement them
in memory; ``dump`` reads the header without loading Faust.
"""

from collections.abc import Awaitable, Collection, Sequence
from typing import Final, NamedTuple, Protocol, TypeAlias

from ...core.records import Emitted, Origin
from ...store.base import StateStore, Transaction

#: Header on every output record: "<journal partition>:<journal offset>:<index in the entry's output>".
SOURCE_HEADER: Final = "recurrence-source"
#: Header on every output record: "<record kind>:<record id>", the id consumers deduplicate by.
ID_HEADER: Final = "recurrence-id"


class Entry(NamedTuple):
    """One journal record handed to a batch (a named tuple: one is built per record, in the hot path)."""

    partition: int
    offset: int
    value: bytes
    timestamp: float | None = None  # the journal record's timestamp (seconds), for entry-to-output latency


class Outgoing(NamedTuple):
    """One record handed to a sink (a named tuple: one is built per output record, in the hot path).

    ``partition`` None: the key's partition (as the producer's default partitioner picks it).
    ``source_partition`` is the journal partition whose entry produced the record (the
    exactly-once sink sends through that partition's transactional producer).
    """

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None
    headers: list[tuple[str, bytes]]
    source_partition: int


class Delivered(Protocol):
    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


class Sink(Protocol):
    @property
    def transactional(self) -> bool:
        """Are a batch's records visible only together, at ``commit`` (exactly_once)?"""
        ...

    async def send(self, record: Outgoing) -> Awaitable[Delivered]:
        """Hand a record to the producer; the returned awaitable resolves once it is durable.

        A sink may buffer the record until ``flush`` (the worker's sends whole batches).
        """
        ...

    def append(self, record: Outgoing) -> Awaitable[Delivered] | None:
        """``send`` without a coroutine when the record can be taken at once, else None (then ``send``).

        The worker's per-record loop tries this first: a coroutine and its await per output record
        are measurable at tens of thousands of records a second. A sink may always answer None.
        """
        ...

    async def flush(self, early: bool = False) -> None:
        """Send whatever ``send`` has buffered so far (the awaitables it returned can then resolve).

        ``early``: a flush in the middle of a batch's entries, so that outputs leave before the
        batch ends; a sink may skip it (e.g. while what it sent before is unacknowledged).
        """
        ...

    async def begin(self, partitions: Sequence[int]) -> None:
        """A batch for these journal partitions starts (exactly_once: take their producers)."""
        ...

    def end(self) -> None:
        """The batch is over, successfully or not."""
        ...

    async def commit(self, partitions: Sequence[int]) -> None:
        """After outputs and change sets are durable: make these partitions' visible (one Kafka
        transaction per journal partition under exactly_once; nothing to do otherwise). The journal
        position travels in the change sets; the group offsets are the agent's, after this."""
        ...


#: One changelog record as read back: (offset, key, value).
ChangelogRecord: TypeAlias = tuple[int, bytes | None, bytes | None]


class ChangelogSource(Protocol):
    """Direct reads of the state changelog (read_committed), to check a restore against it."""

    async def log_end(self, partition: int) -> int:
        """The offset after the last committed record (the last stable offset under exactly_once)."""
        ...

    async def fetch_records(self, partition: int, start: int, stop: int) -> list[ChangelogRecord]: ...


class JournalSource(Protocol):
    """Direct reads of the journal (``journal.PartitionReader``), for entries the stream skipped."""

    async def log_start(self, partition: int) -> int: ...

    async def fetch(self, partition: int, start: int, stop: int) -> list[tuple[int, bytes]]: ...


class PartitionedState(Protocol):
    """What the stream path needs from the table's store."""

    def partition_state(self, partition: int) -> StateStore:
        """The state of one partition (opened on demand; the agent's partitions)."""
        ...

    def open_partition_state(self, partition: int) -> StateStore | None:
        """The state of a partition only if it is already open here (read surface)."""
        ...

    def generation(self, partition: int) -> int:
        """Changes whenever the partition's data changed outside ``flush_local`` (restore, standby)."""
        ...

    def flush_local(self, partition: int, txn: Transaction, changelog_offset: int) -> None:
        """Write a prepared batch that is durable in the changelog, atomically with its offset."""
        ...

    def changelog_offset(self, partition: int) -> int | None:
        """The offset of the last changelog record the partition's state contains (None: none yet)."""
        ...

    def apply_changelog(self, partition: int, records: Sequence[ChangelogRecord]) -> None:
        """Apply changelog records read back (those at or below ``changelog_offset`` are skipped)."""
        ...


class TableRecord(NamedTuple):
    """A keyed value written after a batch (a table topic: the last value per key is the state)."""

    topic: str
    key: bytes
    value: bytes


class StepRun(Protocol):
    """One partition's part of one batch: the step over that partition's ``Transaction``."""

    def process(self, raw: bytes, origin: Origin) -> list[Emitted]:
        """Apply one input record; the output records, in order."""
        ...

    def finish(self, changed: Collection[bytes]) -> list[TableRecord]:
        """After the batch's last record, given the keys it changed: table records to write with the outputs.

        Called before the transaction is flushed, so the rows as committed before the batch can still
        be read (``Transaction.committed``)."""
        ...


class Step(Protocol):
    """What a batch runs per input record: the engine over the journal, or the pattern tracker."""

    @property
    def source(self) -> str:
        """The topic the agent consumes (its offsets are the positions the state records)."""
        ...

    @property
    def changelog(self) -> str:
        """The changelog topic of the step's table."""
        ...

    def pinned(self) -> dict[str, int]:
        """The settings the step's state depends on: stamped into each partition, then enforced."""
        ...

    def begin(self, txn: Transaction, partition: int) -> StepRun:
        """One partition's run over the batch's transaction (a step may keep state per partition)."""
        ...

    def routes(self, record: Emitted) -> list[tuple[str, bytes | None]]:
        """(topic, key) for each copy of an output record; key None: beside the source partition."""
        ...
