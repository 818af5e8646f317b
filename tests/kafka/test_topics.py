"""Topics as code against a real broker: create what is missing, report drift, never change anything."""

import asyncio

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from devkit.deployment import Deployment
from devkit.localrun import free_port
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.topics.definitions import OUTPUT_MAX_RECORD_BYTES, topic_specs

# journal, ledger, review, dead letters, state changelog, statistics, repartition, patterns, patterns changelog
TOPICS = len(topic_specs(StreamSettings()))


def test_apply_creates_missing_topics_and_reports_drift(deployment: Deployment) -> None:
    # Someone created the ledger topic by hand, compacted and with 2 partitions, and the statistics
    # table topic without compaction.
    async def create_by_hand() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=deployment.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [
                    NewTopic(f"{deployment.prefix}.ledger", 2, 1, topic_configs={"cleanup.policy": "compact"}),
                    NewTopic(f"{deployment.prefix}.statistics", 4, 1, topic_configs={"cleanup.policy": "delete"}),
                ]
            )
        finally:
            await admin.close()

    asyncio.run(create_by_hand())
    result = deployment.run("topics", "apply", check=False)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"created      {deployment.prefix}.journal" in result.stdout
    assert f"drift        {deployment.prefix}.ledger" in result.stdout
    assert "has 2 partitions, the definition says 4" in result.stdout
    assert "cleanup.policy=compact, the definition says delete" in result.stdout
    assert f"drift        {deployment.prefix}.statistics" in result.stdout
    assert "cleanup.policy=delete, the definition says compact" in result.stdout
    # Made by hand with the broker's default record limit: a limit says how to raise it in place.
    assert (
        f"max.message.bytes=1048588, the definition says at least {OUTPUT_MAX_RECORD_BYTES} "
        "(safe to change in place: kafka-configs.sh --alter --entity-type topics "
        f"--entity-name {deployment.prefix}.statistics "
        f"--add-config max.message.bytes={OUTPUT_MAX_RECORD_BYTES})"
    ) in result.stdout
    assert "nothing was changed" in result.stderr

    # Nothing was altered: the same drift again, everything else is fine now.
    again = deployment.run("topics", "apply", check=False)
    assert again.returncode == 3
    assert again.stdout.count("ok ") == TOPICS - 2 and again.stdout.count("drift") == 2

    # The worker refuses to start on drift.
    # Its own port: 6066, the default, is the docs' worker's (tests/kafka/test_docs.py), maybe running now.
    worker = deployment.run(
        "worker", "--datadir", str(deployment.workdir / "w"), "--web-port", str(free_port()), check=False, timeout=60
    )
    assert worker.returncode == 3


def test_dry_run_reports_missing_topics(deployment: Deployment) -> None:
    result = deployment.run("topics", "apply", "--dry-run", check=False)
    assert result.returncode == 2
    assert result.stdout.count("would create") == TOPICS == 10
    assert deployment.run("topics", "apply").returncode == 0
    assert deployment.run("topics", "apply", "--dry-run").stdout.count("ok ") == TOPICS
