"""The embedded runner: the engine over a ``.jsonl`` journal, RocksDB state, a ledger file.

This is the product's default mode and the oracle the Kafka path is tested
against.

Durability order per batch: the batch's ledger lines are written and
fsync'ed, then one state transaction commits the batch's rows together with
the runner's own rows: the ledger's new length and the sha256 of its last
64 KiB (the *ledger mark*), how much of the journal is consumed (a
``Checkpoint``), and which journal lines were already dead-lettered. A crash
anywhere in between leaves ledger bytes the state never recorded; the next
run cuts them and regenerates exactly those lines, so the ledger never holds
a line twice and never loses one. A fresh state commits its mark (length 0)
before the first batch, so the same repair covers a crash in the first batch.

On start the ledger must be the one the state recorded: missing, shorter, or
different before the recorded length is refused (exit 2), never silently
continued. The state binds to the ledger's bytes, not its path, so a moved
ledger is accepted. The journal is resumed from the checkpoint when it starts
with the consumed bytes, else replayed whole (idempotent).
"""

import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager, suppress
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from ..core.engineconfig import EngineConfig
from ..core.partitioning import Router, assign
from ..exceptions import ConfigMismatchError, Interrupted, LedgerMismatchError, StateDirError
from ..host.journalfile import Checkpoint, JournalReader, Progress, shown
from ..host.stopsignals import Abandon, StopNow, StopSignals
from ..store.base import StateStore
from .archive import JOURNAL_PATH_KEY, LEDGER_PATH_KEY
from .coordinator import Run, RunSummary, Writer
from .header import bind_config, check_format, has_engine_rows
from .ledgerfile import EMPTY_LEDGER, DiscardedLedger, Ledger, LedgerMark, check_ledger, owned
from .paths import real
from .shard import LocalShard, ShardClient
from .statedir import (
    APPLIED_KEY,
    CLEAN_KEY,
    DEFAULT_PARTITIONS,
    EPOCH_KEY,
    JOURNAL_KEY,
    LEDGER_KEY,
    PARTITIONS_KEY,
    WRITTEN_KEY,
    Applied,
    MemoryState,
    StateDir,
    clean_mark,
    closing_store,
    holds_store,
    main_path,
    partition_count,
)

if TYPE_CHECKING:
    from .workers import RemoteShard

__all__ = ["RunSummary", "StopSignals", "replay"]

log = logging.getLogger("recurrence.embedded")

DEFAULT_BATCH = 1000


class ReplayInterrupted(Interrupted):
    """A signal stopped the replay; ``summary`` is what this run did until then."""

    def __init__(self, signal_number: int, summary: "RunSummary", abandoned: bool = False) -> None:
        super().__init__(signal_number)
        self.summary = summary
        self.abandoned = abandoned


#: A regular-file journal below this size runs in one process unless --jobs says otherwise: forking
#: and opening the partitions would cost more than a second process saves.
SMALL_JOURNAL_BYTES: Final = 1 << 20


def default_jobs(journal: str) -> int:
    """The cores this process may use, or 1 for a small journal file."""
    if journal != "-":
        with suppress(OSError):
            info = os.stat(journal)
            if stat.S_ISREG(info.st_mode) and info.st_size < SMALL_JOURNAL_BYTES:
                return 1
    return len(os.sched_getaffinity(0))


def _open_ledger(
    store: StateStore,
    out: Path | None,
    config: EngineConfig | None,
    journal: str,
    partitions: int | None,
    created: bool,
) -> tuple[EngineConfig, "Ledger | DiscardedLedger", int, int]:
    """Check the state and the ledger against each other; stamp a fresh state before its first batch.
    ``out`` None: a dry run, whose records are not kept (a fresh state only); ``created``: the ledger file is
    the empty one this run's lock created (it was missing)."""
    # Where ``recurrence explain`` reads records and entries back (informational: the ledger is
    # bound by its bytes, and an explain may name other paths).
    stamps: dict[bytes, bytes] = {} if out is None else {LEDGER_PATH_KEY: os.fsencode(real(out))}
    if journal != "-" and Path(journal).is_file():
        stamps[JOURNAL_PATH_KEY] = os.fsencode(real(journal))
    check_format(store, stamps)
    config = bind_config(store, config, stamps)
    count = partition_count(store)
    if count is None:
        count = partitions or DEFAULT_PARTITIONS
        stamps[PARTITIONS_KEY] = b"%d" % count
    elif partitions is not None and partitions != count:
        raise ConfigMismatchError(
            f"the state has {count} partitions (fixed when it was created), not {partitions}; leave --partitions "
            "out, or use a fresh --state"
        )
    raw = store.get(LEDGER_KEY)
    mark = None if raw is None else LedgerMark.decode(raw)
    if out is None:
        if raw is not None or has_engine_rows(store):
            raise StateDirError("a dry run needs a fresh state: its records are not kept")
        store.apply(stamps)
        return config, DiscardedLedger(), 0, count
    if mark is None and has_engine_rows(store):
        raise LedgerMismatchError(
            "the state records no ledger mark (written by an older recurrence), so its ledger cannot be checked; "
            "rebuild: replay the journal into a fresh --state with a fresh --out"
        )
    cut = check_ledger(out, mark, created)
    if mark is None:
        # Before any batch: a crash in the first one is then repaired like any other.
        mark = EMPTY_LEDGER
        stamps[LEDGER_KEY] = mark.encode()
    if stamps:
        store.apply(stamps)
    ledger = Ledger(out, mark)
    if cut:
        ledger.cut(mark.length)
        log.warning("ledger recovery: cut %d uncommitted bytes after offset %d", cut, mark.length)
    return config, ledger, cut, count


