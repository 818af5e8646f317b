"""One deployment on a real broker: topics under their own prefix, and ``recurrence worker`` subprocesses.

The tests and the benchmarks drive workers the same way: every deployment gets
its own topic prefix (so its own topics, consumer group and changelogs), every
worker its own data directory, port and log file in the deployment's work
directory; workers run in their own process groups, so ``close`` (or
``kill9``) takes their children too.

What a caller asks of a worker: ``/readyz`` (``wait_ready``, ``ready_partitions``),
the durable journal positions in its state (``positions``, ``wait_applied``),
``/metrics``. What it asks of the deployment: the lag of every input of the
group (``progress``, ``wait_drained``: the journal and the patterns agent's
repartition topic, from the committed offsets), and the output topics read back
(``outputs``, ``wait_for_outputs``, compared with ``recurrence_ledger.processor.verify``).
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from recurrence_ledger.processor.stream.clients.dump import DumpSummary, read_records
from recurrence_ledger.processor.stream.clients.faustcompat import kafka_client
from recurrence_ledger.processor.stream.clients.status import GroupProgress, group_progress
from recurrence_ledger.processor.stream.settings import KafkaConnection
from recurrence_ledger.processor.verify import Comparison, compare, distinct
from recurrence_ledger.topics.names import TopicNames, topic_names

from .localrun import free_port, recurrence_command, run_recurrence, wait_for
from .oracle import Oracle
from .releases import Release

# -- a worker ---------------------------------------------------------------------------------


@dataclass
class Worker:
    """One ``recurrence worker`` process (started again and again on the same data directory and log)."""

    deployment: "Deployment"
    name: str
    port: int
    datadir: Path
    extra: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: An earlier release to run instead of this checkout's (the rolling-upgrade test's old worker).
    release: Release | None = None

    @property
    def log_path(self) -> Path:
        return self.deployment.workdir / f"{self.deployment.prefix}-{self.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Worker":
        assert not self.alive(), f"{self.name} is already running"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start #{self.starts} at {time.time():.3f} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [
                    *(recurrence_command() if self.release is None else self.release.command()),
                    "worker",
                    "--datadir",
                    str(self.datadir),
                    "--web-port",
                    str(self.port),
                    "--processing-guarantee",
                    self.deployment.guarantee,
                    *self.extra,
                ],
                env=self.deployment.env() if self.release is None else self.release.env(self.deployment.env()),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.deployment.workdir,
                start_new_session=True,
            )
        if self not in self.deployment.live:
            self.deployment.live.append(self)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        """AssertionError with the log's tail when the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}; {self.log_path}:\n{tail}")

    def signal(self, number: int) -> None:
        """``number`` to the worker's process group (SIGSTOP/SIGCONT pause and resume it)."""
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, number)

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 40.0) -> int | None:
        """Graceful stop (SIGTERM); SIGKILL if it does not exit in time (then None)."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    # -- HTTP

    def get(self, path: str, timeout: float = 15.0) -> tuple[int, bytes]:
        """Status and body, of an error status too; OSError while nothing answers. With the deployment's web
        token when it has one (``RECURRENCE_HTTP_TOKEN`` in its ``extra_env``)."""
        token = self.deployment.extra_env.get("RECURRENCE_HTTP_TOKEN")
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body: bytes = response.read()
                return response.status, body
        except urllib.error.HTTPError as error:
            answer: bytes = error.read()
            return error.code, answer

    def get_json(self, path: str) -> tuple[int, Any]:
        status, body = self.get(path)
        return status, orjson.loads(body) if body else None

    def health(self) -> dict[str, Any] | None:
        """The /readyz report (503 bodies too), or None while the worker does not answer."""
        if not self.alive():
            return None
        try:
            _, body = self.get_json("/readyz")
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def metrics(self) -> dict[str, float]:
        _, body = self.get("/metrics")
        values: dict[str, float] = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def lag(self) -> float:
        """Journal entries not yet applied on this worker's partitions (``recurrence_consumer_lag``)."""
        return sum(v for k, v in self.metrics().items() if k.startswith("recurrence_consumer_lag{"))

    def ready_partitions(self) -> set[int]:
        """The partitions this worker serves, all of them ready (empty while it is not ready)."""
        self.check_alive()
        report = self.health() or {}
        if report.get("status") != "ok" or report.get("ready_partitions") != report.get("partitions"):
            return set()
        return set(report["partitions"])

    def wait_ready(self, timeout: float = 90.0, partitions: int | None = None) -> dict[str, Any]:
        """Until the worker serves its partitions (at least ``partitions`` of them), all ready."""

        def ready() -> dict[str, Any] | None:
            self.check_alive()
            report = self.health()
            if not report or report.get("status") != "ok":
                return None
            if len(report.get("ready_partitions", [])) < (partitions or 1):
                return None
            if report["ready_partitions"] != report["partitions"]:
                return None
            return report

        result: dict[str, Any] = wait_for(ready, timeout, 0.1, f"{self.name} to be ready")
        return result

    def positions(self) -> dict[int, int]:
        """The durable journal position per partition in the worker's state (empty while not answering).

        From ``/readyz``, not ``/metrics``: rendering the Prometheus text costs the worker a few
        milliseconds, which polled 20 times a second was ~5% of its time under measurement.
        """
        self.check_alive()
        report = self.health() or {}
        return {int(partition): int(position) for partition, position in report.get("positions", {}).items()}

    def applied(self) -> int | None:
        """Sum of the durable journal positions in the worker's state (None while not answering)."""
        found = self.positions()
        return sum(found.values()) if found else None

    def wait_applied(self, target: int, timeout: float) -> None:
        wait_for(lambda: (self.applied() or 0) >= target, timeout, what=f"{target} journal entries applied")


