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

import errno
import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import orjson

from .archive import JOURNAL_PATH_KEY, LEDGER_PATH_KEY, FileArchive
from .engine import Engine
from .engineconfig import EngineConfig
from .exceptions import (
    ConfigMismatchError,
    Interrupted,
    LedgerMismatchError,
    SettingsError,
    StateDirError,
    UnusableError,
)
from .jobs.coordinator import Run, RunSummary, Writer
from .jobs.shard import LocalShard, ShardClient
from .journalfile import Checkpoint, JournalReader, Progress, check_journal, shown
from .partitioning import Router, assign
from .regularfile import check_regular
from .state import key
from .statedir import (
    APPLIED_KEY,
    DEFAULT_PARTITIONS,
    EPOCH_KEY,
    PARTITIONS_KEY,
    Applied,
    MemoryState,
    StateDir,
    closing_store,
    open_view,
    partition_count,
)
from .stateheader import HEADER_KEYS, ROW_LAYOUT, check_layout, check_pinned, config_of
from .stopsignals import Abandon, StopNow, StopSignals
from .store.base import StateStore, Transaction

if TYPE_CHECKING:
    from .jobs.workers import RemoteShard

__all__ = ["RunSummary", "StopSignals", "open_state", "replay", "statistics"]

log = logging.getLogger("recurrence.embedded")

DEFAULT_BATCH = 1000
TAIL_BYTES: Final = 64 * 1024

# Runner rows, beside the engine's: keys no engine namespace uses.
LEDGER_KEY: Final = key("ledger")
JOURNAL_KEY: Final = key("journal")
# When the last batch committed (the writer's clock, milliseconds since the epoch): what a follower
# shows as "written at" (``recurrence serve``, processor/web/follow.py), never read by the engine.
WRITTEN_KEY: Final = key("written")

_REBUILD: Final = (
    "restore the ledger file the state wrote, or rebuild: replay the journal into a fresh --state with a fresh --out"
)


class LedgerWriteError(UnusableError):
    """The ledger cannot be written or made durable (disk full, file too large, I/O error)."""


class ReplayInterrupted(Interrupted):
    """A signal stopped the replay; ``summary`` is what this run did until then."""

    def __init__(self, signal_number: int, summary: "RunSummary", abandoned: bool = False) -> None:
        super().__init__(signal_number)
        self.summary = summary
        self.abandoned = abandoned


# -- state stamps --------------------------------------------------------------------------


_NEW_STATE: Final = "rebuild it: replay the journal into a fresh --state with a fresh --out"
_KEEP_SETTING: Final = "use a fresh --state directory to change it"


def check_format(store: StateStore, stamps: dict[bytes, bytes] | None = None) -> None:
    """Refuse a state written in another row layout; stamp a new one (into ``stamps`` if given)."""
    rows = check_layout(store.get, "the state", _NEW_STATE)
    if rows and next(store.iterate_prefix(b""), None) is not None:
        raise StateDirError(
            f"the state was written by another version of recurrence (no layout version, this one reads "
            f"{ROW_LAYOUT.decode()!r}); {_NEW_STATE}"
        )
    _stamp(store, stamps, rows)


def bind_config(
    store: StateStore, config: EngineConfig | None, stamps: dict[bytes, bytes] | None = None
) -> EngineConfig:
    """Pin the engine configuration to the state: derived views depend on it."""
    if config is None:
        return config_of(store.get, "the state", _NEW_STATE)
    _stamp(store, stamps, check_pinned(store.get, config.pinned(), "the state", _KEEP_SETTING))
    return config


def _stamp(store: StateStore, stamps: dict[bytes, bytes] | None, rows: dict[bytes, bytes]) -> None:
    if stamps is None:
        store.apply(rows)
    else:
        stamps.update(rows)


def _has_engine_rows(store: StateStore) -> bool:
    # Keys are sorted and only two stamps can come first, so three rows decide it.
    return any(row_key not in HEADER_KEYS for row_key, _ in islice(store.iterate_prefix(b""), 3))


# -- the ledger file ---------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class LedgerMark:
    """What the state knows of its ledger: the committed length and the sha256 of the bytes before it."""

    length: int
    tail_sha256: str  # of the last min(length, TAIL_BYTES) committed bytes

    def encode(self) -> bytes:
        return orjson.dumps([self.length, self.tail_sha256])

    @classmethod
    def decode(cls, raw: bytes) -> "LedgerMark":
        length, tail = orjson.loads(raw)
        return cls(int(length), str(tail))


EMPTY_LEDGER: Final = LedgerMark(0, _sha256(b""))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LedgerWriteError(f"cannot read the ledger {shown(path)}: {error.strerror or error}") from error


