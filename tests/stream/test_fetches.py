"""The fetch channel between the worker's consumer and an agent (no broker): batches, rebalances, commits."""

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from recurrence_ledger.processor.stream.worker.app import STALL_SECONDS, RecurrenceService
from recurrence_ledger.processor.stream.worker.fetches import FetchChannel, Fetched


def _fetch(generation: int, **partitions: range) -> Fetched:
    return Fetched(
        generation, {int(p[1:]): [SimpleNamespace(offset=o) for o in offsets] for p, offsets in partitions.items()}
    )


def _offsets(fetched: Fetched) -> dict[int, list[int]]:
    return {p: [r.offset for r in records] for p, records in fetched.records.items()}


def test_fetches_waiting_are_merged_up_to_the_cap_and_the_rest_starts_the_next_batch() -> None:
    async def run() -> list[dict[int, list[int]]]:
        channel = FetchChannel("j", maxsize=8)
        await channel.put(_fetch(1, p0=range(0, 3), p1=range(0, 2)))
        await channel.put(_fetch(1, p0=range(3, 5)))
        await channel.put(_fetch(1, p1=range(2, 6)))  # would make 11 > 10: the next batch
        first = await channel.get(10, within=0)
        channel.done()
        second = await channel.get(10, within=0)
        channel.done()
        return [_offsets(first), _offsets(second)]

    first, second = asyncio.run(run())
    assert first == {0: [0, 1, 2, 3, 4], 1: [0, 1]}
    assert second == {1: [2, 3, 4, 5]}


def test_a_new_generation_is_never_merged_into_an_old_one() -> None:
    async def run() -> list[Fetched]:
        channel = FetchChannel("j", maxsize=8)
        await channel.put(_fetch(1, p0=range(0, 2)))
        await channel.put(_fetch(2, p0=range(0, 2)))
        batches = []
        for _ in range(2):
            batches.append(await channel.get(100, within=0))
            channel.done()
        return batches

    first, second = asyncio.run(run())
    assert (first.generation, first.count, second.generation, second.count) == (1, 2, 2, 2)


def test_a_small_batch_waits_for_a_fetch_that_arrives_within_the_window() -> None:
    async def run() -> Fetched:
        channel = FetchChannel("j")
        await channel.put(_fetch(1, p0=range(0, 1)))

        async def later() -> None:
            await asyncio.sleep(0)  # once the agent is waiting for more
            await channel.put(_fetch(1, p0=range(1, 3)))

        putter = asyncio.ensure_future(later())
        batch = await channel.get(3, within=60.0)  # returns as soon as it holds 3 (never after the window)
        await putter
        return batch

    assert _offsets(asyncio.run(run())) == {0: [0, 1, 2]}


def test_only_a_batch_below_the_minimum_waits_for_more() -> None:
    async def run(first: range, min_records: int) -> tuple[Fetched, bool]:
        channel = FetchChannel("j")
        await channel.put(_fetch(1, p0=first))
        later = _fetch(1, p0=range(first.stop, first.stop + 2))

        async def put_later() -> None:
            await asyncio.sleep(0)  # once the agent has taken the first fetch
            await channel.put(later)

        putter = asyncio.ensure_future(put_later())
        batch = await channel.get(100, within=60.0, min_records=min_records)
        arrived_first = putter.done()
        await putter
        return batch, arrived_first

    # Below the minimum: waits, and the fetch that arrives joins the batch.
    batch, _ = asyncio.run(run(range(0, 3), min_records=4))
    assert _offsets(batch) == {0: [0, 1, 2, 3, 4]}
    # At the minimum: returns at once with what was there (a 60 s window is never waited for).
    batch, arrived_first = asyncio.run(run(range(0, 4), min_records=4))
    assert _offsets(batch) == {0: [0, 1, 2, 3]}
    assert not arrived_first


def test_quiesce_drops_queued_fetches_and_waits_for_the_batch_in_flight() -> None:
    async def run() -> tuple[int, list[str]]:
        channel = FetchChannel("j", maxsize=8)
        events: list[str] = []
        await channel.put(_fetch(1, p0=range(0, 2)))
        await channel.put(_fetch(2, p0=range(2, 4)))  # carried: a new generation
        await channel.put(_fetch(2, p0=range(4, 6)))
        await channel.get(100, within=0)

        async def finish_batch() -> None:
            await asyncio.sleep(0.01)
            events.append("batch done")
            channel.done()

        finishing = asyncio.ensure_future(finish_batch())
        dropped = await channel.quiesce()
        events.append("quiesced")
        await finishing
        return dropped, events

    dropped, events = asyncio.run(run())
    assert dropped == 2
    assert events == ["batch done", "quiesced"]


def test_quiesce_waits_for_a_catch_up_running_beside_the_fetched_batches() -> None:
    # A catch-up reads the topic directly; a rebalance must not stop the producers it sends through.
    async def run() -> list[str]:
        channel = FetchChannel("j", maxsize=8)
        events: list[str] = []

        async def catch_up() -> None:
            with channel.running():
                await asyncio.sleep(0.02)
                events.append("catch-up done")

        running = asyncio.ensure_future(catch_up())
        await asyncio.sleep(0)  # the catch-up has begun
        await channel.quiesce()
        events.append("quiesced")
        await running
        await channel.quiesce()  # idle again once it ended
        events.append("idle")
        return events

    assert asyncio.run(run()) == ["catch-up done", "quiesced", "idle"]


