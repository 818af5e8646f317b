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
import signal
import stat
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Final, Self

import orjson

from .archive import JOURNAL_PATH_KEY, LEDGER_PATH_KEY, FileArchive
from .engine import Engine
from .engineconfig import EngineConfig
from .exceptions import (
    Interrupted,
    LedgerMismatchError,
    SettingsError,
    StateDirError,
    UnusableError,
)
from .gcpolicy import full_collections_between_batches
from .journalfile import Checkpoint, JournalReader, Progress, check_journal, shown
from .patterns import PatternTracker, is_recurred
from .recordindex import index_record
from .regularfile import check_regular
from .state import key, row_cache
from .stateheader import HEADER_KEYS, ROW_LAYOUT, check_layout, check_pinned, config_of
from .store.base import RowCache, StateStore, Transaction
from .store.rocksdb import RocksStore
from .tally import Tally

log = logging.getLogger("recurrence.embedded")

DEFAULT_BATCH = 1000
TAIL_BYTES: Final = 64 * 1024

# Runner rows, beside the engine's: keys no engine namespace uses.
LEDGER_KEY: Final = key("ledger")
JOURNAL_KEY: Final = key("journal")
# When the last batch committed (the writer's clock, milliseconds since the epoch): what a follower
# shows as "written at" (``recurrence serve``, processor/follow.py), never read by the engine.
WRITTEN_KEY: Final = key("written")
_DIAGNOSED: Final = "dl"

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
        self._tail = (self._tail + data)[-TAIL_BYTES:]
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
    """Is ``target`` a (hard) link to a file of ``directory``?"""
    try:
        wanted = target.stat()
        with os.scandir(directory) as entries:
            return any(os.path.samestat(entry.stat(), wanted) for entry in entries)
    except OSError:
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


# -- signals -----------------------------------------------------------------------------------


class _StopNow(BaseException):
    """A stop requested while the runner waits for input: nothing is half done there.

    A BaseException, like KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


class _Abandon(BaseException):
    """Raised by a second signal wherever the runner is: the batch in progress is dropped."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


class StopSignals:
    """SIGINT/SIGTERM as a request to stop cleanly, for the ``with`` block (main thread only).

    The first signal lets the entry in progress finish and the batch so far
    become durable; while the runner is blocked reading input it ends the read
    at once. A second signal abandons the batch immediately: whatever part of
    it reached the ledger is cut by the next run.
    """

    SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self.waiting: Callable[[], bool] = lambda: False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.received is not None:
            self._restore()  # a third signal gets the default behaviour, wherever it lands
            raise _Abandon(number)
        self.received = number  # no logging here: a handler may interrupt a log call in progress
        if self.waiting():
            raise _StopNow

    def check(self) -> None:
        """Before blocking on input: a stop already requested ends the run here."""
        if self.received is not None:
            raise _StopNow


# -- the run -------------------------------------------------------------------------------