def _read_tail(path: Path, end: int) -> bytes:
    start = max(0, end - TAIL_BYTES)
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start)
    except OSError as error:
        raise LedgerWriteError(f"cannot read the ledger {shown(path)}: {error.strerror or error}") from error


def check_ledger(path: Path, mark: LedgerMark | None) -> int:
    """How many uncommitted bytes to cut from the ledger; refuses a ledger the state did not write."""
    size = _size(path)
    where = shown(path)
    if mark is None:
        if size:
            raise LedgerMismatchError(
                f"the ledger {where} already holds {size:,} bytes but the state is new, so its records would be "
                "written a second time; pass the --state that wrote it, or rebuild: a fresh --state with a fresh "
                "(absent or empty) --out"
            )
        return 0
    if size is None:
        if mark.length == 0:
            return 0
        raise LedgerMismatchError(
            f"the ledger {where} is missing, but the state recorded {mark.length:,} bytes of it; {_REBUILD}"
        )
    if size < mark.length:
        raise LedgerMismatchError(
            f"the ledger {where} holds {size:,} bytes, fewer than the {mark.length:,} the state recorded "
            f"(truncated or replaced); {_REBUILD}"
        )
    if _sha256(_read_tail(path, mark.length)) != mark.tail_sha256:
        raise LedgerMismatchError(
            f"the ledger {where} is not the one the state wrote: its bytes before offset {mark.length:,} differ "
            f"from what the state recorded (rewritten, cut and appended to, or another file); {_REBUILD}"
        )
    return size - mark.length


class Ledger:
    """The ledger file opened for appending, and the mark it will have once synced."""

    def __init__(self, path: Path, mark: LedgerMark) -> None:
        self.path = path
        self.length = mark.length
        self._tail = _read_tail(path, mark.length) if mark.length else b""
        self._dirty = False
        created = not path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if created:
                _sync_directory(path.parent)  # the new file's name is durable before anything refers to it
        except OSError as error:
            raise self._error(error) from error

    def cut(self, length: int) -> None:
        """Drop bytes after ``length``: lines whose state change never committed."""
        try:
            os.ftruncate(self._fd, length)
        except OSError as error:
            raise self._error(error) from error

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as error:
            raise self._error(error) from error
        self.length += len(data)
        # A batch is usually longer than the tail: keep its end without copying the whole batch again.
        self._tail = data[-TAIL_BYTES:] if len(data) >= TAIL_BYTES else (self._tail + data)[-TAIL_BYTES:]
        self._dirty = True

    def sync(self) -> LedgerMark:
        """Make every appended byte durable; the mark the state may now record."""
        if self._dirty:
            try:
                os.fsync(self._fd)
            except OSError as error:
                raise self._error(error) from error
            self._dirty = False
        return LedgerMark(self.length, _sha256(self._tail))

    def close(self) -> None:
        os.close(self._fd)

    def _error(self, error: OSError) -> LedgerWriteError:
        if error.errno in _FULL:
            advice = "free space (or raise the file size limit)"
        else:
            advice = "fix the path, its permissions or the disk"
        return LedgerWriteError(
            f"cannot write the ledger {shown(self.path)}: {error.strerror or error}; nothing after the last "
            f"committed batch was kept: {advice} and run again to resume (the rerun cuts any partial line)"
        )


class DiscardedLedger:
    """The ledger of a dry run (``recurrence tune``): records are counted, not kept. Its mark can never
    match a real ledger's bytes, so the state it leaves refuses any ledger given to it later."""

    DISCARDED: Final = "discarded by a dry run"

    def __init__(self) -> None:
        self.length = 0

    def append(self, data: bytes) -> None:
        self.length += len(data)

    def sync(self) -> LedgerMark:
        return LedgerMark(self.length, self.DISCARDED)

    def close(self) -> None:
        return None


