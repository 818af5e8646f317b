"""The embedded runner: the engine over a ``.jsonl`` journal, RocksDB state, a ledger file.

This is the product's default mode and the oracle the Kafka path is tested
against.

Durability order per batch: the batch's ledger lines are written and
fsync'ed, then one state transaction commits the batch's rows together with
the runner's own rows: the ledger's new length and the sha256 of its last
64 KiB (the *ledger mark*), how much of the journal is consumed (a
``JournalPosition``), and which journal lines were already dead-lettered. A crash
anywhere in between leaves ledger bytes the state never recorded; the next
run cuts them and regenerates exactly those lines, so the ledger never holds
a line twice and never loses one. A fresh state commits its mark (length 0)
before the first batch, so the same repair covers a crash in the first batch.

On start the ledger must be the one the state recorded: missing, shorter, or
different before the recorded length is refused (exit 2), never silently
continued. The state binds to the ledger's bytes, not its path, so a moved
ledger is accepted. The journal is resumed from the position when it starts
with the consumed bytes, else replayed whole (idempotent).
"""

import logging
import os
import stat
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, closing, contextmanager, suppress
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from ..core.engineconfig import EngineConfig
from ..core.partitioning import Router, assign
from ..exceptions import REBUILD, ConfigMismatchError, Interrupted, LedgerMismatchError, StateDirError
from ..host.journalfile import JournalPosition, JournalReader
from ..host.printable import shown
from ..host.stopsignals import Abandon, StopNow, StopSignals
from ..store.base import StateStore
from .coordinator import Run, RunPlan, RunSummary, Start
from .header import bind_config, check_format, has_engine_rows
from .ledgerfile import EMPTY_LEDGER, DiscardedLedger, Ledger, LedgerMark, check_ledger
from .ledgerfile import owned as hold_ledger
from .mainkeys import CLEAN_KEY, EPOCH_KEY, JOURNAL_KEY, JOURNAL_PATH_KEY, LEDGER_KEY, LEDGER_PATH_KEY, PARTITIONS_KEY
from .parts import Parts, check_state_parts, main_identity, make_again
from .parts import stamps as identity_stamps
from .paths import real
from .shard import LocalShard, ShardClient
from .statedir import (
    DEFAULT_PARTITIONS,
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

__all__ = ["ReplayOptions", "RunSummary", "replay"]

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
    store: StateStore, request: "_Request", created: bool
) -> tuple[EngineConfig, "Ledger | DiscardedLedger", int, int, Parts]:
    """Check the state, its parts (``parts``) and the ledger against each other; stamp a fresh state (and
    the identity of one of 1.0.0) before its first batch.
    ``out`` None: a dry run, whose records are not kept (a fresh state only); ``created``: the ledger file is
    the empty one this run's lock created (it was missing)."""
    out, journal, partitions = request.out, request.journal, request.options.partitions
    # Where ``recurrence explain`` reads records and entries back (informational: the ledger is
    # bound by its bytes, and an explain may name other paths).
    stamps: dict[bytes, bytes] = {} if out is None else {LEDGER_PATH_KEY: os.fsencode(real(out))}
    if journal != "-" and Path(journal).is_file():
        stamps[JOURNAL_PATH_KEY] = os.fsencode(real(journal))
    check_format(store, stamps)
    config = bind_config(store, request.options.config, stamps)
    parts = check_state_parts(request.state, store)
    stamps.update(identity_stamps(parts))
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
        return config, DiscardedLedger(), 0, count, parts
    if mark is None and has_engine_rows(store):
        raise LedgerMismatchError(
            "the state records no ledger mark (written by an older recurrence), so its ledger cannot be checked; "
            f"rebuild: {REBUILD}"
        )
    bound = store.get(LEDGER_PATH_KEY)  # the ledger the state last wrote, named when --out is another file
    cut = check_ledger(out, mark, None if bound is None else Path(os.fsdecode(bound)), created)
    if mark is None:
        # Before any batch: a crash in the first one is then repaired like any other.
        mark = EMPTY_LEDGER
        stamps[LEDGER_KEY] = mark.encode()
    if stamps:
        store.apply(stamps)
    # The uncommitted bytes (``cut``) are cut once every partition was checked (``Run.run``): a state refused
    # then leaves its ledger as it was.
    return config, Ledger(out, mark), cut, count, parts


def _behind(found: Mapping[int, Applied | None], epoch: int) -> tuple[int, int]:
    """Where the partition furthest behind stands (a crash left it behind the ledger), as ``parts`` read it."""
    lowest: tuple[int, int] | None = None
    for applied in found.values():
        at = (applied.offset, applied.line) if applied is not None and applied.epoch == epoch else (0, 0)
        lowest = at if lowest is None else min(lowest, at)
    return lowest if lowest is not None else (0, 0)


