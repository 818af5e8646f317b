"""Scaling out and failing over: two workers in one consumer group split the partitions.

Statistics are asked of both workers for every scope, so each worker answers
for scopes the other one owns (forwarding) and for all scopes (fan-out).
"""

from pathlib import Path
from typing import Any

import pytest

from recurrence.processor.synthetic import JournalSpec, generate

from .harness import Deployment, Oracle, Worker, wait_for, write_journal
from .test_end_to_end import check_statistics, scopes_of

pytestmark = pytest.mark.kafka


def _split(workers: list[Worker], partitions: int) -> list[set[int]] | None:
    reports = [w.health() for w in workers]
    if not all(r and r.get("status") == "ok" for r in reports):
        return None
    owned: list[set[int]] = [set(r["ready_partitions"]) for r in reports if r]
    if any(not o for o in owned) or set().union(*owned) != set(range(partitions)):
        return None
    if sum(len(o) for o in owned) != partitions:
        return None
    return owned


def test_two_workers_split_partitions_and_fail_over(deployment: Deployment, tmp_path: Path) -> None:
    lines = list(generate(JournalSpec(entries=2400, scopes=30, seed=23, garbage_ratio=0.02)))
    parts = [lines[:800], lines[800:1600], lines[1600:]]
    journals = []
    for i in range(3):
        journals.append(tmp_path / f"part{i}.jsonl")
        write_journal(journals[-1], parts[i])
    oracle_two = tmp_path / "first-two.jsonl"
    write_journal(oracle_two, parts[0] + parts[1])
    everything = tmp_path / "all.jsonl"
    write_journal(everything, lines)

    deployment.apply_topics()
    deployment.publish(journals[0])
    w1 = deployment.worker("w1").start()
    w2 = deployment.worker("w2").start()
    owned: Any = wait_for(lambda: _split([w1, w2], deployment.partitions), 120, 0.2, "both workers to own partitions")
    print(f"\n[workers] partitions split {sorted(owned[0])} / {sorted(owned[1])}")

    deployment.publish(journals[1])
    oracle = Oracle.run(oracle_two, tmp_path)
    deployment.wait_for_outputs(oracle, timeout=180)
    wait_for(lambda: _split([w1, w2], deployment.partitions), 60, 0.2, "a stable split")
    check_statistics([w1, w2], oracle, scopes_of(oracle, 8))
    processed = [w.metrics()["recurrence_entries_processed_total"] for w in (w1, w2)]
    assert all(n > 0 for n in processed), f"one worker processed nothing: {processed}"

    # Stop one worker: the other takes over its partitions (restored from the changelog or
    # its standby copy) and carries on with the rest of the journal.
    assert w2.stop() == 0
    w1.wait_ready(timeout=120, partitions=deployment.partitions)
    deployment.publish(journals[2])
    oracle = Oracle.run(everything, tmp_path)
    deployment.wait_for_outputs(oracle, timeout=180)
    check_statistics([w1], oracle, scopes_of(oracle, 8))
