"""An entry as large as the journal takes must not stop the stream, under both guarantees.

A dead letter keeps the raw entry inside a JSON string, so a journal record
of control characters (valid UTF-8, invalid JSON) comes out about six times
its size: a journal record near the broker's default 1 MiB made a dead letter
the output topic refused, and the worker exited 70 on it at every restart.
The output topics now take records up to ``OUTPUT_MAX_RECORD_BYTES``
(topics/definitions.py); the journal is held at Kafka's default.
"""

import asyncio
from pathlib import Path

import orjson
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from devkit.deployment import Deployment, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.exceptions import EXIT_BATCH_ABORTED
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.processor.stream.worker.journal import PartitionReader
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.topics.definitions import (
    JOURNAL_MAX_RECORD_BYTES,
    OUTPUT_MAX_RECORD_BYTES,
    RECORD_LIMIT,
    topic_specs,
)

# The largest journal record the topic takes, less the record batch's framing and a margin.
HUGE = JOURNAL_MAX_RECORD_BYTES - 4096


def test_an_entry_as_large_as_the_journal_takes_is_dead_lettered_and_the_stream_goes_on(
    deployment: Deployment, tmp_path: Path, guarantee: str
) -> None:
    lines = list(generate(JournalSpec(entries=120, scopes=4, seed=31)))
    lines.insert(60, b"\x01" * HUGE)
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, lines)
    oracle = Oracle.run(journal, tmp_path)
    dead = [orjson.loads(r) for r in oracle.records if orjson.loads(r)["record"] == "dead_letter"]
    assert [len(d["raw"]) for d in dead] == [HUGE]
    largest = max(len(r) for r in oracle.records)
    assert 5 * 1024 * 1024 < largest < OUTPUT_MAX_RECORD_BYTES  # far past the broker's default, within the cap

    deployment.apply_topics()
    worker = deployment.worker("w1", "--batch-max", "50").start()
    worker.wait_ready(partitions=deployment.partitions)
    deployment.publish(journal)
    outputs = deployment.wait_for_outputs(oracle, timeout=120)
    assert max(len(r) for r in outputs) > 5 * 1024 * 1024  # the dead letter itself (its origin names the topic)
    wait_for(lambda: worker.lag() == 0, 60, 0.2, "zero lag")
    assert worker.starts == 1 and worker.alive(), "the worker restarted or stopped on the large record"


def test_publish_refuses_a_line_larger_than_the_journal_takes_and_names_it(
    deployment: Deployment, tmp_path: Path
) -> None:
    lines = list(generate(JournalSpec(entries=5, scopes=1, seed=3)))
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, [*lines[:3], b"\x01" * JOURNAL_MAX_RECORD_BYTES, *lines[3:]])
    deployment.apply_topics()
    result = deployment.run("publish", str(journal), check=False)
    assert result.returncode == 2, result.stderr
    assert f"journal line 4 is {JOURNAL_MAX_RECORD_BYTES:,} bytes" in result.stderr
    assert "3 entries before it were published, nothing after it. To go on without it: --from-line 5" in result.stderr
    assert "Traceback" not in result.stderr
    assert asyncio.run(_journal_records(deployment)) == 3
    # As it says: the rest goes on past the line, and the summary says where it started.
    resumed = deployment.run("publish", str(journal), "--from-line", "5", check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert "recurrence publish: 2 entries from line 5 " in resumed.stderr
    assert asyncio.run(_journal_records(deployment)) == 5


async def _journal_records(deployment: Deployment) -> int:
    reader = PartitionReader(deployment.connection, f"{deployment.prefix}.journal")
    try:
        return sum([await reader.log_end(partition) for partition in range(deployment.partitions)])
    finally:
        await reader.close()


def test_a_record_past_its_topics_limit_stops_the_worker_with_the_fix_and_raising_the_limit_resumes(
    deployment: Deployment, tmp_path: Path
) -> None:
    # Someone lowered the dead-letter topic's limit after the worker started (at start it would be
    # drift): the large dead letter is refused, and the log says what to do; doing it resumes.
    lines = list(generate(JournalSpec(entries=80, scopes=3, seed=37)))
    lines.insert(40, b"\x01" * HUGE)
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, lines)
    oracle = Oracle.run(journal, tmp_path)
    deployment.apply_topics()
    worker = deployment.worker("w1", "--batch-max", "50").start()
    worker.wait_ready(partitions=deployment.partitions)
    asyncio.run(_set_record_limit(deployment, "dead-letters", 1024 * 1024))
    deployment.publish(journal)
    wait_for(lambda: not worker.alive(), 60, 0.2, "the worker to stop on the refused record")
    assert worker.proc is not None and worker.proc.returncode == EXIT_BATCH_ABORTED
    log = worker.log_path.read_text()
    assert "larger than its topic's max.message.bytes" in log and "kafka-configs.sh --alter" in log

    asyncio.run(_set_record_limit(deployment, "dead-letters", OUTPUT_MAX_RECORD_BYTES))
    worker.start()
    deployment.wait_for_outputs(oracle, timeout=120)


async def _set_record_limit(deployment: Deployment, role: str, limit: int) -> None:
    """Every config the definition gives the topic, with this record limit (AlterConfigs replaces them all)."""
    specs = topic_specs(StreamSettings(topic_prefix=deployment.prefix, partitions=deployment.partitions))
    spec = next(s for s in specs if s.role == role)
    admin = AIOKafkaAdminClient(bootstrap_servers=deployment.bootstrap)
    await admin.start()
    try:
        configs = {**spec.config, RECORD_LIMIT: str(limit)}
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, spec.name, configs=configs)])
    finally:
        await admin.close()
