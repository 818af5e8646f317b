"""Following a state that a replay is writing (``processor/web/follow.py``): views at batch boundaries, never stale.

The writer is the real CLI in another process, as an operator runs it beside
``recurrence serve``. Every view the follower opens must be the state as of
one committed batch: its statistics equal those of an in-memory replay of
exactly the journal lines its position says were applied. After the writer
ends, the follower reaches the final state.
"""

import asyncio
import subprocess
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest

from devkit.localrun import replay_command
from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.embedded.runner import replay
from recurrence_ledger.processor.embedded.statedir import MemoryState, main_path
from recurrence_ledger.processor.embedded.views import open_view
from recurrence_ledger.processor.exceptions import StateDirError
from recurrence_ledger.processor.store.base import StateStore
from recurrence_ledger.processor.store.rocksdb import RocksStore
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.web.follow import (
    Follower,
    StateMark,
    files_signature,
    follow,
    follow_state,
    state_mark,
)


def _journal(path: Path, entries: int, seed: int = 3) -> list[bytes]:
    lines = [
        line + b"\n" for line in generate(JournalSpec(entries=entries, scopes=6, seed=seed, experiences_per_scope=8))
    ]
    path.write_bytes(b"".join(lines))
    return lines


def _replay(journal: Path, state: Path, ledger: Path, batch: int = 1000, jobs: int = 1) -> subprocess.Popen[bytes]:
    argv = replay_command(journal, state, ledger, "--batch", str(batch), "--jobs", str(jobs))
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _replayed_head(tmp_path: Path, entries: int, seed: int, head: int) -> tuple[Path, Path, Path, list[bytes]]:
    """A journal of ``entries`` lines whose first ``head`` a replay has committed: the journal, the state,
    the ledger and the journal's lines (the rest is for the test to feed)."""
    journal, state, ledger = tmp_path / "j.jsonl", tmp_path / "state", tmp_path / "l.jsonl"
    lines = _journal(journal, entries, seed=seed)
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"".join(lines[:head]))
    assert _replay(first, state, ledger).wait(timeout=120) == 0
    return journal, state, ledger, lines


def _feed_in_step(writer: "subprocess.Popen[bytes]", lines: list[bytes], ends: list[int], viewed: "_Viewed") -> None:
    """The journal into the writer's stdin up to each batch end in turn, then its end.

    A batch's partition rows are flushed when the next batch arrives (or at the end), so once a batch is
    written the follower can open a view of the one before: the next is written only after it has.
    """
    assert writer.stdin is not None
    fed = 0
    for index, end in enumerate(ends):
        writer.stdin.write(b"".join(lines[fed:end]))
        writer.stdin.flush()
        fed = end
        if index:
            viewed.wait_for(ends[index - 1], writer)
    writer.stdin.write(b"".join(lines[fed:]))
    writer.stdin.close()


class _Viewed:
    """The last journal line a view opened by the follower stands at, shared with the feeder."""

    def __init__(self, line: int) -> None:
        self.line = line
        self._changed = threading.Condition()

    def saw(self, line: int) -> None:
        with self._changed:
            self.line = line
            self._changed.notify_all()

    def wait_for(self, line: int, writer: "subprocess.Popen[bytes]") -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.line >= line or writer.poll() is not None, timeout=120)


def _as_of(lines: list[bytes], mark: StateMark, tmp: Path) -> list[dict[str, object]]:
    """Statistics of an in-memory replay of the first ``mark.line`` lines (the oracle for a view)."""
    prefix = tmp / f"prefix-{mark.line}.jsonl"
    prefix.write_bytes(b"".join(lines[: mark.line]))
    state = MemoryState()
    replay(str(prefix), state, tmp / f"ledger-{mark.line}.jsonl")
    return statistics(state.view(), None, 20)


def test_the_mark_is_the_checkpoint_and_the_commit_time(tmp_path: Path) -> None:
    journal, state, ledger = tmp_path / "j.jsonl", tmp_path / "state", tmp_path / "l.jsonl"
    lines = _journal(journal, 300)
    before = time.time_ns() // 1_000_000
    writer = _replay(journal, state, ledger)
    assert writer.wait(timeout=120) == 0, writer.stderr
    after = time.time_ns() // 1_000_000
    store = open_state(state, must_exist=True)
    try:
        mark = state_mark(store)
    finally:
        store.close()
    assert (mark.line, mark.offset, mark.ledger_bytes) == (len(lines), journal.stat().st_size, ledger.stat().st_size)
    assert mark.written_ms is not None and before <= mark.written_ms <= after
    body = mark.body()
    assert body["journal"] == {"line": len(lines), "offset": journal.stat().st_size}
    assert isinstance(body["written_at"], str) and body["written_at"].endswith("Z")
    assert mark.etag != StateMark(mark.line, mark.offset, mark.ledger_bytes, mark.written_ms + 1).etag


def test_opening_a_view_changes_nothing_the_signature_watches(tmp_path: Path) -> None:
    journal, state, ledger = tmp_path / "j.jsonl", tmp_path / "state", tmp_path / "l.jsonl"
    _journal(journal, 200)
    assert _replay(journal, state, ledger).wait(timeout=120) == 0
    before = files_signature(state)
    for _ in range(3):
        open_view(state, follower=True).close()
    assert files_signature(state) == before
    # a commit does change it
    store = RocksStore.open(main_path(state))
    store.apply({b'["written"]': b"1"})
    store.close()
    assert files_signature(state) != before
    assert files_signature(tmp_path / "gone") is None


