"""``replay --jobs N``: shards in worker processes, or in this process, behind one interface.

Workers are forked before this process opens any RocksDB or starts any
thread (a fork copies only the calling thread, and a lock another thread held
would stay locked in the child), so they start in milliseconds with every
module already imported. Each worker then waits for its assignment: the
partitions it owns. It talks to the coordinator over two pipes, one message
per batch each way (pickled), and never decides anything itself: it flushes
a batch only when told the batch is committed.

No worker outlives the coordinator: the kernel kills it when its parent dies
(``PR_SET_PDEATHSIG``), and it exits as soon as its input pipe is closed
(end of file) without flushing anything more. SIGINT and SIGTERM are the
coordinator's to handle (a terminal sends them to the whole process group):
workers ignore them and stop when the coordinator tells them to.

A worker that fails sends its error (class, message, traceback) before it
exits; the coordinator raises it again as the same kind of error (an
``UnusableError`` stays exit 2 with its one line; anything else is a bug,
exit 1 with the worker's traceback). A worker that dies without a word (kill
-9, the OOM killer) is ``WorkerLostError``, exit 2: nothing after the last
committed batch was kept, and the next run resumes.
"""

import contextlib
import ctypes
import fcntl
import gc
import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, Final

from .. import exceptions
from ..core.records import Emitted
from ..core.state import row_cache
from ..exceptions import UnusableError
from ..host.gcpolicy import defer_full_collections
from ..host.printable import error_line
from ..store.rocksdb import RocksStore
from .shard import BatchSpec, Line, OpenSpec, Results, Shard
from .statedir import Applied, MemoryState, PartitionStores, StateDir

log = logging.getLogger("recurrence.workers")

_PR_SET_PDEATHSIG: Final = 1
_F_SETPIPE_SZ: Final = 1031
_PIPE_BYTES: Final = 1 << 20
_DIED: Final = ("died",)
#: Seconds a worker is given to exit once its input is closed, before it is killed.
_EXIT_GRACE: Final = 5.0


class WorkerLostError(UnusableError):
    """A worker process died without reporting an error (killed)."""


class WorkerFailedError(RuntimeError):
    """A worker hit an internal error (a bug); carries its traceback."""


# -- the worker process --------------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)


def _worker_main(inbox: Connection, outbox: Connection) -> int:
    shard: Shard | None = None
    # The coordinator's policy (``gcpolicy``), which a fork does not carry into the child: no full
    # collection triggered by the row cache's churn, one between batches at most every few minutes. What
    # the fork brought along is frozen as it is, never scanned: collecting it first would cost each worker
    # ~20 ms at start and write to every page it shares with the coordinator.
    gc.freeze()
    collections = defer_full_collections()
    while True:
        # Between two batches, after the last reply went out: a due collection delays no answer.
        collections.between_batches()
        try:
            message = pickle.loads(inbox.recv_bytes())
        except EOFError:
            return 0  # the coordinator went away or gave up: flush nothing more
        kind = message[0]
        if kind == "batch":
            _, committed, spec, lines = message
            assert shard is not None
            if committed is not None:
                shard.commit(committed)
            reply: tuple[Any, ...] = ("results", spec.number, _plain(shard.process(spec, lines)))
        elif kind == "open":
            _, root, owned, spec, share = message
            # This process's part of the memory one process would use: caches scale with the scopes it owns.
            stores = PartitionStores(root, share=share)
            cache = row_cache(max(10_000, int(50_000 * share)))
            shard = Shard(stores.open, owned, spec, cache)
            reply = ("opened", shard.open())
        elif kind == "finish":
            _, committed = message
            if shard is not None:
                shard.finish(committed)
            outbox.send_bytes(pickle.dumps(("closed",), protocol=pickle.HIGHEST_PROTOCOL))
            return 0
        else:  # pragma: no cover - the coordinator sends only the kinds above
            raise AssertionError(f"unknown message {kind!r}")
        outbox.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


#: A batch's results as they cross the pipe: each record as a plain tuple of its fields.
_Plain = list[tuple[int, list[tuple[Any, ...]]]]
_tuple_new: Final = tuple.__new__


def _plain(results: Results) -> _Plain:
    """Pickling a named tuple calls back into Python for each record, twice (``__getnewargs__`` when
    pickled, the class's ``__new__`` when unpickled); a plain tuple is pickled in C. About 60% less pickle
    CPU on both sides of the pipe (a record is most of what crosses it)."""
    return [(number, [tuple(record) for record in records]) for number, records in results]


def _records(plain: _Plain) -> Results:
    # tuple.__new__ builds each Emitted in C, without the Python-level __new__ of a named tuple.
    return [(number, [_tuple_new(Emitted, record) for record in records]) for number, records in plain]


def _run_worker(parent: int, inbox: Connection, outbox: Connection) -> None:
    """The forked child: never returns into the parent's code."""
    code = 1
    try:
        _die_with_parent(parent)
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        code = _worker_main(inbox, outbox)
    except BaseException as error:
        with contextlib.suppress(Exception):
            mapped = exceptions.exit_code(error)
            report = ("error", type(error).__name__, error_line(error), mapped, traceback.format_exc())
            outbox.send_bytes(pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL))
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


# -- the coordinator's side -----------------------------------------------------------------------


def _pipe() -> tuple[int, int]:
    read, write = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(write, _F_SETPIPE_SZ, _PIPE_BYTES)
    return read, write