def owned_partitions(workers: Sequence[Worker], partitions: int) -> list[set[int]] | None:
    """Each worker's ready partitions once together they serve every partition exactly once, else None."""
    owned = [worker.ready_partitions() for worker in workers]
    if not all(owned) or sum(len(o) for o in owned) != partitions or set().union(*owned) != set(range(partitions)):
        return None
    return owned


# -- a deployment ------------------------------------------------------------------------------


@dataclass
class Deployment:
    bootstrap: str
    workdir: Path
    prefix: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    partitions: int = 4
    guarantee: str = "at_least_once"
    live: list[Worker] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            KAFKA_BOOTSTRAP_SERVERS=self.bootstrap,
            RECURRENCE_TOPIC_PREFIX=self.prefix,
            RECURRENCE_PARTITIONS=str(self.partitions),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    @property
    def group_id(self) -> str:
        """The app id, which is the consumer group: the prefix unless set."""
        return self.extra_env.get("RECURRENCE_APP_ID", self.prefix)

    @property
    def topics(self) -> TopicNames:
        return topic_names(self.prefix, self.group_id)

    @property
    def connection(self) -> KafkaConnection:
        return KafkaConnection(bootstrap_servers=self.bootstrap)

    def run(self, *args: str, check: bool = True, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        result = run_recurrence(*args, timeout=timeout, env=self.env(), cwd=self.workdir)
        if check and result.returncode != 0:
            raise AssertionError(f"recurrence {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
        return result

    def apply_topics(self) -> None:
        self.run("topics", "apply")

    def publish(self, journal: Path, timeout: float = 600.0) -> str:
        """``recurrence publish``, to its end; its summary line (stderr)."""
        return self.run("publish", str(journal), timeout=timeout).stderr

    def publish_in_background(self, journal: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*recurrence_command(), "publish", str(journal)],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.workdir,
        )

    def worker(self, name: str, *extra: str, release: Release | None = None) -> Worker:
        return Worker(self, name, free_port(), self.workdir / f"{self.prefix}-{name}-data", extra, release=release)

    # -- what the group has done

    def one_worker_through(self, journal: Path, oracle: Oracle, timeout: float = 120.0) -> tuple[Worker, list[bytes]]:
        """Topics applied, ``journal`` published, worker w1 ready on every partition and the output topics
        equal to ``oracle``'s ledger: the worker and the outputs read."""
        self.apply_topics()
        self.publish(journal)
        worker = self.worker("w1").start()
        worker.wait_ready(partitions=self.partitions)
        return worker, self.wait_for_outputs(oracle, timeout=timeout)

    def two_workers_through(self, journal: Path, records: int) -> list[Worker]:
        """Topics applied, workers w1 and w2 owning every partition between them, ``journal`` published, and
        the output topics holding ``records`` distinct records, on a stable split: the two workers."""
        self.apply_topics()
        workers = [self.worker("w1").start(), self.worker("w2").start()]
        wait_for(lambda: owned_partitions(workers, self.partitions), 120, 0.2, "both workers to own partitions")
        self.publish(journal)
        wait_for(lambda: len(distinct(self.outputs())) == records, 180, 0.5, "every output record")
        wait_for(lambda: owned_partitions(workers, self.partitions), 60, 0.2, "a stable split")
        return workers

    def progress(self) -> GroupProgress:
        """Committed offsets against end offsets for every input of the group: the journal, then the
        repartition topic the patterns agent reads (read in that order, see ``wait_drained``)."""
        names = self.topics
        return asyncio.run(group_progress(self.connection, [names.journal, names.recurred], self.group_id))

    def topic_end(self, topic: str) -> int:
        """The sum of the topic's end offsets."""

        async def ends() -> int:
            consumer = AIOKafkaConsumer(**self.connection.aiokafka_kwargs(), group_id=None)
            await consumer.start()
            try:
                partitions = consumer.partitions_for_topic(topic)
                if partitions is None:
                    await kafka_client(consumer).force_metadata_update()
                    partitions = consumer.partitions_for_topic(topic)
                if not partitions:
                    raise LookupError(f"topic {topic} does not exist")
                tps = [TopicPartition(topic, p) for p in sorted(partitions)]
                return int(sum((await consumer.end_offsets(tps)).values()))
            finally:
                await consumer.stop()

        return asyncio.run(ends())

    def journal_end(self) -> int:
        return self.topic_end(self.topics.journal)

    def wait_drained(self, timeout: float = 180.0) -> GroupProgress:
        """Until no input of the group has lag: every entry of the journal and every recurred observation
        they wrote to the repartition topic applied, the offsets committed.

        A worker's state is complete only then: its journal positions reach the journal's end while the
        patterns agent may still be behind on the repartition topic. The journal is read first, so a
        journal without lag has written all its repartition records before that topic's end is read.
        """
        found: list[GroupProgress] = []

        def drained() -> bool:
            found[:] = [self.progress()]
            return found[0].lag == 0

        try:
            wait_for(drained, timeout, 0.5, "every input of the group to have no lag")
        except AssertionError as error:
            raise AssertionError(f"{error}\n" + "\n".join(found[0].lines() if found else [])) from None
        return found[0]

    # -- the outputs

    def read_outputs(self, deduplicated: bool = True) -> tuple[list[bytes], DumpSummary]:
        """The output topics (ledger, review, dead letters) as ``recurrence ledger-dump`` reads them."""
        return asyncio.run(read_records(self.connection, self.topics.outputs(), dedupe=deduplicated))

    def outputs(self, deduplicated: bool = True) -> list[bytes]:
        return self.read_outputs(deduplicated)[0]

    def wait_for_outputs(self, oracle: Oracle, timeout: float = 180.0) -> list[bytes]:
        """Until the outputs equal the oracle's ledger (``recurrence verify``'s rule); the last dump."""
        last: list[bytes] = []
        result: list[Comparison] = []

        def equal() -> bool:
            last[:] = self.outputs()
            result[:] = [compare(ledger=oracle.records, outputs=last)]
            return result[0].equal

        try:
            wait_for(equal, timeout, 0.5, "the output topics to equal the oracle")
        except AssertionError as timeout_error:
            raise AssertionError(f"{timeout_error}\n" + "\n".join(result[0].lines())) from None
        return last

    def close(self) -> None:
        for worker in self.live:
            worker.kill9()


def write_journal(path: Path, lines: Iterable[bytes]) -> int:
    count = 0
    with path.open("wb") as handle:
        for line in lines:
            handle.write(line + b"\n")
            count += 1
    return count


def quote(scope_id: str) -> str:
    """A scope id as one URL path segment."""
    return urllib.parse.quote(scope_id, safe="")
