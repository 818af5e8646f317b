"""The replay's one reader and one writer, between the journal and the shards (``replay --jobs N``).

The reader reads each journal line once, finds its partition (``Router``)
and sends it, with its line number, to the shard that owns that partition,
in batches. Every shard returns each batch's records by line number; the
writer merges them back into line order, which is the order one process
would have written them in, so the ledger is the same bytes whatever the
number of processes. In that order it keeps what spans scopes: the record
index (each record's ledger offset), dead-letter rows and counts, and the
pattern tracker, all in the main store.

Per batch, in this order (the durability argument of ``runner``): the
batch's ledger lines are appended and fsync'ed; the main store commits,
atomically and durably, the ledger mark, the journal position, the record
index, dead-letter and pattern rows; only then are the shards told the batch
is committed, and they flush its partition rows. The shards run up to
``DEPTH`` batches ahead of the writer, so the fsyncs overlap the engine.

A crash before the main commit leaves ledger bytes the next run cuts and
regenerates; after it, partitions that had not flushed the batch are behind
the ledger, and the next run reads the journal again from the earliest
partition's position, applying those lines only to the partitions behind and
dropping their records (the ledger has them): *catch-up* batches.
"""

import hashlib
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Final

from ..core.engineconfig import EngineConfig
from ..core.partitioning import Router
from ..core.patterns import PatternTracker, is_recurred
from ..core.recordindex import index_record
from ..core.records import Emitted
from ..core.state import key, row_cache
from ..core.tally import Tally, counted
from ..exceptions import StateDirError
from ..host.gcpolicy import full_collections_between_batches
from ..host.journalfile import HeldBack, JournalPosition, JournalReader
from ..host.progress import Progress
from ..host.stopsignals import StopNow, StopSignals
from ..store.base import StateStore, Transaction
from .ledgerfile import DiscardedLedger, Ledger, LedgerMark
from .mainkeys import CLEAN_KEY, COMMITTED_KEY, DIAGNOSED, EPOCH_KEY, JOURNAL_KEY, LEDGER_KEY, WRITTEN_KEY
from .parts import Expected, committed_row
from .shard import BatchSpec, Line, LocalShard, OpenSpec, ShardClient
from .statedir import MemoryState, StateDir, clean_mark

log = logging.getLogger("recurrence.embedded")

#: Batches the shards may run ahead of the ledger (only with worker processes: in one process a batch
#: is committed as soon as it has run, exactly as before there were shards).
DEPTH: Final = 2


@dataclass
class RunSummary(Tally):
    blank_lines: int = 0
    seconds: float = 0.0
    truncated_bytes: int = 0
    # Resume: the position whose prefix was skipped; or replayed_whole when the state had one but
    # the journal does not start with it.
    resumed: JournalPosition | None = None
    replayed_whole: bool = False
    repeated_dead_letters: int = 0
    patterns: int = 0  # cross-scope pattern suggestions made by this run (``recurrence patterns``)
    caught_up: int = 0  # lines read again for partitions a crash left behind the ledger
    processes: int = 1
    held_back: HeldBack | None = None  # the journal's unfinished last line, left for the next run

    def line(self) -> str:
        rate = self.entries / self.seconds if self.seconds > 0 else 0.0
        repeated = (
            f"; {self.repeated_dead_letters:,} dead letters already written by an earlier run were not repeated"
            if self.repeated_dead_letters
            else ""
        )
        patterns = f"; {self.patterns:,} new pattern suggestions" if self.patterns else ""
        processes = f" in {self.processes} processes" if self.processes > 1 else ""
        return (
            f"recurrence replay: {counted(self.entries, 'entry', 'entries')} in {self.seconds:.2f}s "
            f"({rate:,.0f} entries/s{processes}); "
            f"{self.describe()}{repeated}{patterns}"
        )

    def nothing_applied(self) -> str | None:
        """When every entry was dead-lettered (a binary file, the wrong file): what the run ends with, else None.

        Not an error (contract section 4: dead letters exit 0), but a run that applied nothing is
        almost always the wrong input, and a summary line of counts is easy to read past.
        """
        dead = sum(self.dead_letters.values())
        if not self.entries or dead + self.repeated_dead_letters < self.entries or set(self.records) - {"dead_letter"}:
            return None
        if not dead:
            return f"every entry ({self.entries:,}) had been dead-lettered by an earlier run; nothing was applied"
        code, count = max(self.dead_letters.items(), key=lambda item: (item[1], item[0]))
        return f"every entry ({self.entries:,}) was dead-lettered, most as {code} ({count:,}); nothing was applied"