# A full disk, a quota, a file size limit (RLIMIT_FSIZE makes writes fail with EFBIG).
_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _sync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- paths -------------------------------------------------------------------------------------


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _same_file(first: str | Path, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return _real(first) == _real(second)


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def _linked_into(directory: Path, target: Path) -> bool:
    """Is ``target`` a (hard) link to a file of ``directory`` or of a folder inside it (the stores')?"""
    try:
        wanted = target.stat()
    except OSError:
        return False
    for folder, _, names in os.walk(directory):
        for name in names:
            with suppress(OSError):
                if os.path.samestat(os.stat(os.path.join(folder, name)), wanted):
                    return True
    return False


def check_paths(journal: str, state: Path, out: Path) -> None:
    """Refuse an unreadable journal, or --out that is the journal or part of the state, before any write.

    A ledger appended to its own journal reads its records back forever; one
    inside the state directory corrupts RocksDB. Symbolic links are resolved
    and existing files compared by identity, so a link or hard link is caught.
    """
    check_journal(journal)
    state_real, out_real = _real(state), _real(out)
    if journal != "-" and _same_file(journal, out):
        raise SettingsError(f"--out {shown(out)} is the journal itself; write the ledger to another file")
    if _inside(out_real, state_real) or _inside(state_real, out_real) or _linked_into(state, out):
        raise SettingsError(
            f"--out {shown(out)} and --state {shown(state)} overlap; keep the ledger outside the state directory"
        )
    if journal != "-" and _inside(_real(journal), state_real):
        raise SettingsError(f"the journal {shown(journal)} is inside --state {shown(state)}; move it out")
    try:
        mode = out.stat().st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise SettingsError(
            f"--out {shown(out)} is not a regular file; the ledger must be one (it is checked and repaired in place)"
        )


# -- the run -------------------------------------------------------------------------------

#: A regular-file journal below this size runs in one process unless --jobs says otherwise: forking
#: and opening the partitions would cost more than a second process saves.
SMALL_JOURNAL_BYTES: Final = 1 << 20
#: main: [epoch, checkpoint] when a run ended with every partition durable at that checkpoint.
CLEAN_KEY: Final = key("clean")


def default_jobs(journal: str) -> int:
    """The cores this process may use, or 1 for a small journal file."""
    if journal != "-":
        with suppress(OSError):
            info = os.stat(journal)
            if stat.S_ISREG(info.st_mode) and info.st_size < SMALL_JOURNAL_BYTES:
                return 1
    return len(os.sched_getaffinity(0))


def _open_ledger(
    store: StateStore, out: Path | None, config: EngineConfig | None, journal: str, partitions: int | None
) -> tuple[EngineConfig, "Ledger | DiscardedLedger", int, int]:
    """Check the state and the ledger against each other; stamp a fresh state before its first batch.
    ``out`` None: a dry run, whose records are not kept (a fresh state only)."""
    # Where ``recurrence explain`` reads records and entries back (informational: the ledger is
    # bound by its bytes, and an explain may name other paths).
    stamps: dict[bytes, bytes] = {} if out is None else {LEDGER_PATH_KEY: os.fsencode(_real(out))}
    if journal != "-" and Path(journal).is_file():
        stamps[JOURNAL_PATH_KEY] = os.fsencode(_real(journal))
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
        if raw is not None or _has_engine_rows(store):
            raise StateDirError("a dry run needs a fresh state: its records are not kept")
        store.apply(stamps)
        return config, DiscardedLedger(), 0, count
    if mark is None and _has_engine_rows(store):
        raise LedgerMismatchError(
            "the state records no ledger mark (written by an older recurrence), so its ledger cannot be checked; "
            "rebuild: replay the journal into a fresh --state with a fresh --out"
        )
    cut = check_ledger(out, mark)
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


def _clean_mark(epoch: int, checkpoint: Checkpoint | None) -> bytes:
    return orjson.dumps([epoch, None if checkpoint is None else [checkpoint.offset, checkpoint.line]])


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
    main: StateStore, state: "StateDir | MemoryState", reader: JournalReader, summary: RunSummary,
    existing: list[int],
) -> _Start:
    raw = main.get(JOURNAL_KEY)
    epoch_raw = main.get(EPOCH_KEY)
    epoch = 0 if epoch_raw is None else int(epoch_raw)
    if raw is None:
        return _Start(epoch, 0, False)
    checkpoint = Checkpoint.decode(raw)
    clean = main.get(CLEAN_KEY) == _clean_mark(epoch, checkpoint)
    behind = (checkpoint.offset, checkpoint.line) if clean or not existing else _behind(state, existing, epoch)
    lagging = behind < (checkpoint.offset, checkpoint.line)
    if reader.resume(checkpoint, behind if lagging else None):
        summary.resumed = checkpoint
        if lagging:
            log.warning(
                "partitions behind the ledger after a crash: reading lines %d..%d again for them",
                behind[1] + 1, checkpoint.line,
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
    location.refuse_old_layout()
    processes = jobs if jobs is not None else default_jobs(journal)
    if isinstance(location, MemoryState):
        processes = 1
    workers: list[RemoteShard] = []
    if processes > 1:
        from .jobs.workers import fork_workers  # noqa: PLC0415 - one process needs none of it (pipes, threads)

        # Forked before anything else is opened (no store, no thread): see ``workers``.
        workers = fork_workers(processes)
    completed = False
    try:
        # The journal is opened first: an unreadable one stops the run before the state is stamped.
        with JournalReader(journal) as reader, _main_store(location) as main:
            completed = _replay(journal, location, out, config, batch_size, progress_stream, stop, partitions,
                                reader, main, workers, summary)
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
    journal: str, state: "StateDir | MemoryState", out: Path | None, config: EngineConfig | None,
    batch_size: int,
    progress_stream: IO[str] | None, stop: StopSignals, partitions: int | None, reader: JournalReader,
    main: StateStore, workers: "list[RemoteShard]", summary: RunSummary,
) -> bool:
    config, ledger, summary.truncated_bytes, count = _open_ledger(main, out, config, journal, partitions)
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
            return _run(state, config, batch_size, progress_stream, stop, reader, lines, main, ledger, summary,
                        start, router, shards, owned, owner, existing)
        except BaseException:
            for shard in shards:
                shard.abort()
            raise