def test_quiesce_waits_for_every_batch_taken_until_each_is_done() -> None:
    # Pipelined batches: the next batch is taken while the one before is still being made durable.
    async def run() -> list[str]:
        channel = FetchChannel("j", maxsize=8)
        events: list[str] = []
        await channel.put(_fetch(1, p0=range(0, 2)))
        await channel.put(_fetch(1, p0=range(2, 4)))
        await channel.get(2, within=0)
        await channel.get(2, within=0)

        async def finish(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            events.append(name)
            channel.done()

        finishing = [
            asyncio.ensure_future(finish("first done", 0.01)),
            asyncio.ensure_future(finish("second done", 0.03)),
        ]
        await channel.quiesce()
        events.append("quiesced")
        await asyncio.gather(*finishing)
        return events

    assert asyncio.run(run()) == ["first done", "second done", "quiesced"]


def test_offset_commits_run_one_at_a_time_and_the_latest_offsets_win() -> None:
    async def run() -> list[dict[int, int]]:
        channel = FetchChannel("j")
        committed: list[dict[int, int]] = []
        gate = asyncio.Event()

        async def commit(offsets: dict[int, int]) -> Any:
            committed.append(dict(offsets))
            await gate.wait()
            return True

        channel.commit_soon({0: 10}, commit)
        await asyncio.sleep(0)
        channel.commit_soon({0: 20, 1: 5}, commit)  # while the first is in flight: queued
        channel.commit_soon({0: 30}, commit)
        gate.set()
        await channel.quiesce()  # waits for the committer
        return committed

    assert asyncio.run(run()) == [{0: 10}, {0: 30, 1: 5}]


def test_a_failed_commit_is_logged_and_the_next_one_still_runs() -> None:
    async def run() -> list[dict[int, int]]:
        channel = FetchChannel("j")
        committed: list[dict[int, int]] = []

        async def commit(offsets: dict[int, int]) -> Any:
            committed.append(dict(offsets))
            if len(committed) == 1:
                raise RuntimeError("broker said no")
            return True

        channel.commit_soon({0: 10}, commit)
        await channel.quiesce()
        channel.commit_soon({0: 20}, commit)
        await channel.quiesce()
        return committed

    assert asyncio.run(run()) == [{0: 10}, {0: 20}]


def test_a_gathering_batch_stops_waiting_once_another_channel_is_drained() -> None:
    # The patterns agent gathers for up to its window, but not past the moment the engine agent has run
    # everything it was handed (the end of a backlog): no timer decides when the last observations run.
    async def run() -> tuple[dict[int, list[int]], bool, bool]:
        engine, patterns = FetchChannel("journal"), FetchChannel("recurred")
        await engine.put(_fetch(1, p0=range(0, 5)))
        assert not engine.drained.is_set()  # a fetch is waiting for the engine agent
        taken = await engine.get(100, within=0)
        await patterns.put(_fetch(1, p0=range(0, 1)))
        gathering = asyncio.ensure_future(patterns.get(100, within=60.0, until=engine.drained))
        for _ in range(5):
            await asyncio.sleep(0)
        still_waiting = not gathering.done()  # the engine agent still runs its batch
        assert taken.count == 5
        engine.done()  # ...and now has nothing left
        batch = await asyncio.wait_for(gathering, 5)
        return _offsets(batch), still_waiting, engine.drained.is_set()

    batch, still_waiting, drained = asyncio.run(run())
    assert batch == {0: [0]} and still_waiting and drained


def test_a_catch_up_does_not_begin_on_a_partition_once_a_rebalance_has_begun() -> None:
    # Seen in CI under exactly_once: a rebalance began while partition 0 caught up; its quiesce waited
    # for that one, and the loop went on to partition 2 from the readiness it had asked before, while
    # the rebalance stopped the transactional producers: "no transactional producer for journal
    # partition 2", exit 70. Readiness is asked again for each partition.
    channel = FetchChannel("j", maxsize=8)
    committed: list[dict[int, int]] = []

    async def commit_journal(journal: str, offsets: dict[int, int]) -> None:
        committed.append(offsets)

    app = SimpleNamespace(rebalancing=False, fetch_channels={"j": channel}, commit_journal=commit_journal)
    caught_up: list[int] = []

    class Processor:
        sink = None

        def position(self, partition: int) -> int:
            return 5

        async def catch_up(self, partition: int, stop: int) -> None:
            caught_up.append(partition)
            app.rebalancing = True  # the consumer's thread: a revocation has begun meanwhile
            await asyncio.sleep(0)

    tps = [SimpleNamespace(partition=p) for p in (0, 1, 2)]
    cluster = SimpleNamespace(
        journal="j",
        journal_partitions=lambda: tps,
        ready_partitions=lambda: set() if app.rebalancing else {0, 1, 2},
        highwater=lambda tp: 9,
    )
    stuck_since = time.monotonic() - STALL_SECONDS - 1
    lane: Any = SimpleNamespace(
        cluster=cluster, processor=Processor(), progress={p: (5, stuck_since) for p in (0, 1, 2)}
    )
    service: Any = SimpleNamespace(app=app)

    async def run() -> None:
        await RecurrenceService._catch_up_lane(service, lane)
        await channel.quiesce()  # and the group offset it commits

    asyncio.run(run())
    assert caught_up == [0]
    assert committed == [{0: 5}]
    assert set(lane.progress) == {0}  # the others start timing again once ready
