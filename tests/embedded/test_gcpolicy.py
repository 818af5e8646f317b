"""Full collections are not triggered by heap growth while deferred, and run between batches when due."""

import gc

from recurrence_ledger.processor.host.gcpolicy import (
    FullCollections,
    freeze_startup_objects,
    full_collections_between_batches,
)


def _full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def _grow_the_heap() -> list[list[int]]:
    # Containers that survive young collections, as a runner's row cache does (lists: always tracked,
    # where a dict of plain values is untracked and would not count).
    kept = []
    for number in range(300_000):
        kept.append([number])
    return kept


def test_heap_growth_triggers_full_collections_only_when_not_deferred() -> None:
    gc.collect()
    before = _full_collections()
    kept = _grow_the_heap()
    assert _full_collections() > before  # the default policy: growth alone triggers them
    del kept
    with full_collections_between_batches():
        gc.collect()
        before = _full_collections()
        kept = _grow_the_heap()
        assert _full_collections() == before
        del kept


def test_the_thresholds_before_come_back_after_the_block() -> None:
    before = gc.get_threshold()
    with full_collections_between_batches():
        young, middle, oldest = gc.get_threshold()
        assert (young, middle) == before[:2] and oldest > 1_000_000
    assert gc.get_threshold() == before


def test_a_full_collection_runs_between_batches_once_it_is_due() -> None:
    now = [100.0]
    collections = FullCollections(every=60.0, clock=lambda: now[0])
    before = _full_collections()
    now[0] = 159.0
    assert collections.between_batches() is False
    assert _full_collections() == before
    now[0] = 160.0
    assert collections.between_batches() is True
    assert _full_collections() == before + 1 and collections.collections == 1
    now[0] = 200.0  # the next one is due 60 s after this one
    assert collections.between_batches() is False


def test_startup_objects_are_frozen_and_full_collections_deferred() -> None:
    before = gc.get_threshold()
    try:
        gc.unfreeze()
        assert gc.get_freeze_count() == 0
        collections = freeze_startup_objects(every=60.0)
        assert gc.get_freeze_count() > 0  # everything alive now, this test's modules included
        young, middle, oldest = gc.get_threshold()
        assert (young, middle) == before[:2] and oldest > 1_000_000
        assert collections.every == 60.0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
