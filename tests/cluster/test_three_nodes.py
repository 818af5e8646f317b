"""Three brokers, replication 3 and ``min.insync.replicas`` 2, two exactly_once workers: failures of both.

A broker is killed with SIGKILL while the workers have entries pending, and started again; then a
worker is killed and started again. The read_committed outputs, read raw (``ledger-dump
--no-dedupe``), hold no record twice, and ``verify``'s rule finds them equal to the embedded
ledger. Then every broker is restarted in turn (a rolling restart: each one stopped, started, and
every replica back in sync before the next) while the journal keeps arriving; the same check.
"""

import threading
import time
from pathlib import Path

from devkit.deployment import Deployment, Worker, owned_partitions, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from devkit.topologies import ClusterBroker
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import compare, distinct

CHUNKS = 6
CHUNK = 700


def raw_outputs(deployment: Deployment, out: Path) -> list[bytes]:
    """``recurrence ledger-dump --no-dedupe``: every committed output record, duplicates included."""
    deployment.run("ledger-dump", "--no-dedupe", "--out", str(out), "--force")
    return [line for line in out.read_bytes().splitlines() if line.strip()]


def check(deployment: Deployment, oracle: Oracle, tmp_path: Path, what: str) -> tuple[int, int]:
    """Outputs equal to the oracle and no duplicate among the raw records; (records, duplicates)."""
    deployment.wait_for_outputs(oracle, timeout=240)
    raw = raw_outputs(deployment, tmp_path / f"raw-{what}.jsonl")
    inherent = len(oracle.records) - len(distinct(oracle.records))  # identical dead letters of repeated lines
    duplicates = len(raw) - len(distinct(raw)) - inherent
    comparison = compare(ledger=oracle.records, outputs=distinct(raw))
    assert comparison.equal, "\n".join(comparison.lines())
    assert duplicates == 0, f"{what}: a read_committed consumer saw {duplicates} records twice"
    return len(raw), duplicates


def both_serving(workers: list[Worker], partitions: int, timeout: float = 180) -> None:
    wait_for(lambda: owned_partitions(workers, partitions), timeout, 0.2, "both workers to serve every partition")


def test_broker_and_worker_crashes_then_a_rolling_restart(
    replicated: Deployment, cluster_broker: ClusterBroker, tmp_path: Path
) -> None:
    deployment = replicated
    deployment.guarantee = "exactly_once"
    deployment.partitions = 6
    # A publish waits out a leader election (a broker killed: its partitions move after its session ends).
    deployment.extra_env["RECURRENCE_TIMEOUT"] = "60"
    lines = list(generate(JournalSpec(entries=CHUNKS * CHUNK, scopes=60, seed=36, garbage_ratio=0.01)))
    chunks = [tmp_path / f"chunk{k}.jsonl" for k in range(CHUNKS)]
    for k, chunk in enumerate(chunks):
        write_journal(chunk, lines[k * CHUNK : (k + 1) * CHUNK])

    def oracle_of(count: int) -> Oracle:
        prefix = tmp_path / f"prefix{count}.jsonl"
        write_journal(prefix, lines[: count * CHUNK])
        return Oracle.run(prefix, tmp_path)

    deployment.apply_topics()
    workers = [
        deployment.worker(name, "--instance-id", f"{deployment.prefix}-{name}", "--batch-max", "200").start()
        for name in ("w1", "w2")
    ]
    both_serving(workers, deployment.partitions)
    deployment.publish(chunks[0])

    # A broker crashes while the workers have entries pending, and comes back.
    deployment.publish(chunks[1])
    pending = sum(w.lag() for w in workers)
    began = time.monotonic()
    cluster_broker.kill(1)
    deployment.publish(chunks[2])  # to the two left: min.insync.replicas 2 still holds
    cluster_broker.start(1)
    broker_back = time.monotonic() - began
    cluster_broker.wait_in_sync()
    # Then a worker crashes, and comes back.
    workers[0].kill9()
    workers[0].start()
    both_serving(workers, deployment.partitions)
    first = check(deployment, oracle_of(3), tmp_path, "crashes")

    # A rolling restart of every broker while the journal keeps arriving.
    def publish_the_rest() -> None:
        for chunk in chunks[3:]:
            deployment.publish(chunk)

    publisher = threading.Thread(target=publish_the_rest)
    publisher.start()
    rolling = time.monotonic()
    for node in cluster_broker.nodes:
        cluster_broker.stop(node)
        cluster_broker.start(node)
        cluster_broker.wait_in_sync()
    rolling_seconds = time.monotonic() - rolling
    publisher.join(timeout=300)
    assert not publisher.is_alive()
    for worker in workers:
        worker.check_alive()
    second = check(deployment, oracle_of(CHUNKS), tmp_path, "rolling")
    restarts = [w.starts for w in workers]
    print(
        f"\n[three nodes] broker 1 killed with {pending:.0f} entries pending, back in {broker_back:.1f}s; worker w1 "
        f"killed; outputs {first[0]} raw records, {first[1]} duplicates. Rolling restart of 3 brokers under load in "
        f"{rolling_seconds:.0f}s; outputs {second[0]} raw records, {second[1]} duplicates; worker starts {restarts}"
    )
