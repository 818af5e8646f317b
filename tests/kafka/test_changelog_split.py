"""Change sets split across changelog records, against a real broker, under both guarantees.

A worker with a tiny ``--changelog-record-bytes`` writes every batch's change
set as several part records; none is larger than the cap. After its disk is
lost, a new worker replays the whole changelog (no snapshots): it must join
the parts back into whole change sets and go on exactly where the first one
stopped -- no record written twice, the output and the statistics equal the
embedded oracle.
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

CAP = 2048


def test_split_change_sets_stay_under_the_cap_and_restore_whole(
    deployment: Deployment, tmp_path: Path, guarantee: str
) -> None:
    lines = list(generate(JournalSpec(entries=500, scopes=12, seed=23, garbage_ratio=0.01)))
    everything = tmp_path / "all.jsonl"
    write_journal(everything, lines)
    oracle = Oracle.run(everything, tmp_path)
    deployment.apply_topics()

    def run(name: str) -> Worker:
        worker = deployment.worker(
            name,
            "--batch-max",
            "100",
            "--changelog-record-bytes",
            str(CAP),
            "--snapshot-interval",
            "0",
            "--snapshot-batches",
            "0",
        )
        worker.datadir = tmp_path / "w-data"
        return worker.start()

    def publish(name: str, chunk: list[bytes], through: list[bytes]) -> None:
        part, prefix = tmp_path / f"{name}.jsonl", tmp_path / f"{name}-prefix.jsonl"
        write_journal(part, chunk)
        write_journal(prefix, through)
        deployment.publish(part)
        deployment.wait_for_outputs(Oracle.run(prefix, tmp_path), timeout=180)

    first = run("run1")
    first.wait_ready(partitions=deployment.partitions)
    publish("first", lines[:400], lines[:400])
    assert first.metrics().get("recurrence_changelog_split_records_total", 0) > 0
    deployment.wait_drained()  # every input applied, the repartition topic too, before the disk is lost
    first.stop()
    shutil.rmtree(first.datadir)

    second = run("run2")
    second.wait_ready(partitions=deployment.partitions, timeout=120)
    assert second.metrics().get("recurrence_changelog_replayed_records_total", 0) > 0
    publish("rest", lines[400:], lines)
    wait_for(lambda: second.lag() == 0, 60, 0.2, "zero lag")
    raw = deployment.outputs(deduplicated=False)
    inherent = len(oracle.records) - len(distinct(oracle.records))  # the journal repeats some garbage lines
    assert len(raw) - len(distinct(raw)) == inherent, "a record was written twice: the restore missed state"
    check_statistics([second], oracle, scopes_of(oracle, 4))
    sizes = _changelog_value_sizes(deployment)
    assert sizes and max(sizes) <= CAP


def _changelog_value_sizes(deployment: Deployment) -> list[int]:
    async def sizes() -> list[int]:
        found: list[int] = []
        for table in ("state", "patterns"):
            reader = PartitionReader(deployment.connection, f"{deployment.prefix}-{table}-changelog")
            try:
                for partition in range(deployment.partitions):
                    end = await reader.log_end(partition)
                    records = await reader.fetch_records(partition, 0, end)
                    found += [len(value) for _, _, value in records if value is not None]
            finally:
                await reader.close()
        return found

    return asyncio.run(sizes())
