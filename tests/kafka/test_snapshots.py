"""A worker that lost its disk restores from a snapshot plus the changelog tail, under both guarantees.

Run 1 processes most of the journal in small batches (a long changelog) and
ships snapshots; run 2, on the same disk with shipping off, processes more
(the tail after the last snapshot); then the disk is deleted. Run 3 must load
the snapshots, replay only the tail, and go on exactly where run 2 stopped:
the deduplicated output equals the embedded oracle, and no record is written
twice (a restore that missed a change set would run its entries again).
"""

import asyncio
import shutil
from pathlib import Path

from devkit.deployment import Deployment, Worker, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.stream.worker.journal import PartitionReader
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import distinct

from .workerchecks import check_statistics, scopes_of

SHIPPING_OFF = ("--snapshot-interval", "0", "--snapshot-batches", "0")


def _counter(worker: Worker, name: str) -> float:
    return worker.metrics().get(f"recurrence_{name}_total", 0.0)


def test_a_lost_disk_is_restored_from_a_snapshot_and_the_changelog_tail(
    deployment: Deployment, tmp_path: Path, guarantee: str
) -> None:
    lines = list(generate(JournalSpec(entries=1300, scopes=24, seed=17, garbage_ratio=0.01)))
    parts = (lines[:1000], lines[1000:1100], lines[1100:])
    everything = tmp_path / "all.jsonl"
    write_journal(everything, lines)
    oracle = Oracle.run(everything, tmp_path)
    deployment.apply_topics()

    def run(name: str, *extra: str) -> Worker:
        worker = deployment.worker(name, "--batch-max", "10", *extra)
        worker.datadir = tmp_path / "w-data"  # one disk across the three runs
        return worker.start()

    def publish_through(count: int) -> None:
        part = tmp_path / f"part{count}.jsonl"
        write_journal(part, parts[count])
        deployment.publish(part)
        prefix = tmp_path / f"prefix{count}.jsonl"
        write_journal(prefix, [line for chunk in parts[: count + 1] for line in chunk])
        deployment.wait_for_outputs(Oracle.run(prefix, tmp_path), timeout=240)

    first = run("run1", "--snapshot-interval", "1")
    first.wait_ready(partitions=deployment.partitions)
    publish_through(0)
    deployment.wait_drained()  # the patterns agent too: the state run 3 must reproduce is complete
    first.stop()  # a clean stop ships what changed since the last snapshot
    shipped = first.log_path.read_text(errors="replace").count("shipped snapshot")
    assert shipped >= deployment.partitions
    after_snapshots = _changelog_ends(deployment)

    second = run("run2", *SHIPPING_OFF)
    second.wait_ready(partitions=deployment.partitions, timeout=120)
    publish_through(1)  # the tail: change sets after the last snapshot
    deployment.wait_drained()
    second.stop()
    history = _changelog_ends(deployment)
    shutil.rmtree(second.datadir)

    third = run("run3", *SHIPPING_OFF)
    third.wait_ready(partitions=deployment.partitions, timeout=120)
    log_text = third.log_path.read_text(errors="replace")
    for partition in range(deployment.partitions):
        assert f"state partition {partition}: loaded snapshot" in log_text, log_text[-3000:]
    assert _counter(third, "snapshots_restored") >= deployment.partitions
    replayed = _counter(third, "changelog_replayed_records")
    # Only the tail is replayed: run 2's change sets (100 entries), not run 1's (1000, in batches of 10).
    tail = history - after_snapshots  # offsets: under exactly_once commit markers take some
    assert 0 < replayed <= tail < history / 4, (replayed, tail, history)
    print(
        f"\n[snapshots {guarantee}] changelog history {history} offsets, tail {tail}, replayed {replayed:.0f} "
        f"records after loading {_counter(third, 'snapshot_restored_rows'):.0f} rows"
    )

    publish_through(2)
    wait_for(lambda: third.lag() == 0, 60, 0.2, "zero lag")
    raw = deployment.outputs(deduplicated=False)
    inherent = len(oracle.records) - len(distinct(oracle.records))  # the journal repeats some garbage lines
    assert len(raw) - len(distinct(raw)) == inherent, "a record was written twice: the restore missed state"
    check_statistics([third], oracle, scopes_of(oracle, 4))


def _changelog_ends(deployment: Deployment) -> int:
    """End offsets of both changelogs (the state's and the patterns agent's), summed over partitions."""

    async def ends() -> int:
        total = 0
        for table in ("state", "patterns"):
            reader = PartitionReader(deployment.connection, f"{deployment.prefix}-{table}-changelog")
            try:
                total += sum([await reader.log_end(p) for p in range(deployment.partitions)])
            finally:
                await reader.close()
        return total

    return asyncio.run(ends())
