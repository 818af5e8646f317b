"""Crash safety: kill -9 the worker at random points while it processes, restart, repeat.

Afterwards the deduplicated output must equal the oracle exactly (nothing
lost, nothing different) and the test reports how many raw duplicates the
crashes caused. One restart also throws the local state away (a lost disk),
so that state is rebuilt from the changelog alone.

Under ``exactly_once`` the same run must show no duplicates at all to a
``read_committed`` consumer.
"""

import random
import shutil
import time
from pathlib import Path

from devkit.deployment import Deployment, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import distinct

from .workerchecks import check_statistics, scopes_of

CYCLES = 5


def test_kill_minus_nine_at_random_points(deployment: Deployment, tmp_path: Path, guarantee: str) -> None:
    rng = random.Random(f"crash-{guarantee}")
    lines = list(generate(JournalSpec(entries=4200, scopes=40, seed=31, garbage_ratio=0.02)))
    chunks = [lines[k * 700 : (k + 1) * 700] for k in range(6)]
    everything = tmp_path / "all.jsonl"
    write_journal(everything, lines)
    oracle = Oracle.run(everything, tmp_path)

    deployment.apply_topics()
    # Small batches: more batch boundaries for the kills to land between and inside.
    # A stable instance id: the restarted worker takes its partitions back at once.
    # Snapshots every second: the lost disk is restored from the latest complete one plus the
    # changelog tail, and kills land during uploads too (a snapshot without its manifest is unused).
    worker = deployment.worker(
        "w1", "--batch-max", "50", "--instance-id", f"{deployment.prefix}-w1", "--snapshot-interval", "1"
    ).start()
    worker.wait_ready(partitions=deployment.partitions)

    kills_mid_batch = 0
    recoveries: list[tuple[float, float]] = []
    for cycle in range(CYCLES):
        chunk = tmp_path / f"chunk{cycle}.jsonl"
        write_journal(chunk, chunks[cycle])
        deployment.publish(chunk)
        time.sleep(rng.uniform(0.05, 0.6))
        lag = worker.lag()
        kills_mid_batch += lag > 0
        killed_at = time.monotonic()
        worker.kill9()
        if cycle == 2:
            shutil.rmtree(worker.datadir)  # a lost disk: rebuild the state from the changelog
        worker.start()
        worker.wait_ready(partitions=deployment.partitions, timeout=120)
        ready_at = time.monotonic()
        prefix = tmp_path / f"prefix{cycle}.jsonl"
        write_journal(prefix, [line for chunk_lines in chunks[: cycle + 1] for line in chunk_lines])
        deployment.wait_for_outputs(Oracle.run(prefix, tmp_path), timeout=180)
        recoveries.append((ready_at - killed_at, time.monotonic() - killed_at))

    last = tmp_path / "chunk-last.jsonl"
    write_journal(last, chunks[CYCLES])
    deployment.publish(last)
    deployment.wait_for_outputs(oracle, timeout=180)
    wait_for(lambda: worker.lag() == 0, 60, 0.2, "zero lag")

    raw = deployment.outputs(deduplicated=False)
    unique = distinct(raw)
    # The journal itself repeats some garbage lines: identical dead letters the oracle writes too.
    inherent = len(oracle.records) - len(distinct(oracle.records))
    duplicates = len(raw) - len(unique) - inherent
    log_text = worker.log_path.read_text(errors="replace")
    gaps = log_text.count("the stream skipped offsets") + log_text.count("were not delivered by the stream")
    print(
        f"\n[crash {guarantee}] {CYCLES} kill -9 ({kills_mid_batch} with entries pending), one with the local state "
        f"deleted; {len(raw)} raw output records, {len(unique)} distinct, {duplicates} duplicates from crashes; "
        f"{gaps} stream gaps filled from the journal; {log_text.count('loaded snapshot')} snapshots loaded; "
        "kill -> ready / kill -> caught up (s): "
        + ", ".join(f"{ready:.1f}/{caught:.1f}" for ready, caught in recoveries)
    )
    check_statistics([worker], oracle, scopes_of(oracle, 4))
    if guarantee == "exactly_once":
        assert duplicates == 0, "exactly_once: a read_committed consumer saw a record twice"