def _run(
    state: "StateDir | MemoryState", config: EngineConfig, batch_size: int, progress_stream: IO[str] | None,
    stop: StopSignals, reader: JournalReader, lines: Iterator[tuple[int, bytes]], main: StateStore,
    ledger: "Ledger | DiscardedLedger", summary: RunSummary, start: "_Start", router: Router,
    shards: list[ShardClient], owned: list[list[int]], owner: list[int], existing: list[int],
) -> bool:
    for shard, parts in zip(shards, owned, strict=True):
        shard.open(state, config, None if isinstance(shard, LocalShard) else parts, existing, start.sync_first)
    summary.processes = len(shards)
    progress = Progress(reader.total_bytes, progress_stream, reader.read_bytes, len(shards))
    writer = Writer(main, ledger, config, summary, LEDGER_KEY, JOURNAL_KEY)
    epoch = b"%d" % start.epoch

    def rows() -> dict[bytes, bytes | None]:
        return {EPOCH_KEY: epoch, WRITTEN_KEY: b"%d" % (time.time_ns() // 1_000_000)}

    run = Run(reader, router, shards, owner, writer, summary, progress, batch_size, start.epoch,
              start.catch_up_through, rows)
    try:
        completed = run.run(lines, stop)
        run.finish()
        # Every partition is durable at the checkpoint: the next run need not look at them.
        raw = main.get(JOURNAL_KEY)
        main.apply({CLEAN_KEY: _clean_mark(start.epoch, None if raw is None else Checkpoint.decode(raw))})
    finally:
        summary.blank_lines = reader.blank_lines
        progress.update(summary.entries, reader.read_bytes, force=True)
        progress.close()
    return completed


#: Lines read (apart) to weigh partitions before they are given to worker processes.
ASSIGN_WINDOW: Final = 5_000


# -- read side -----------------------------------------------------------------------------


def statistics(store: StateStore, scope_id: str | None, top: int | None) -> list[dict[str, Any]]:
    check_layout(store.get, "the state", _NEW_STATE)
    config = bind_config(store, None)
    engine = Engine(Transaction(store), config)
    return [s.model_dump(mode="json") for s in engine.statistics(scope_id, top)]


def open_archive(store: StateStore, ledger: Path | None = None, journal: Path | None = None) -> FileArchive:
    """The ledger and journal that ``explain`` and ``serve`` read back, checked before anything is read.

    Each must be a regular file (given, or the one the state last wrote and read); the ledger must be the
    state's, by the same mark ``replay`` checks: a ledger that is shorter than the state recorded, or differs
    before that length, is refused (LedgerMismatchError). A missing one is not an error: the explanation then
    says what the state alone can (the records it names are shown as not readable).
    """
    archive = FileArchive(store, ledger, journal)
    for path, given, what in ((archive.ledger, ledger, "--out"), (archive.journal, journal, "--journal")):
        if path is not None:
            check_regular(path, what if given else f"the state's {what[2:]}", must_exist=False)
    if archive.ledger is not None and archive.ledger.exists():
        raw = store.get(LEDGER_KEY)
        check_ledger(archive.ledger, None if raw is None else LedgerMark.decode(raw))
    return archive


def open_state(path: Path, must_exist: bool = False, read_only: bool = False) -> StateStore:
    """The state for reading (``StateView``): every command but ``replay``, which opens its stores itself."""
    if must_exist and not path.is_dir():
        raise StateDirError(f"no state directory at {shown(path)}; run 'recurrence replay' first")
    del read_only  # readers never write; kept for callers that say so
    return open_view(path)