def test_every_view_is_one_committed_batch_and_the_last_is_the_end(tmp_path: Path) -> None:
    _, state, ledger, lines = _replayed_head(tmp_path, 3000, 9, head=200)
    follower = follow_state(state)
    assert follower.mark.line == 200
    marks: list[StateMark] = []
    checked: list[int] = []
    # Resumes after line 200, in batches of 400 fed through a pipe (a batch commits when its 400th line
    # arrives); the feeder waits for a view of each batch before it writes the one after next, so views
    # open between batches however fast or busy the machine: a view is kept when every partition stands
    # at the same batch (processor/embedded/statedir.py).
    viewed = _Viewed(200)
    writer = subprocess.Popen(
        replay_command("-", state, ledger, "--batch", "400"),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    ends = list(range(600, len(lines), 400))
    feeder = threading.Thread(target=_feed_in_step, args=(writer, lines, ends, viewed), daemon=True)
    feeder.start()
    try:
        while writer.poll() is None or follower.changed():
            if follower.changed():
                seen, view, mark = follower.open_next()
                follower.replace(seen, view, mark).close()
                marks.append(mark)
                # a few views are checked against the oracle while the writer goes on
                if len(checked) < 3 and mark.line not in checked and 200 < mark.line < len(lines):
                    assert statistics(view, None, 20) == _as_of(lines, mark, tmp_path), f"view at line {mark.line}"
                    checked.append(mark.line)
                viewed.saw(mark.line)
            time.sleep(0.02)
    except BaseException:
        writer.kill()  # the feeder waits on it: let both go, and show what failed here
        raise
    finally:
        feeder.join(timeout=120)
    assert writer.wait(timeout=120) == 0, writer.stderr
    # (a batch can be viewed twice: the main store changes again when the next batch's ledger lines commit)
    assert sorted({m.line for m in marks} & set(ends[:-1])) == ends[:-1], "a batch went by without a view of it"
    assert len(checked) == 3
    assert follower.mark.line == len(lines) and follower.mark.ledger_bytes == ledger.stat().st_size
    assert [m.line for m in marks] == sorted(m.line for m in marks)
    final = open_state(state, must_exist=True)
    try:
        assert statistics(follower.view, None, 20) == statistics(final, None, 20)
    finally:
        final.close()
        follower.close()


def test_follow_hands_each_new_view_to_the_server_and_reaches_the_end(tmp_path: Path) -> None:
    journal, state, ledger, lines = _replayed_head(tmp_path, 1500, 4, head=100)
    follower = follow_state(state)
    served: list[tuple[StateStore, StateMark]] = []

    async def scenario() -> None:
        task = asyncio.create_task(
            follow(follower, lambda view, mark: served.append((view, mark)), interval=0.05, pace=lambda: 0.2)
        )
        writer = _replay(journal, state, ledger, batch=100)
        while writer.poll() is None:
            await asyncio.sleep(0.05)
        assert writer.returncode == 0
        deadline = time.monotonic() + 10
        while follower.mark.line != len(lines) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(scenario())
    try:
        assert served and served[-1][1] == follower.mark and follower.mark.line == len(lines)
        assert served[-1][0] is follower.view
        final = open_state(state, must_exist=True)
        try:
            assert statistics(follower.view, None, 20) == statistics(final, None, 20)
        finally:
            final.close()
    finally:
        follower.close()


def test_a_view_that_cannot_open_leaves_the_last_one_served(tmp_path: Path) -> None:
    journal, state, ledger = tmp_path / "j.jsonl", tmp_path / "state", tmp_path / "l.jsonl"
    _journal(journal, 100)
    assert _replay(journal, state, ledger).wait(timeout=120) == 0
    opened = [0]

    def flaky() -> StateStore:
        opened[0] += 1
        if opened[0] == 2:
            raise StateDirError("gone")
        return open_view(state, follower=True)

    changes = iter(range(1000))
    follower = Follower(flaky, lambda: next(changes))  # every look sees a change
    first = follower.view
    replaced: list[StateMark] = []

    async def scenario() -> None:
        task = asyncio.create_task(follow(follower, lambda _, mark: replaced.append(mark), 0.01, lambda: 0.01))
        deadline = time.monotonic() + 10
        while not replaced and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    try:
        assert opened[0] >= 3 and replaced and follower.view is not first and follower.mark.line == 100
    finally:
        follower.close()


def test_a_missing_state_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match="run 'recurrence replay' first"):
        follow_state(tmp_path / "none")


def test_while_the_files_keep_changing_views_open_at_the_pace_and_at_once_when_they_stop() -> None:
    from recurrence_ledger.processor.store.memory import MemoryStore

    moving = [True]
    looks = [0]

    def signature() -> int:
        if moving[0]:
            looks[0] += 1  # a replay writing without pause: the files differ at every look
        return looks[0]

    follower = Follower(MemoryStore, signature)
    opened: list[float] = []

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(follow(follower, lambda *_: opened.append(loop.time()), 0.01, lambda: 0.3))
        await asyncio.sleep(1.0)
        moving[0] = False  # the replay ended
        stopped = loop.time()
        await asyncio.sleep(0.2)
        task.cancel()
        return stopped

    stopped = asyncio.run(scenario())
    while_moving = [at for at in opened if at < stopped]
    # ~100 looks saw new files; the views came at the pace: at most one per 0.3 s
    assert 2 <= len(while_moving) <= 4, while_moving
    assert all(b - a >= 0.29 for a, b in pairwise(while_moving))
    # once the files stopped changing, the next looks opened the last view at once (not 0.3 s later)
    after = [at for at in opened if at >= stopped]
    assert len(after) == 1 and after[0] - stopped < 0.1
    follower.close()