def _resume(main: StateStore, reader: JournalReader, summary: RunSummary, parts: Parts) -> Start:
    raw = main.get(JOURNAL_KEY)
    epoch_raw = main.get(EPOCH_KEY)
    epoch = 0 if epoch_raw is None else int(epoch_raw)
    if raw is None:
        return Start(epoch, 0, False)
    position = JournalPosition.decode(raw)
    clean = main.get(CLEAN_KEY) == clean_mark(epoch, position)
    behind = (position.offset, position.line) if clean or not parts.use else _behind(parts.applied, epoch)
    lagging = behind < (position.offset, position.line)
    if reader.resume(position, behind if lagging else None):
        summary.resumed = position
        if lagging:
            log.warning(
                "partitions behind the ledger after a crash: reading lines %d..%d again for them",
                behind[1] + 1,
                position.line,
            )
        log.info("resumed after line %d (%d bytes already applied)", position.line, position.offset)
        return Start(epoch, position.line if lagging else 0, False)
    if not position.offset:
        return Start(epoch, 0, False)
    if lagging:
        raise StateDirError(
            f"a crash left part of the state behind its ledger (it applied up to line {behind[1]}, the ledger holds "
            f"line {position.line}), and this journal does not start with the {position.offset:,} bytes the "
            "state read: replay the journal it was built from first (it catches up), then this one"
        )
    summary.replayed_whole = True
    log.info("the journal does not start with the %d bytes already applied: replaying it whole", position.offset)
    # A new epoch: partition positions of the old journal mean nothing in this one.
    return Start(epoch + 1, 0, not clean)


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


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to run a replay, beside what to read and where to write (``replay``)."""

    config: EngineConfig | None = None  # None: the state's own, or the defaults for a fresh state
    batch_size: int = DEFAULT_BATCH  # entries per durable commit
    jobs: int | None = None  # processes (None: ``default_jobs``)
    partitions: int | None = None  # of a new state (None: ``DEFAULT_PARTITIONS``)
    progress_stream: IO[str] | None = None  # the progress line's terminal (None: stderr)


@dataclass(frozen=True, slots=True)
class _Request:
    """What the caller asked for: the journal, the state, the ledger and how."""

    journal: str
    state: "StateDir | MemoryState"
    out: Path | None
    options: ReplayOptions


def replay(
    journal: str,
    state: "Path | MemoryState",
    out: Path | None,
    options: ReplayOptions = ReplayOptions(),
    stop: StopSignals | None = None,
) -> RunSummary:
    """Apply ``journal`` to the state directory ``state``, appending records to ``out`` (None: a dry run into
    a fresh state, records counted and not kept); see the module docstring. A ``MemoryState`` (tests, dry
    runs) runs in this process."""
    stop = stop or StopSignals()
    summary = RunSummary()
    started = time.monotonic()
    location = StateDir(state) if isinstance(state, Path) else state
    location.prepare()
    request = _Request(journal, location, out, options)
    processes = options.jobs if options.jobs is not None else default_jobs(journal)
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
            created = out is not None and held.enter_context(hold_ledger(out))
            if isinstance(location, StateDir) and out is not None and not holds_store(main_path(location.root)):
                # A new state: a ledger it cannot take is refused before the state directory is created, so a
                # refused run leaves no folder that looks like a state (``_open_ledger`` checks it again).
                check_ledger(out, None)
            # The journal is opened first: an unreadable one stops the run before the state is stamped.
            reader = held.enter_context(JournalReader(journal))
            stop.waiting = lambda: reader.waiting
            reader.before_wait = stop.check
            plan = held.enter_context(open_run(request, reader, workers, summary, created))
            completed = Run(plan, summary).run(stop)
    except StopNow:
        pass  # while resuming: waiting for the journal's first bytes
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
def open_run(
    request: _Request, reader: JournalReader, workers: "list[RemoteShard]", summary: RunSummary, created: bool
) -> Iterator[RunPlan]:
    """Open the main store and the ledger, check them against each other and the journal, decide where the
    run starts and which process runs which partitions: the run, described once (``RunPlan``).
    ``summary``: what the checks found (a ledger cut, a resume) is recorded in it."""
    where = shown(request.state.root) if isinstance(request.state, StateDir) else "in memory"
    with closing_store(request.state.open_main(), where) as main:
        config, ledger, summary.truncated_bytes, count, parts = _open_ledger(main, request, created)
        with closing(ledger):
            make_again(request.state, parts.again)
            existing = parts.use
            start = _resume(main, reader, summary, parts)
            router = Router(count)
            shards, owned, owner = _shards(request.journal, reader, router, workers)
            yield RunPlan(
                state=request.state,
                config=config,
                reader=reader,
                main=main,
                ledger=ledger,
                router=router,
                shards=shards,
                owned=owned,
                owner=owner,
                existing=tuple(existing),
                committed=parts.committed,
                deferred=parts.deferred,
                identity=None if (found := main_identity(main.get)) is None else found.id,
                start=start,
                batch_size=request.options.batch_size,
                progress_stream=request.options.progress_stream,
            )


def _shards(
    journal: str, reader: JournalReader, router: Router, workers: "list[RemoteShard]"
) -> tuple[tuple[ShardClient, ...], tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The shards that run the partitions, the partitions each owns, and each partition's shard."""
    count = router.partitions
    if not workers:
        return (LocalShard(),), (tuple(range(count)),), (0,) * count
    # Partitions go to processes by their share of the journal's next lines (``assign``: the busiest
    # process as light as can be found); a pipe cannot be read twice: round robin.
    weights = assignment_weights(journal, reader.read_bytes, router) if reader.total_bytes is not None else {}
    owned = [tuple(parts) for parts in assign(weights, count, len(workers)) if parts]
    for extra in workers[len(owned) :]:
        extra.close()
    owner = [0] * count
    for index, parts in enumerate(owned):
        for partition in parts:
            owner[partition] = index
    return tuple(workers[: len(owned)]), tuple(owned), tuple(owner)


#: Lines read (apart) to weigh partitions before they are given to worker processes.
ASSIGN_WINDOW: Final = 5_000