@dataclass
class RunSummary(Tally):
    blank_lines: int = 0
    seconds: float = 0.0
    truncated_bytes: int = 0
    # Resume: the checkpoint whose prefix was skipped; or replayed_whole when the state had one but
    # the journal does not start with it.
    resumed: Checkpoint | None = None
    replayed_whole: bool = False
    repeated_dead_letters: int = 0
    patterns: int = 0  # cross-scope pattern suggestions made by this run (``recurrence patterns``)

    def line(self) -> str:
        rate = self.entries / self.seconds if self.seconds > 0 else 0.0
        repeated = (
            f"; {self.repeated_dead_letters} dead letters already written by an earlier run were not repeated"
            if self.repeated_dead_letters
            else ""
        )
        patterns = f"; {self.patterns} new pattern suggestions" if self.patterns else ""
        return (
            f"recurrence replay: {self.entries} entries in {self.seconds:.2f}s ({rate:,.0f} entries/s); "
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
            return f"every entry ({self.entries}) had been dead-lettered by an earlier run; nothing was applied"
        code, count = max(self.dead_letters.items(), key=lambda item: (item[1], item[0]))
        return f"every entry ({self.entries}) was dead-lettered, most as {code} ({count}); nothing was applied"


def _diagnosed_key(line_number: int, entry: bytes) -> bytes:
    """This journal line, this text: dead-lettered once, never again (whatever a re-read would say)."""
    return key(_DIAGNOSED, hashlib.sha256(b"%d\n" % line_number + entry).hexdigest())


class _Batch:
    """Entries since the last commit: their ledger lines and state changes, committed together."""

    def __init__(
        self, store: StateStore, cache: RowCache, config: EngineConfig, ledger: Ledger, reader: JournalReader,
        summary: RunSummary,
    ) -> None:
        self.store, self.cache, self.config = store, cache, config
        self.ledger, self.reader, self.summary = ledger, reader, summary
        self.committed = reader.checkpoint()
        self._begin()

    def _begin(self) -> None:
        self.txn = Transaction(self.store, self.cache)
        self.engine = Engine(self.txn, self.config)
        self.patterns = PatternTracker(self.txn, self.config.pattern_scopes)
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.diagnosed: dict[bytes, bytes | None] = {}
        self.entries = 0

    def add(self, line_number: int, entry: bytes) -> None:
        summary = self.summary
        summary.entries += 1
        self.entries += 1
        for record in self.engine.process(entry, {"line": line_number}):
            if record.error is not None:
                if not self._first_diagnosis(line_number, entry):
                    summary.repeated_dead_letters += 1
                    continue
                log.debug("dead letter %s at line %d", record.error, line_number)
            # ``recurrence explain`` finds a record by id: the offset its line will have in the ledger.
            index_record(self.txn, record, b"%d" % (self.ledger.length + self.pending_bytes))
            self.pending.append(record.line + b"\n")
            self.pending_bytes += len(record.line) + 1
            summary.record(record)
            if is_recurred(record):
                suggestion = self.patterns.observe(record.data())
                if suggestion is not None:
                    summary.patterns += 1

    def _first_diagnosis(self, line_number: int, entry: bytes) -> bool:
        row = _diagnosed_key(line_number, entry)
        if row in self.diagnosed or self.store.get(row) is not None:
            return False
        self.diagnosed[row] = b""
        return True

    def commit(self) -> None:
        """Ledger lines durable first, then the state batch that records them, atomically."""
        checkpoint = self.reader.checkpoint()
        if not self.entries and not self.pending and checkpoint == self.committed:
            return
        if self.pending:
            self.ledger.append(b"".join(self.pending))
        mark = self.ledger.sync()
        self.txn.prepare()
        rows: dict[bytes, bytes | None] = {
            LEDGER_KEY: mark.encode(),
            JOURNAL_KEY: checkpoint.encode(),
            WRITTEN_KEY: b"%d" % (time.time_ns() // 1_000_000),
        }
        rows.update(self.diagnosed)
        try:
            self.txn.flush(rows)
        except StateDirError as error:
            raise StateDirError(
                f"{error}; this batch was not committed: free space (or fix the disk) and run again to resume"
            ) from error
        self.committed = checkpoint
        self._begin()


def _open_ledger(
    store: StateStore, out: Path, config: EngineConfig | None, journal: str
) -> tuple[EngineConfig, Ledger, int]:
    """Check the state and the ledger against each other; stamp a fresh state before its first batch."""
    # Where ``recurrence explain`` reads records and entries back (informational: the ledger is
    # bound by its bytes, and an explain may name other paths).
    stamps: dict[bytes, bytes] = {LEDGER_PATH_KEY: os.fsencode(_real(out))}
    if journal != "-" and Path(journal).is_file():
        stamps[JOURNAL_PATH_KEY] = os.fsencode(_real(journal))
    check_format(store, stamps)
    config = bind_config(store, config, stamps)
    raw = store.get(LEDGER_KEY)
    mark = None if raw is None else LedgerMark.decode(raw)
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
    return config, ledger, cut


def _resume(store: StateStore, reader: JournalReader, summary: RunSummary) -> None:
    raw = store.get(JOURNAL_KEY)
    if raw is None:
        return
    checkpoint = Checkpoint.decode(raw)
    if reader.resume(checkpoint):
        summary.resumed = checkpoint
        log.info("resumed after line %d (%d bytes already applied)", checkpoint.line, checkpoint.offset)
    elif checkpoint.offset:
        summary.replayed_whole = True
        log.info("the journal does not start with the %d bytes already applied: replaying it whole", checkpoint.offset)


def replay(
    journal: str,
    store: StateStore,
    out: Path,
    config: EngineConfig | None = None,
    batch_size: int = DEFAULT_BATCH,
    progress_stream: IO[str] | None = None,
    stop: StopSignals | None = None,
) -> RunSummary:
    """Apply ``journal`` to ``store``, appending records to ``out``; see the module docstring."""
    stop = stop or StopSignals()
    summary = RunSummary()
    started = time.monotonic()
    completed = False
    try:
        # The journal is opened first: an unreadable one stops the run before the state is stamped.
        with JournalReader(journal) as reader:
            config, ledger, summary.truncated_bytes = _open_ledger(store, out, config, journal)
            with closing(ledger):
                stop.waiting = lambda: reader.waiting
                reader.before_wait = stop.check
                completed = _run_with_progress(store, config, ledger, reader, batch_size, progress_stream, summary)
    except _Abandon as abandoned:
        summary.seconds = time.monotonic() - started
        raise ReplayInterrupted(abandoned.signal_number, summary, abandoned=True) from None
    summary.seconds = time.monotonic() - started
    if stop.received is not None and not completed:
        raise ReplayInterrupted(stop.received, summary)
    return summary


def _run_with_progress(
    store: StateStore,
    config: EngineConfig,
    ledger: Ledger,
    reader: JournalReader,
    batch_size: int,
    progress_stream: IO[str] | None,
    summary: RunSummary,
) -> bool:
    progress = Progress(reader.total_bytes, progress_stream)
    try:
        return _run(store, config, ledger, reader, batch_size, progress, summary)
    finally:
        summary.blank_lines = reader.blank_lines
        progress.update(summary.entries, reader.read_bytes, force=True)
        progress.close()


def _run(
    store: StateStore,
    config: EngineConfig,
    ledger: Ledger,
    reader: JournalReader,
    batch_size: int,
    progress: Progress,
    summary: RunSummary,
) -> bool:
    """Apply the journal batch by batch; False when a stop request ended it before its end."""
    try:
        _resume(store, reader, summary)
    except _StopNow:
        return False
    batch = _Batch(store, row_cache(), config, ledger, reader, summary)
    completed = True
    with full_collections_between_batches() as collections:
        try:
            for line_number, entry in reader:
                batch.add(line_number, entry)
                if batch.entries >= batch_size:
                    batch.commit()
                    collections.between_batches()
                progress.update(summary.entries, reader.read_bytes)
        except _StopNow:
            completed = False  # raised only while waiting for input: every entry read so far is whole in the batch
        batch.commit()
    return completed


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


def open_state(path: Path, must_exist: bool = False, read_only: bool = False) -> RocksStore:
    if must_exist and not path.is_dir():
        raise StateDirError(f"no state directory at {shown(path)}; run 'recurrence replay' first")
    # Durable writes: after a power cut the state never falls behind what it recorded of the ledger.
    return RocksStore.open(path, read_only=read_only, durable=not read_only)
