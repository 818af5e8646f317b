"""Operating the worker as a Kafka user would: waiting for outputs, status, probes, metrics, failures.

One worker per test, against the real broker: the quick-start sequence
produces the embedded ledger, ``--follow`` tails, ``status`` reports lag,
``/livez`` / ``/readyz`` / ``/metrics`` behave as Kubernetes and Prometheus
expect (``promtool check metrics`` on the live output when promtool is
installed), and an unreachable broker or a missing topic fails in one line.
"""

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from devkit.deployment import Deployment, write_journal
from devkit.localrun import REPO, recurrence_command, wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.topics.definitions import topic_specs
from tests.support.tools import find

RFC_EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"


def test_quick_start_waits_for_the_worker_and_tails_like_kcat(deployment: Deployment, tmp_path: Path) -> None:
    oracle = Oracle.run(RFC_EXAMPLE, tmp_path)
    deployment.apply_topics()
    worker = deployment.worker("w1").start()
    # /livez answers as soon as the web server is up, whatever the assignment.
    wait_for(lambda: worker.alive() and _status(worker, "/livez") == 200, 60, 0.1, "/livez")
    follow = subprocess.Popen(
        [*recurrence_command(), "ledger-dump", "--follow"],
        env=deployment.env(),
        cwd=deployment.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deployment.publish(RFC_EXAMPLE)
        # Right after publish, --until-caught-up waits for the worker instead of dumping nothing.
        dump = tmp_path / "ledger.jsonl"
        result = deployment.run("ledger-dump", "--until-caught-up", "--max-wait", "90", "--out", str(dump))
        assert "caught up" in result.stderr
        assert dump.read_bytes() == b"".join(record + b"\n" for record in oracle.records)

        # The journal is done; the patterns agent may still be on the repartition topic (2 recurred).
        deployment.wait_drained(60)
        status = deployment.run("status")
        assert status.stdout.splitlines()[-1].split()[-1] == "0", status.stdout
        as_json = orjson.loads(deployment.run("status", "--json").stdout)
        assert as_json["lag"] == 0 and sum(p["end"] for p in as_json["partitions"]) == 10
        journal, repartition = as_json["inputs"]
        assert (journal["topic"], repartition["topic"]) == (deployment.topics.journal, deployment.topics.recurred)
        assert journal["partitions"] == as_json["partitions"]
        assert (
            sum(p["end"] for p in repartition["partitions"])
            == 2
            == sum(p["committed"] or 0 for p in repartition["partitions"])
        )

    finally:
        time.sleep(2.0)  # the follower polls every 0.5 s
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=30)
    assert follow.returncode == 0, err
    assert out == b"".join(record + b"\n" for record in oracle.records)

    report = worker.wait_ready(partitions=deployment.partitions)
    assert report["status"] == "ok" and report["lag"] == {"0": 0, "1": 0, "2": 0, "3": 0}
    assert _status(worker, "/health") == 200  # the alias answers as /readyz
    _check_outputs_carry_ids(deployment)
    # Once ready, the worker says where its page is: one line, the URL and nothing else.
    announced = f"ready: the statistics page is at {worker.url}/ui"
    wait_for(lambda: announced in worker.log_path.read_text(), 30, 0.2, "the /ui line")
    lines = [line.rstrip() for line in worker.log_path.read_text().splitlines() if "/ui" in line]
    assert len(lines) == 1 and lines[0].endswith(announced), lines
    assert _status(worker, "/ui") == 200


def _status(worker: object, path: str) -> int:
    try:
        code, _ = worker.get(path, timeout=2)  # type: ignore[attr-defined]
    except OSError:
        return 0
    return int(code)


def _check_outputs_carry_ids(deployment: Deployment) -> None:
    async def headers() -> list[dict[str, bytes]]:
        consumer = AIOKafkaConsumer(
            f"{deployment.prefix}.ledger",
            bootstrap_servers=deployment.bootstrap,
            auto_offset_reset="earliest",
            group_id=None,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=5000)
            return [dict(m.headers) for messages in batches.values() for m in messages]
        finally:
            await consumer.stop()

    found = asyncio.run(headers())
    assert found and all(h["recurrence-id"].startswith((b"match:", b"observation:")) for h in found)


def test_live_metrics_pass_promtool_and_report_latency(deployment: Deployment, tmp_path: Path) -> None:
    deployment.apply_topics()
    deployment.publish(RFC_EXAMPLE)
    worker = deployment.worker("w1").start()
    worker.wait_ready(partitions=deployment.partitions)
    wait_for(lambda: worker.metrics().get("recurrence_entries_processed_total") == 10, 60, 0.2, "10 entries")
    _, body = worker.get("/metrics")
    metrics = worker.metrics()
    assert metrics["recurrence_entry_to_output_seconds_count"] == 10
    assert metrics["recurrence_batch_duration_seconds_count"] >= 1
    assert metrics["recurrence_rebalances_total"] >= 1
    assert metrics['recurrence_records_emitted_total{kind="observation"}'] == 6
    assert any(name.startswith("process_resident_memory_bytes") for name in metrics)
    assert worker.lag() == 0
    promtool = find("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (`make tools`); the exposition was checked by parsing only")
    check = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, check=False)
    print(f"\n[promtool check metrics] exit {check.returncode}: {(check.stdout + check.stderr).decode()!r}")
    assert check.returncode == 0, check.stdout + check.stderr