def diagnosed_key(line_number: int, entry: bytes) -> bytes:
    """This journal line, this text: dead-lettered once, never again (whatever a re-read would say)."""
    return key(DIAGNOSED, hashlib.sha256(b"%d\n" % line_number + entry).hexdigest())


@dataclass(frozen=True, slots=True)
class Start:
    """Where a run begins in its journal (``runner`` decides it from the state)."""

    epoch: int
    catch_up_through: int  # lines up to this one are read again for partitions behind the ledger
    sync_first: bool  # partitions must be durable before a new epoch's first batch


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One replay as ``runner.open_run`` opened and checked it: everything ``Run`` is made of."""

    state: "StateDir | MemoryState"
    config: EngineConfig
    reader: JournalReader
    main: StateStore
    ledger: "Ledger | DiscardedLedger"
    router: Router
    shards: tuple[ShardClient, ...]
    owned: tuple[tuple[int, ...], ...]  # per shard, the partitions it owns
    owner: tuple[int, ...]  # per partition, the index of the shard that owns it
    existing: tuple[int, ...]  # the partitions whose store exists
    committed: frozenset[int]  # the partitions main has committed lines to (``parts.COMMITTED_KEY``)
    identity: str | None  # the state's id, stamped into every partition (``parts``)
    deferred: Expected | None  # what each shard checks its partitions against as it opens them (``parts``)
    start: Start
    batch_size: int
    progress_stream: IO[str] | None


class Writer:
    """The ledger side of each batch: records in line order, and the main store's rows that go with them."""

    def __init__(self, plan: RunPlan, summary: RunSummary) -> None:
        self.main, self.ledger, self.config, self.summary = plan.main, plan.ledger, plan.config, summary
        self.epoch = b"%d" % plan.start.epoch
        self.cache = row_cache(10_000)
        self.committed = set(plan.committed)
        self.partitions = plan.router.partitions
        self._begin()

    def _begin(self) -> None:
        self.txn = Transaction(self.main, self.cache)
        self.patterns = PatternTracker(self.txn, self.config.pattern_scopes)
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.diagnosed: dict[bytes, bytes | None] = {}

    def write(self, results: Iterable[tuple[int, list[Emitted]]], entry_of: Callable[[int], bytes]) -> None:
        summary = self.summary
        for line_number, records in results:
            for record in records:
                if record.error is not None:
                    if not self._first_diagnosis(line_number, entry_of(line_number)):
                        summary.repeated_dead_letters += 1
                        continue
                    log.debug("dead letter %s at line %d", record.error, line_number)
                # ``recurrence explain`` finds a record by id: the offset its line will have in the ledger.
                index_record(self.txn, record, b"%d" % (self.ledger.length + self.pending_bytes))
                self.pending.append(record.line + b"\n")
                self.pending_bytes += len(record.line) + 1
                summary.record(record)
                if is_recurred(record) and self.patterns.observe(record.data()) is not None:
                    summary.patterns += 1

    def _first_diagnosis(self, line_number: int, entry: bytes) -> bool:
        row = diagnosed_key(line_number, entry)
        if row in self.diagnosed or self.main.get(row) is not None:
            return False
        self.diagnosed[row] = b""
        return True

    def append(self) -> LedgerMark:
        """Step 1 of ``Run._commit``: the batch's ledger lines appended and fsync'ed."""
        if self.pending:
            self.ledger.append(b"".join(self.pending))
        return self.ledger.sync()

    def record(self, mark: LedgerMark, position: JournalPosition, lines: list[Line]) -> None:
        """Step 2 of ``Run._commit``: one atomic, durable main-store write that records the ledger lines."""
        self.txn.prepare()
        changes: dict[bytes, bytes | None] = {
            LEDGER_KEY: mark.encode(),
            JOURNAL_KEY: position.encode(),
            EPOCH_KEY: self.epoch,
            # What a follower shows as "written at" (milliseconds since the epoch); never read by the engine.
            WRITTEN_KEY: b"%d" % (time.time_ns() // 1_000_000),
        }
        # The partitions main has committed lines to, rewritten only when a batch brings one's first line
        # (once every partition has had one, nothing is looked at).
        if len(self.committed) < self.partitions:
            new = {partition for _, _, partition in lines} - self.committed
            if new:
                self.committed |= new
                changes[COMMITTED_KEY] = committed_row(self.committed)
        changes.update(self.diagnosed)
        try:
            self.txn.flush(changes)
        except StateDirError as error:
            raise StateDirError(
                f"{error}; this batch was not committed: free space (or fix the disk) and run again to resume"
            ) from error
        self._begin()


@dataclass
class _Sent:
    spec: BatchSpec
    lines: list[Line]
    position: JournalPosition
    entries: int


class Run:
    """One replay's batches: read, route, run on the shards, merge, write, commit."""

    def __init__(self, plan: RunPlan, summary: RunSummary) -> None:
        self.plan, self.summary = plan, summary
        self.reader, self.shards, self.owner = plan.reader, plan.shards, plan.owner
        self.writer = Writer(plan, summary)
        # In one process a batch is committed as soon as it has run; from a pipe too (lines may come
        # slowly, and a batch held back would wait for the next one to be written).
        local = len(plan.shards) == 1 and isinstance(plan.shards[0], LocalShard)
        self.depth = 0 if local or plan.reader.total_bytes is None else DEPTH
        self.progress = Progress(
            plan.reader.total_bytes, plan.progress_stream, plan.reader.read_bytes, len(plan.shards)
        )
        self._sent: deque[_Sent] = deque()
        self._number = 0
        self.committed: int | None = None  # the last batch whose ledger lines and main rows are durable
        self._start = plan.reader.position()

    def run(self, stop: StopSignals) -> bool:
        """Open the shards, apply the journal batch by batch, close them; False when a stop request ended
        it before its end. Any failure aborts every shard (nothing after the last commit is kept)."""
        plan, summary = self.plan, self.summary
        try:
            spec = OpenSpec(plan.config, plan.existing, plan.start.sync_first, plan.identity, plan.deferred)
            for shard, parts in zip(plan.shards, plan.owned, strict=True):
                shard.open(plan.state, None if isinstance(shard, LocalShard) else parts, spec)
            if summary.truncated_bytes and isinstance(plan.ledger, Ledger):
                # Ledger recovery, before the first append: bytes a crash left that the state never recorded.
                # Only now, with every partition checked as it opened (``parts``): a refused state keeps its ledger.
                plan.ledger.cut(plan.ledger.length)
                log.info(
                    "ledger recovery: cut %d uncommitted bytes after offset %d",
                    summary.truncated_bytes,
                    plan.ledger.length,
                )  # replay says it
            summary.processes = len(plan.shards)
            try:
                completed = self._batches(stop)
                self._finish()
                self._mark_clean()
            finally:
                summary.blank_lines = plan.reader.blank_lines
                summary.held_back = plan.reader.held_back
                self.progress.update(summary.entries, plan.reader.read_bytes, force=True)
                self.progress.close()
        except BaseException:
            for shard in plan.shards:
                shard.abort()
            raise
        return completed

    def _batches(self, stop: StopSignals) -> bool:
        completed = True
        with full_collections_between_batches() as collections:
            try:
                batch: list[Line] = []
                catching_up = False
                partition = self.plan.router.partition
                catch_up_through, batch_size = self.plan.start.catch_up_through, self.plan.batch_size
                for number, entry in self.reader:
                    late = number <= catch_up_through
                    if batch and late != catching_up:
                        self._send(batch, catching_up, before=number)
                        batch = []
                    catching_up = late
                    batch.append((number, entry, partition(entry)))
                    if len(batch) >= batch_size:
                        self._send(batch, catching_up)
                        batch = []
                        collections.between_batches()
                        if stop.received is not None:
                            completed = False
                            break
            except StopNow:
                completed = False  # raised only while waiting for input: every line read so far is whole
            self._send(batch, catching_up)
            while self._sent:
                self._commit_oldest()
        return completed

    def _send(self, lines: list[Line], catch_up: bool, before: int | None = None) -> None:
        position = self.reader.position()
        if before is not None and catch_up:
            # The next line was read already: this batch ends where catching up ends, at the position.
            assert self.reader.resumed is not None
            position = self.reader.resumed
        if not lines and position == self._start:
            return
        self._number += 1
        spec = BatchSpec(
            self._number,
            self.plan.start.epoch,
            (self._start.offset, self._start.line),
            (position.offset, position.line),
            catch_up,
        )
        self._start = position
        if len(self.shards) == 1:
            self.shards[0].submit(spec, lines, self.committed)
        else:
            parts: list[list[Line]] = [[] for _ in self.shards]
            owner = self.owner
            for line in lines:
                parts[owner[line[2]]].append(line)
            for shard, part in zip(self.shards, parts, strict=True):
                shard.submit(spec, part, self.committed)
        self._sent.append(_Sent(spec, lines, position, 0 if catch_up else len(lines)))
        while len(self._sent) > self.depth:
            self._commit_oldest()

    def _commit_oldest(self) -> None:
        sent = self._sent.popleft()
        results = [shard.results(sent.spec.number) for shard in self.shards]
        if sent.spec.catch_up:
            self.summary.caught_up += len(sent.lines)  # the ledger holds its records already
        else:
            merged: Iterable[tuple[int, list[Emitted]]] = results[0] if len(results) == 1 else heapq.merge(*results)
            entries: dict[int, bytes] = {}

            def entry_of(number: int) -> bytes:
                if not entries:
                    entries.update((n, e) for n, e, _ in sent.lines)
                return entries[number]

            self.writer.write(merged, entry_of)
            self._commit(sent)
        self.committed = sent.spec.number
        self.progress.update(self.summary.entries, sent.position.offset)

    def _commit(self, sent: _Sent) -> None:
        """Make a batch durable in the only safe order (the module docstring says why)."""
        # 1. Outputs: the batch's ledger lines, appended and fsync'ed.
        mark = self.writer.append()
        # 2. What records them, in one atomic durable write: the ledger mark, the journal position, the
        #    record index, dead-letter and pattern rows, a partition's first committed line (main store).
        self.writer.record(mark, sent.position, sent.lines)
        self.summary.entries += sent.entries
        # 3. Local state: each shard flushes the batch's partition rows once told it is committed (with its
        #    next batch, or at the end: ``self.committed``); a partition a crash leaves behind catches up.

    def _finish(self) -> None:
        # Every shard is told first, then waited for: worker processes flush and close their partitions
        # side by side, not one after the other.
        for shard in self.shards:
            shard.finish(self.committed)
        for shard in self.shards:
            shard.finished()

    def _mark_clean(self) -> None:
        """Every partition is durable at the position: the next run need not look at them."""
        raw = self.plan.main.get(JOURNAL_KEY)
        position = None if raw is None else JournalPosition.decode(raw)
        self.plan.main.apply({CLEAN_KEY: clean_mark(self.plan.start.epoch, position)})