def _behind(state: "StateDir | MemoryState", existing: list[int], epoch: int) -> tuple[int, int]:
    """Where the partition furthest behind stands (a crash left it behind the ledger): read-only look."""
    open_partition = state.opener(read_only=True)
    lowest: tuple[int, int] | None = None
    for partition in existing:
        store = open_partition(partition)
        try:
            raw = store.get(APPLIED_KEY)
        finally:
            store.close()
        applied = None if raw is None else Applied.decode(raw)
        at = (applied.offset, applied.line) if applied is not None and applied.epoch == epoch else (0, 0)
        lowest = at if lowest is None else min(lowest, at)
    return lowest if lowest is not None else (0, 0)


@dataclass
class _Start:
    epoch: int
    catch_up_through: int  # lines up to this one are read again for partitions behind the ledger
    sync_first: bool  # partitions must be durable before a new epoch's first batch


def _resume(
    main: StateStore,
    state: "StateDir | MemoryState",
    reader: JournalReader,
    summary: RunSummary,
    existing: list[int],
) -> _Start:
    raw = main.get(JOURNAL_KEY)
    epoch_raw = main.get(EPOCH_KEY)
    epoch = 0 if epoch_raw is None else int(epoch_raw)
    if raw is None:
        return _Start(epoch, 0, False)
    checkpoint = Checkpoint.decode(raw)
    clean = main.get(CLEAN_KEY) == clean_mark(epoch, checkpoint)
    behind = (checkpoint.offset, checkpoint.line) if clean or not existing else _behind(state, existing, epoch)
    lagging = behind < (checkpoint.offset, checkpoint.line)
    if reader.resume(checkpoint, behind if lagging else None):
        summary.resumed = checkpoint
        if lagging:
            log.warning(
                "partitions behind the ledger after a crash: reading lines %d..%d again for them",
                behind[1] + 1,
                checkpoint.line,
            )
        log.info("resumed after line %d (%d bytes already applied)", checkpoint.line, checkpoint.offset)
        return _Start(epoch, checkpoint.line if lagging else 0, False)
    if not checkpoint.offset:
        return _Start(epoch, 0, False)
    if lagging:
        raise StateDirError(
            f"a crash left part of the state behind its ledger (it applied up to line {behind[1]}, the ledger holds "
            f"line {checkpoint.line}), and this journal does not start with the {checkpoint.offset:,} bytes the "
            "state read: replay the journal it was built from first (it catches up), then this one"
        )
    summary.replayed_whole = True
    log.info("the journal does not start with the %d bytes already applied: replaying it whole", checkpoint.offset)
    # A new epoch: partition positions of the old journal mean nothing in this one.
    return _Start(epoch + 1, 0, not clean)


def assignment_weights(journal: str, offset: int, router: Router) -> dict[int, int]:
    """Lines per partition among the next ``ASSIGN_WINDOW`` lines of a journal file (read apart)."""
    weights: dict[int, int] = {}
    with suppress(OSError), open(journal, "rb") as handle:
        handle.seek(offset)
        for line in islice(handle, ASSIGN_WINDOW):
            entry = line.rstrip(b"\r\n")
            if entry:
                partition = router.partition(entry)
                weights[partition] = weights.get(partition, 0) + 1
    return weights


def replay(
    journal: str,
    state: "Path | MemoryState",
    out: Path | None,
    config: EngineConfig | None = None,
    batch_size: int = DEFAULT_BATCH,
    progress_stream: IO[str] | None = None,
    stop: StopSignals | None = None,
    jobs: int | None = None,
    partitions: int | None = None,
) -> RunSummary:
    """Apply ``journal`` to the state directory ``state``, appending records to ``out`` (None: a dry run into
    a fresh state, records counted and not kept); see the module docstring. ``jobs``: processes (default:
    ``default_jobs``); ``partitions``: of a new state. A ``MemoryState`` (tests, dry runs) runs in this
    process."""
    stop = stop or StopSignals()
    summary = RunSummary()
    started = time.monotonic()
    location = StateDir(state) if isinstance(state, Path) else state
    location.prepare()
    processes = jobs if jobs is not None else default_jobs(journal)
    if isinstance(location, MemoryState):
        processes = 1
    workers: list[RemoteShard] = []
    if processes > 1:
        from .workers import fork_workers  # noqa: PLC0415 - one process needs none of it (pipes, threads)

        # Forked before anything else is opened (no store, no thread): see ``workers``.
        workers = fork_workers(processes)
    completed = False
    try:
        with ExitStack() as held:
            # Taken after the fork: a worker never inherits the lock, so a killed run releases it at once.
            created = out is not None and held.enter_context(owned(out))
            if isinstance(location, StateDir) and out is not None and not holds_store(main_path(location.root)):
                # A new state: a ledger it cannot take is refused before the state directory is created, so a
                # refused run leaves no folder that looks like a state (``_open_ledger`` checks it again).
                check_ledger(out, None)
            # The journal is opened first: an unreadable one stops the run before the state is stamped.
            reader = held.enter_context(JournalReader(journal))
            main = held.enter_context(_main_store(location))
            completed = _replay(
                journal,
                location,
                out,
                config,
                batch_size,
                progress_stream,
                stop,
                partitions,
                reader,
                main,
                workers,
                summary,
                created,
            )
    except Abandon as abandoned:
        for worker in workers:
            worker.abort()
        summary.seconds = time.monotonic() - started
        raise ReplayInterrupted(abandoned.signal_number, summary, abandoned=True) from None
    finally:
        for worker in workers:
            worker.close()
    summary.seconds = time.monotonic() - started
    if stop.received is not None and not completed:
        raise ReplayInterrupted(stop.received, summary)
    return summary


