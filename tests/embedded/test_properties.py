"""Replay properties over seeded synthetic journals (hypothesis draws seeds, sizes and cuts)."""

import random
from collections import defaultdict
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recurrence_ledger.processor.embedded.reading import open_state
from recurrence_ledger.processor.embedded.runner import ReplayOptions, replay
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from tests.support.builders import Runner
from tests.support.strategies import journal_specs

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

journals = journal_specs(entries=(20, 400), scopes=(1, 6), conflicts=False)


def ledger(runner: Runner, lines: list[bytes]) -> list[bytes]:
    return [r.line + b"\n" for r in runner.emit(lines) if r.record != "dead_letter"]


def by_scope(lines: list[bytes]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = defaultdict(list)
    for line in lines:
        out[orjson.loads(line).get("scope_id")].append(line)
    return dict(out)


@SETTINGS
@given(spec=journals)
def test_replaying_twice_writes_nothing_new(spec: JournalSpec) -> None:
    lines = list(generate(spec))
    runner = Runner()
    first = ledger(runner, lines)
    stats = runner.engine.statistics()
    assert ledger(runner, lines) == []
    assert runner.engine.statistics() == stats
    assert len(first) == len(set(first))


@SETTINGS
@given(spec=journals, data=st.data())
def test_prefix_then_whole_equals_whole(spec: JournalSpec, data: st.DataObject) -> None:
    lines = list(generate(spec))
    cut = data.draw(st.integers(min_value=0, max_value=len(lines)))
    start = data.draw(st.integers(min_value=0, max_value=cut))
    once = Runner()
    expected = ledger(once, lines)
    split = Runner()
    got = ledger(split, lines[:cut]) + ledger(split, lines[start:])
    assert got == expected
    assert split.engine.statistics() == once.engine.statistics()


@SETTINGS
@given(spec=journals, shuffle_seed=st.integers(min_value=0, max_value=2**32))
def test_scope_interleaving_does_not_change_any_scope(spec: JournalSpec, shuffle_seed: int) -> None:
    lines = [line for line in generate(spec) if line.startswith(b"{") and b'"scope_id"' in line]
    queues = {scope: list(reversed(items)) for scope, items in by_scope(lines).items()}
    rng = random.Random(shuffle_seed)
    interleaved = []
    while queues:
        scope = rng.choice(sorted(queues))
        interleaved.append(queues[scope].pop())
        if not queues[scope]:
            del queues[scope]
    first, second = Runner(), Runner()
    assert by_scope(ledger(first, lines)) == by_scope(ledger(second, interleaved))
    assert first.engine.statistics() == second.engine.statistics()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=journals, batch=st.sampled_from([1, 7, 1000]))
def test_memory_and_rocksdb_backends_and_batching_agree(
    spec: JournalSpec, batch: int, tmp_path_factory: object
) -> None:
    lines = list(generate(spec))
    memory = Runner()
    expected = [r.line + b"\n" for r in memory.emit(lines)]
    base = Path(tmp_path_factory.mktemp("rocks"))  # type: ignore[attr-defined]
    journal = base / "journal.jsonl"
    journal.write_bytes(b"".join(line + b"\n" for line in lines))
    replay(str(journal), base / "state", base / "ledger.jsonl", ReplayOptions(batch_size=batch))
    store = open_state(base / "state")
    try:
        assert (base / "ledger.jsonl").read_bytes().splitlines(keepends=True) == expected
        assert Runner(store=store).engine.statistics() == memory.engine.statistics()
    finally:
        store.close()


def test_memory_store_prefix_iteration_matches_sorted_scan() -> None:
    store = MemoryStore()
    rng = random.Random(5)
    keys = [bytes(rng.choice(b"abc") for _ in range(rng.randint(1, 4))) for _ in range(200)]
    store.apply({k: k for k in keys})
    store.apply({k: None for k in keys[:50]})
    remaining = sorted(set(keys) - set(keys[:50]))
    for prefix in [b"", b"a", b"ab", b"c", b"abc", b"zz"]:
        assert [k for k, _ in store.iterate_prefix(prefix)] == [k for k in remaining if k.startswith(prefix)]