class RemoteShard:
    """A forked worker process, seen from the coordinator."""

    def __init__(
        self, process: "int | subprocess.Popen[bytes]", inbox: Connection, outbox: Connection, index: int
    ) -> None:
        # A forked child is reaped by pid; a started interpreter through its Popen (which would otherwise
        # reap it behind our back when it is collected).
        self._popen = process if isinstance(process, subprocess.Popen) else None
        self.pid = process if isinstance(process, int) else process.pid
        self.index = index
        self._inbox = inbox  # we write
        self._outbox = outbox  # we read, through the thread below
        self._replies: queue.Queue[Any] = queue.Queue()
        self._status: int | None = None
        self._reader: threading.Thread | None = None
        self.share = 1.0  # of the memory budget one process would have

    def start_reading(self) -> None:
        # A thread drains the worker's replies while this process blocks writing the next batch to it: the
        # worker never waits on a full pipe for the coordinator, so neither can wait on the other.
        self._reader = threading.Thread(target=self._read, name=f"recurrence-worker-{self.index}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._outbox.recv_bytes()
            except (EOFError, OSError):
                self._replies.put(_DIED)
                return
            self._replies.put(pickle.loads(data))

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._inbox.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, ConnectionResetError):
            self._expect("")  # the worker is gone: say why

    def _expect(self, kind: str) -> tuple[Any, ...]:
        reply: tuple[Any, ...] = self._replies.get()
        if reply[0] == kind:
            return reply
        if reply[0] == "error":
            _, name, message, code, trace = reply
            self._reap()
            kind_of = getattr(exceptions, name, None)
            if code == exceptions.EXIT_UNUSABLE:
                if isinstance(kind_of, type) and issubclass(kind_of, UnusableError):
                    raise kind_of(message)
                raise UnusableError(message)  # an OSError: a path or a disk
            raise WorkerFailedError(f"worker {self.index} failed:\n{trace}")
        status = self._reap()
        how = f"was killed by signal {-status}" if status is not None and status < 0 else f"exited ({status})"
        raise WorkerLostError(
            f"worker process {self.index} (pid {self.pid}) {how}; nothing after the last committed batch was kept: "
            "run again to resume"
        )

    def _reap(self, block: bool = True) -> int | None:
        if self._status is None and self._popen is not None:
            self._status = self._popen.wait() if block else self._popen.poll()
        elif self._status is None:
            try:
                pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return self._status
            if pid:
                self._status = os.waitstatus_to_exitcode(status)
        return self._status

    def open(
        self, state: "StateDir | MemoryState", owned: Sequence[int] | None, spec: OpenSpec
    ) -> dict[int, Applied | None]:
        assert owned is not None and isinstance(state, StateDir), "worker processes need a state directory"
        self._send(("open", state.root, list(owned), spec, self.share))
        applied: dict[int, Applied | None] = self._expect("opened")[1]
        return applied

    def submit(self, spec: BatchSpec, lines: Sequence[Line], committed: int | None) -> None:
        self._send(("batch", committed, spec, list(lines)))

    def results(self, number: int) -> Results:
        reply = self._expect("results")
        assert reply[1] == number, (reply[1], number)
        return _records(reply[2])

    def finish(self, committed: int | None) -> None:
        self._send(("finish", committed))

    def finished(self) -> None:
        self._expect("closed")
        self.close()

    def close(self) -> None:
        """Close our end of its input (it exits at end of file), wait briefly, kill it if need be."""
        with contextlib.suppress(OSError):
            self._inbox.close()
        # Its replies end (end of file) when it exits: that wakes us at once, where polling would lose
        # up to a polling interval per worker at the end of every run.
        deadline = time.monotonic() + _EXIT_GRACE
        if self._reader is not None:
            self._reader.join(_EXIT_GRACE)
        while self._reap(block=False) is None:
            if time.monotonic() >= deadline:
                self.abort()
                break
            time.sleep(0.001)
        with contextlib.suppress(OSError):
            self._outbox.close()

    def abort(self) -> None:
        if self._reap(block=False) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap()


def _fork_is_safe() -> bool:
    """A fork copies only the calling thread: safe while no other thread (RocksDB's included) exists."""
    return threading.active_count() == 1 and not RocksStore.opened_in_process


def _start(to_read: int, from_write: int, ours: list[int], fork: bool) -> "int | subprocess.Popen[bytes]":
    if not fork:
        # A fresh interpreter (a process that already ran RocksDB or other threads: tests, embedding).
        command = [sys.executable, "-m", "recurrence_ledger.processor.embedded.workers", str(to_read), str(from_write)]
        return subprocess.Popen(command, pass_fds=(to_read, from_write), close_fds=True)
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd in ours:
            with contextlib.suppress(OSError):
                os.close(fd)
        _run_worker(parent, Connection(to_read, writable=False), Connection(from_write, readable=False))
    return pid


def fork_workers(count: int) -> list[RemoteShard]:
    """``count`` worker processes, each waiting for its partitions. Call before opening any store: they are
    forked then (milliseconds, every module imported); else each starts a fresh interpreter."""
    fork = _fork_is_safe()
    workers: list[RemoteShard] = []
    ours: list[int] = []  # the coordinator's pipe ends so far: a child closes its copies
    try:
        for index in range(count):
            to_read, to_write = _pipe()
            from_read, from_write = _pipe()
            started = _start(to_read, from_write, [*ours, to_write, from_read], fork)
            os.close(to_read)
            os.close(from_write)
            ours += [to_write, from_read]
            workers.append(
                RemoteShard(started, Connection(to_write, readable=False), Connection(from_read, writable=False), index)
            )
    except BaseException:
        for worker in workers:
            worker.abort()
        raise
    for worker in workers:
        worker.share = 1 / count
        worker.start_reading()
    return workers


if __name__ == "__main__":  # a worker in a fresh interpreter (see ``fork_workers``)
    _run_worker(
        os.getppid(), Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    )
