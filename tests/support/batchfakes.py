"""Broker-less stand-ins for the batch processor's interfaces: in-memory partitions, a recording sink, a journal.

What the batch-path tests share (``test_stream_units``, ``test_stream_tables_units``,
``test_changeset_split``): the processor runs over these exactly as the worker runs it
over Faust's tables and producers.
"""

import asyncio
from collections.abc import Awaitable, Sequence
from types import SimpleNamespace
from typing import Any

from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.partitioning import partition_for, scope_key
from recurrence_ledger.processor.store.base import Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.stream.batch.steps import EngineStep
from recurrence_ledger.processor.stream.batch.types import ChangelogRecord, Entry, Outgoing
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.processor.synthetic import JournalSpec, generate

TOPICS = StreamSettings(topic_prefix="unit").topics


def engine_step() -> EngineStep:
    """The engine's lane step over the unit topics, under the default engine configuration."""
    return EngineStep(TOPICS, EngineConfig())


class Partitions:
    """``PartitionedState`` over memory stores; ``log`` records the order of local flushes (and the sink's events)."""

    def __init__(self) -> None:
        self.stores: dict[int, MemoryStore] = {}
        self.log: list[tuple[str, Any]] = []

    def partition_state(self, partition: int) -> MemoryStore:
        return self.stores.setdefault(partition, MemoryStore())

    def open_partition_state(self, partition: int) -> MemoryStore | None:
        return self.stores.get(partition)

    def generation(self, partition: int) -> int:
        return 0

    def flush_local(self, partition: int, txn: Transaction, changelog_offset: int) -> None:
        self.log.append(("local", partition))
        txn.flush()

    def changelog_offset(self, partition: int) -> int | None:
        return None  # these tests give the processor no changelog to check a restore against

    def apply_changelog(self, partition: int, records: Sequence[ChangelogRecord]) -> None:
        raise AssertionError("no restore to repair without a changelog")


class RecordingSink:
    """Acknowledges later (when the processor awaits), and records the order of events."""

    def __init__(self, log: list[tuple[str, Any]], transactional: bool = False) -> None:
        self.log = log
        self.transactional = transactional
        self.sent: dict[str, list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]] = {}
        self.offsets: dict[str, int] = {}
        self.changelog: dict[int, list[bytes]] = {}  # journal partition -> its change sets, in order

    async def send(self, record: Outgoing) -> Awaitable[Any]:
        topic, key, value, partition, headers, _ = record
        kind = "changelog" if topic == TOPICS.changelog else "output"
        self.log.append(("send", kind))
        if partition is not None and kind == "changelog":
            self.changelog.setdefault(partition, []).append(value)
        self.sent.setdefault(topic, []).append((key, value, headers))
        offset = self.offsets[topic] = self.offsets.get(topic, -1) + 1
        written = partition if partition is not None else partition_for((key or b"").decode(), 4)

        async def acknowledged() -> Any:
            await asyncio.sleep(0)
            self.log.append(("ack", kind))
            return SimpleNamespace(partition=written, offset=offset)

        return asyncio.ensure_future(acknowledged())

    def append(self, record: Outgoing) -> Awaitable[Any] | None:
        return None  # every record through ``send``, which the subclasses below intercept

    async def flush(self, early: bool = False) -> None:
        """Nothing is buffered here: every record was handed over by ``send``."""

    async def begin(self, partitions: Sequence[int]) -> None:
        self.log.append(("begin", tuple(partitions)))

    def end(self) -> None:
        self.log.append(("end", None))

    async def commit(self, partitions: Sequence[int]) -> None:
        self.log.append(("commit", tuple(partitions)))


class Journal:
    """``JournalSource`` over in-memory entries."""

    def __init__(self, entries: list[Entry]) -> None:
        self.by_partition: dict[int, dict[int, bytes]] = {}
        for entry in entries:
            self.by_partition.setdefault(entry.partition, {})[entry.offset] = entry.value
        self.fetched: list[tuple[int, int, int]] = []

    async def log_start(self, partition: int) -> int:
        return 0

    async def fetch(self, partition: int, start: int, stop: int) -> list[tuple[int, bytes]]:
        self.fetched.append((partition, start, stop))
        values = self.by_partition.get(partition, {})
        return [(o, values[o]) for o in range(start, stop) if o in values]


def journal_lines(entries: int, seed: int) -> list[bytes]:
    """A generated journal over 12 scopes with 3% garbage."""
    return list(generate(JournalSpec(entries=entries, scopes=12, seed=seed, garbage_ratio=0.03)))


def entries_of(lines: list[bytes], partitions: int = 4) -> list[Entry]:
    """The lines as journal records: each on its scope's partition (the Java default partitioner), offsets in order."""
    offsets = dict.fromkeys(range(partitions), 0)
    entries = []
    for line in lines:
        key = scope_key(line)
        partition = 0 if key is None else partition_for(key.decode(), partitions)
        entries.append(Entry(partition, offsets[partition], line))
        offsets[partition] += 1
    return entries