@contextmanager
def _main_store(state: "StateDir | MemoryState") -> Iterator[StateStore]:
    where = shown(state.root) if isinstance(state, StateDir) else "in memory"
    with closing_store(state.open_main(), where) as store:
        yield store


def _replay(
    journal: str,
    state: "StateDir | MemoryState",
    out: Path | None,
    config: EngineConfig | None,
    batch_size: int,
    progress_stream: IO[str] | None,
    stop: StopSignals,
    partitions: int | None,
    reader: JournalReader,
    main: StateStore,
    workers: "list[RemoteShard]",
    summary: RunSummary,
    created: bool,
) -> bool:
    config, ledger, summary.truncated_bytes, count = _open_ledger(main, out, config, journal, partitions, created)
    with closing(ledger):
        stop.waiting = lambda: reader.waiting
        reader.before_wait = stop.check
        existing = state.existing()
        try:
            start = _resume(main, state, reader, summary, existing)
        except StopNow:
            return False
        router = Router(count)
        lines: Iterator[tuple[int, bytes]] = iter(reader)
        shards: list[ShardClient]
        if workers:
            # Partitions go to processes by their share of the journal's next lines (``assign``: the busiest
            # process as light as can be found); a pipe cannot be read twice: round robin.
            weights = assignment_weights(journal, reader.read_bytes, router) if reader.total_bytes is not None else {}
            owned = [parts for parts in assign(weights, count, len(workers)) if parts]
            for extra in workers[len(owned) :]:
                extra.close()
            shards = list(workers[: len(owned)])
            owner = [0] * count
            for index, parts in enumerate(owned):
                for partition in parts:
                    owner[partition] = index
        else:
            owned = [list(range(count))]
            shards = [LocalShard()]
            owner = [0] * count
        try:
            return _run(
                state,
                config,
                batch_size,
                progress_stream,
                stop,
                reader,
                lines,
                main,
                ledger,
                summary,
                start,
                router,
                shards,
                owned,
                owner,
                existing,
            )
        except BaseException:
            for shard in shards:
                shard.abort()
            raise


def _run(
    state: "StateDir | MemoryState",
    config: EngineConfig,
    batch_size: int,
    progress_stream: IO[str] | None,
    stop: StopSignals,
    reader: JournalReader,
    lines: Iterator[tuple[int, bytes]],
    main: StateStore,
    ledger: "Ledger | DiscardedLedger",
    summary: RunSummary,
    start: "_Start",
    router: Router,
    shards: list[ShardClient],
    owned: list[list[int]],
    owner: list[int],
    existing: list[int],
) -> bool:
    for shard, parts in zip(shards, owned, strict=True):
        shard.open(state, config, None if isinstance(shard, LocalShard) else parts, existing, start.sync_first)
    summary.processes = len(shards)
    progress = Progress(reader.total_bytes, progress_stream, reader.read_bytes, len(shards))
    writer = Writer(main, ledger, config, summary, LEDGER_KEY, JOURNAL_KEY)
    epoch = b"%d" % start.epoch

    def rows() -> dict[bytes, bytes | None]:
        return {EPOCH_KEY: epoch, WRITTEN_KEY: b"%d" % (time.time_ns() // 1_000_000)}

    run = Run(
        reader, router, shards, owner, writer, summary, progress, batch_size, start.epoch, start.catch_up_through, rows
    )
    try:
        completed = run.run(lines, stop)
        run.finish()
        # Every partition is durable at the checkpoint: the next run need not look at them.
        raw = main.get(JOURNAL_KEY)
        main.apply({CLEAN_KEY: clean_mark(start.epoch, None if raw is None else Checkpoint.decode(raw))})
    finally:
        summary.blank_lines = reader.blank_lines
        summary.held_back = reader.held_back
        progress.update(summary.entries, reader.read_bytes, force=True)
        progress.close()
    return completed


#: Lines read (apart) to weigh partitions before they are given to worker processes.
ASSIGN_WINDOW: Final = 5_000
