"""How evenly a journal's scopes spread over N partitions: the bound key skew puts on scale-out.

The journal topic is keyed by scope, so every entry of a scope lands in one
partition (the producer's default partitioner, murmur2 of the key, as
``recurrence publish`` uses), and one worker owns a partition. N workers on N
partitions can therefore go at most ``entries / entries in the busiest
partition`` times as fast as one worker, however many cores and brokers they
have: the busiest partition finishes last. This prints that bound for each N,
from the journal itself (no broker):

    python bench/partition_balance.py JOURNAL [--partitions 1,2,4,8,12,24]
"""

import argparse
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from recurrence_ledger.processor.core.partitioning import partition_for


def scope_counts(lines: Iterable[bytes]) -> Counter[str | None]:
    """Entries per scope (``None``: lines without a readable scope_id, sent to partition 0)."""
    counts: Counter[str | None] = Counter()
    for line in lines:
        try:
            scope = orjson.loads(line).get("scope_id")
        except (orjson.JSONDecodeError, AttributeError):
            scope = None
        counts[scope if isinstance(scope, str) and scope else None] += 1
    return counts


def balance(counts: Counter[str | None], partitions: int) -> dict[str, Any]:
    """The busiest partition's share of the entries and the speedup bound it implies."""
    load: Counter[int] = Counter()
    for scope, entries in counts.items():
        load[0 if scope is None else partition_for(scope, partitions)] += entries
    total = sum(counts.values())
    busiest = max(load.values())
    return {
        "partitions": partitions,
        "busiest_share": round(busiest / total, 3),
        "speedup_bound": round(total / busiest, 2),
        "idle_partitions": partitions - len(load),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("journal")
    parser.add_argument("--partitions", default="1,2,3,4,6,8,12,16,24", help="comma-separated partition counts")
    args = parser.parse_args()
    with open(args.journal, "rb") as handle:
        counts = scope_counts(line for line in handle if line.strip())
    print(f"{sum(counts.values()):,} entries, {len(counts):,} scope keys")
    print("| partitions (= workers) | busiest partition's share | speedup bound vs one worker | idle partitions |")
    print("|---:|---:|---:|---:|")
    for partitions in (int(part) for part in args.partitions.split(",")):
        row = balance(counts, partitions)
        print(f"| {partitions} | {row['busiest_share']:.1%} | {row['speedup_bound']:.2f}x | {row['idle_partitions']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
