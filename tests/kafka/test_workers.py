"""Scaling out and failing over: two workers in one consumer group split the partitions.

Statistics are asked of both workers for every scope, so each worker answers
for scopes the other one owns (forwarding) and for all scopes (fan-out).
"""

import os
import signal
import time
from pathlib import Path
from typing import Any

from devkit.deployment import Deployment, owned_partitions, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import distinct

from .workerchecks import check_statistics, scopes_of


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
    owned: Any = wait_for(lambda: owned_partitions([w1, w2], deployment.partitions), 120, 0.2, "both to own partitions")
    print(f"\n[workers] partitions split {sorted(owned[0])} / {sorted(owned[1])}")

    deployment.publish(journals[1])
    oracle = Oracle.run(oracle_two, tmp_path)
    deployment.wait_for_outputs(oracle, timeout=180)
    wait_for(lambda: owned_partitions([w1, w2], deployment.partitions), 60, 0.2, "a stable split")
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


def _journal(tmp_path: Path, entries: int, seed: int, parts: int) -> tuple[list[Path], Path]:
    lines = list(generate(JournalSpec(entries=entries, scopes=30, seed=seed, garbage_ratio=0.01)))
    size = -(-len(lines) // parts)
    chunks = []
    for i in range(parts):
        chunks.append(tmp_path / f"chunk{i}.jsonl")
        write_journal(chunks[-1], lines[i * size : (i + 1) * size])
    everything = tmp_path / "all.jsonl"
    write_journal(everything, lines)
    return chunks, everything


def _no_duplicate_ids(deployment: Deployment) -> None:
    raw = deployment.outputs(deduplicated=False)
    assert len(raw) == len(distinct(raw)), "a read_committed consumer saw a record id twice"


def test_exactly_once_survives_a_joining_worker_and_a_kill(deployment: Deployment, tmp_path: Path) -> None:
    deployment.guarantee = "exactly_once"
    # Six partitions: Faust's assignor is sticky up to ceil(partitions / workers), so with four a
    # third worker would get nothing; with six it takes two partitions from the two busy workers.
    deployment.partitions = 6
    chunks, everything = _journal(tmp_path, 4000, 41, 4)
    deployment.apply_topics()
    deployment.publish(chunks[0])
    w1 = deployment.worker("w1", "--instance-id", f"{deployment.prefix}-w1").start()
    w2 = deployment.worker("w2", "--instance-id", f"{deployment.prefix}-w2").start()
    wait_for(lambda: owned_partitions([w1, w2], deployment.partitions), 120, 0.2, "both workers to own partitions")
    deployment.publish(chunks[1])
    # A third worker joins while the second chunk is being processed: a rebalance mid-stream.
    w3 = deployment.worker("w3", "--instance-id", f"{deployment.prefix}-w3").start()
    deployment.publish(chunks[2])
    wait_for(lambda: owned_partitions([w1, w2, w3], deployment.partitions), 180, 0.2, "three to share partitions")
    # One dies without a goodbye while it has entries in hand: its open transaction must be
    # aborted by the new owners' producers before they restore its partitions and go on.
    deployment.publish(chunks[3])
    pending = w1.lag()
    w1.kill9()
    print(f"\n[workers] w1 killed with {pending:.0f} entries pending")
    oracle = Oracle.run(everything, tmp_path)
    deployment.wait_for_outputs(oracle, timeout=240)
    wait_for(lambda: owned_partitions([w2, w3], deployment.partitions), 120, 0.2, "the survivors to own all partitions")
    _no_duplicate_ids(deployment)


def test_exactly_once_fences_a_paused_zombie_worker(deployment: Deployment, tmp_path: Path) -> None:
    deployment.guarantee = "exactly_once"
    chunks, everything = _journal(tmp_path, 2400, 43, 3)
    deployment.apply_topics()
    deployment.publish(chunks[0])
    w1 = deployment.worker("w1", "--session-timeout", "6").start()
    w2 = deployment.worker("w2", "--session-timeout", "6").start()
    wait_for(lambda: owned_partitions([w1, w2], deployment.partitions), 120, 0.2, "both workers to own partitions")
    oracle_first = tmp_path / "first.jsonl"
    write_journal(oracle_first, [line for line in chunks[0].read_bytes().splitlines() if line])
    deployment.wait_for_outputs(Oracle.run(oracle_first, tmp_path), timeout=120)
    assert w1.proc is not None
    os.killpg(w1.proc.pid, signal.SIGSTOP)  # a GC pause, a frozen VM: it still believes it owns its partitions
    try:
        deployment.publish(chunks[1])
        # w2 takes everything over once the session times out.
        w2.wait_ready(timeout=120, partitions=deployment.partitions)
        deployment.publish(chunks[2])
        oracle = Oracle.run(everything, tmp_path)
        deployment.wait_for_outputs(oracle, timeout=240)
    finally:
        os.killpg(w1.proc.pid, signal.SIGCONT)  # the zombie wakes up with stale batches in hand
    time.sleep(8)  # let it try to commit what it held
    oracle = Oracle.run(everything, tmp_path)
    deployment.wait_for_outputs(oracle, timeout=120)
    _no_duplicate_ids(deployment)
