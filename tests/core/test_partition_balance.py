"""bench/partition_balance.py: the key-skew bound the scale-out benchmark prints beside its ratio."""

import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

import orjson

from recurrence_ledger.processor.core.partitioning import partition_for

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("partition_balance", ROOT / "bench" / "partition_balance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _two_scopes_apart() -> tuple[str, str]:
    first = "scope-000"
    other = next(
        f"scope-{n:03d}" for n in range(1, 100) if partition_for(f"scope-{n:03d}", 2) != partition_for(first, 2)
    )
    return first, other


def test_even_split_over_two_partitions_bounds_two_workers_at_2x() -> None:
    pb = _module()
    a, b = _two_scopes_apart()
    lines = [orjson.dumps({"scope_id": s, "position": i}) for i in range(1, 11) for s in (a, b)]
    row = pb.balance(pb.scope_counts(lines), 2)
    assert row == {"partitions": 2, "busiest_share": 0.5, "speedup_bound": 2.0, "idle_partitions": 0}


def test_skewed_scopes_and_unreadable_lines_count_against_their_partition() -> None:
    pb = _module()
    a, b = _two_scopes_apart()
    # 30 entries of one scope, 10 of the other, 10 unreadable lines (sent to partition 0 by `publish`).
    lines = [orjson.dumps({"scope_id": a})] * 30 + [orjson.dumps({"scope_id": b})] * 10 + [b"not json"] * 10
    counts = pb.scope_counts(lines)
    assert counts == Counter({a: 30, b: 10, None: 10})
    row = pb.balance(counts, 2)
    busiest = max(30 + (10 if partition_for(a, 2) == 0 else 0), 10 + (10 if partition_for(b, 2) == 0 else 0))
    assert row["busiest_share"] == round(busiest / 50, 3)
    assert row["speedup_bound"] == round(50 / busiest, 2)


def test_more_partitions_than_scopes_leaves_partitions_idle() -> None:
    pb = _module()
    row = pb.balance(Counter({"only": 5}), 4)
    assert row == {"partitions": 4, "busiest_share": 1.0, "speedup_bound": 1.0, "idle_partitions": 3}