def test_one_config_file_for_topics_apply_and_the_worker(deployment: Deployment, tmp_path: Path) -> None:
    # docs/kafka.md's managed-cluster shape: the layout lives in the file, no command repeats it.
    config = tmp_path / "recurrence.toml"
    config.write_text(f'[topics]\ntopic_prefix = "{deployment.prefix}"\npartitions = 6\n')
    env = {k: v for k, v in deployment.env().items() if k != "RECURRENCE_PARTITIONS"}
    env["RECURRENCE_CONFIG"] = str(config)
    deployment.env = lambda: env  # type: ignore[method-assign]
    applied = deployment.run("topics", "apply")
    assert applied.stdout.count("created") == len(topic_specs(StreamSettings()))
    worker = deployment.worker("w1").start()
    report = worker.wait_ready(partitions=6)
    assert report["partitions"] == [0, 1, 2, 3, 4, 5]


def test_review_consumer_dedupes_and_commits(deployment: Deployment, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, generate(JournalSpec(entries=400, scopes=6, seed=4, garbage_ratio=0.0)))
    deployment.apply_topics()
    deployment.publish(journal)
    deployment.worker("w1").start()
    deployment.run("ledger-dump", "--until-caught-up", "--max-wait", "120", "--kinds", "review")
    expected = deployment.run("ledger-dump", "--kinds", "reviews").stdout.splitlines()
    assert expected, "the journal should produce admissions"
    command = [
        sys.executable,
        "-m",
        "recurrence_ledger.processor.stream.clients.review_consumer",
        "--group",
        f"{deployment.prefix}-review",
        "--idle-exit",
        "3",
    ]
    first = subprocess.run(command, env=deployment.env(), capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stderr
    assert sorted(first.stdout.splitlines()) == sorted(expected)
    # Its offsets are committed: a second run in the same group has nothing new.
    again = subprocess.run(command, env=deployment.env(), capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0 and again.stdout == "", again.stderr


def test_ledger_dump_reads_from_an_offset_one_partition_and_formats_like_kcat(
    deployment: Deployment, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, generate(JournalSpec(entries=300, scopes=8, seed=5, garbage_ratio=0.0)))
    oracle = Oracle.run(journal, tmp_path)
    deployment.apply_topics()
    deployment.publish(journal)
    deployment.worker("w1").start()
    deployment.run("ledger-dump", "--until-caught-up", "--max-wait", "120")
    default = deployment.run("ledger-dump").stdout
    assert default == deployment.run("ledger-dump", "--format", "%s\\n").stdout
    assert sorted(default.splitlines()) == sorted(r.decode() for r in oracle.records)
    # Where every record is: topic, partition, offset, and the record itself (one raw record per line).
    where = [
        line.split(" ", 3)
        for line in deployment.run("ledger-dump", "--no-dedupe", "--format", "%t %p %o %s\\n").stdout.splitlines()
    ]
    assert sorted(record for *_, record in where) == sorted(
        deployment.run("ledger-dump", "--no-dedupe").stdout.splitlines()
    )
    ledger = f"{deployment.prefix}.ledger"
    offsets: dict[tuple[str, int], list[int]] = {(topic, int(part)): [] for topic, part, _, _ in where}
    for topic, part, offset, _ in where:
        offsets[(topic, int(part))].append(int(offset))
    in_zero = sorted(offsets[(ledger, 0)])
    assert len(in_zero) > 5

    def dump(*args: str) -> list[str]:
        return deployment.run("ledger-dump", "--no-dedupe", *args).stdout.splitlines()

    only_zero = dump("--partition", "0", "--format", "%t %p\\n")
    assert sorted(only_zero) == sorted(f"{t} 0" for (t, p), found in offsets.items() if p == 0 for _ in found)
    assert sorted(int(o) for o in dump("--kinds", "ledger", "--partition", "0", "--format", "%o\\n")) == in_zero
    assert (
        sorted(int(o) for o in dump("--kinds", "ledger", "--partition", "0", "--offset", "-2", "--format", "%o\\n"))
        == in_zero[-2:]
    )
    assert (
        sorted(
            int(o)
            for o in dump("--kinds", "ledger", "--partition", "0", "--offset", str(in_zero[3]), "--format", "%o\\n")
        )
        == in_zero[3:]
    )
    assert dump("--offset", "end") == []
    refused = deployment.run("ledger-dump", "--partition", "99", check=False)
    assert refused.returncode == 2 and "--partition 99" in refused.stderr.strip().splitlines()[-1]


def test_missing_topic_and_unresponsive_broker_fail_in_one_line(deployment: Deployment) -> None:
    missing = deployment.run("publish", str(RFC_EXAMPLE), check=False)
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "recurrence topics apply" in missing.stderr
    assert "Unclosed" not in missing.stderr and "ERROR" not in missing.stderr

    # A port that accepts connections and never answers: the timeout bounds every command.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        for argv in (["publish", str(RFC_EXAMPLE)], ["ledger-dump"], ["topics", "apply"], ["status"]):
            began = time.monotonic()
            result = deployment.run(*argv, "--bootstrap-servers", address, "--timeout", "2", check=False, timeout=60)
            elapsed = time.monotonic() - began
            assert result.returncode == 2, (argv, result.stderr)
            assert result.stderr.count("\n") == 1 and address in result.stderr, result.stderr
            assert "Unclosed" not in result.stderr and elapsed < 15, (argv, elapsed)
