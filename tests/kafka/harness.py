"""Test harness for the Kafka path: deployments, worker subprocesses, the embedded oracle.

Every test gets its own topic prefix (so its own topics, consumer group and
changelog), its own data directories and ports; workers are real
``recurrence worker`` subprocesses in their own process groups, killed in
teardown whatever happens.
"""

import asyncio
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from recurrence.processor.embedded import replay, statistics
from recurrence.processor.statedir import MemoryState
from recurrence.processor.store.base import StateStore
from recurrence.processor.stream.clients.dump import read_records, record_id
from recurrence.processor.stream.localrun import REPO, free_port, recurrence_command, wait_for
from recurrence.processor.stream.settings import KafkaConnection

# The local-run helpers are re-exported: tests import everything Kafka from here.
__all__ = [
    "REPO",
    "Deployment",
    "Oracle",
    "Worker",
    "by_scope",
    "comparable",
    "dedupe",
    "describe_difference",
    "free_port",
    "quote",
    "recurrence_command",
    "wait_for",
    "write_journal",
]

# -- comparison ----------------------------------------------------------------------------


def dedupe(records: Iterable[bytes]) -> list[bytes]:
    seen: set[str] = set()
    kept = []
    for value in records:
        ident = record_id(value)
        if ident not in seen:
            seen.add(ident)
            kept.append(value)
    return kept


def comparable(value: bytes) -> bytes:
    """A record as the two runners must agree on it: a dead letter without its origin and id.

    The embedded runner's dead letters come from a file line, the worker's from a
    topic offset (contract section 2); everything else about them must be equal.
    """
    record = orjson.loads(value)
    if record.get("record") != "dead_letter":
        return value
    record.pop("origin")
    record.pop("dead_letter_id")
    return orjson.dumps(record)


def by_scope(records: Iterable[bytes]) -> dict[str | None, list[bytes]]:
    """Deduplicated records grouped by scope, each list in order (the comparison the contract fixes)."""
    grouped: dict[str | None, list[bytes]] = defaultdict(list)
    for value in dedupe(records):
        grouped[orjson.loads(value).get("scope_id")].append(comparable(value))
    return dict(grouped)


def describe_difference(got: dict[str | None, list[bytes]], want: dict[str | None, list[bytes]]) -> str:
    lines = [f"scopes: got {len(got)}, want {len(want)}"]
    for scope in sorted(set(got) | set(want), key=str):
        g, w = got.get(scope, []), want.get(scope, [])
        if g != w:
            first = next((i for i, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
            lines.append(f"scope {scope!r}: got {len(g)} records, want {len(w)}; first difference at #{first}")
            if first < min(len(g), len(w)):
                lines.append(f"  got:  {g[first][:400]!r}\n  want: {w[first][:400]!r}")
            if len(lines) > 8:
                break
    return "\n".join(lines)


@dataclass
class Oracle:
    """The embedded runner over the same journal: its ledger and its state for statistics."""

    records: list[bytes]
    store: StateStore

    @classmethod
    def run(cls, journal: Path, workdir: Path) -> "Oracle":
        state = MemoryState()
        out = workdir / f"oracle-{uuid.uuid4().hex[:8]}.jsonl"
        replay(str(journal), state, out)
        store = state.view()
        records = [line.rstrip(b"\n") for line in out.read_bytes().splitlines() if line.strip()]
        return cls(records, store)

    def statistics(self, scope_id: str | None = None, top: int | None = None) -> list[dict[str, Any]]:
        return statistics(self.store, scope_id, top)

    @property
    def grouped(self) -> dict[str | None, list[bytes]]:
        return by_scope(self.records)


# -- workers ---------------------------------------------------------------------------------


@dataclass
class Worker:
    deployment: "Deployment"
    name: str
    port: int
    datadir: Path
    extra: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.deployment.workdir / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Worker":
        assert self.proc is None or self.proc.poll() is not None, "worker already running"
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"\n===== start #{self.starts} at {time.time():.3f} =====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [
                *recurrence_command(), "worker",
                "--datadir", str(self.datadir),
                "--web-port", str(self.port),
                "--processing-guarantee", self.deployment.guarantee,
                *self.extra,
            ],
            env=self.deployment.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.deployment.workdir,
            start_new_session=True,
        )
        log.close()
        self.deployment.live.append(self)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 40.0) -> int | None:
        """Graceful stop (SIGTERM); SIGKILL if it does not exit in time."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def get(self, path: str, timeout: float = 15.0) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                body = response.read()
                return response.status, body
        except urllib.error.HTTPError as error:
            return error.code, error.read()

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
        """Sum of recurrence_consumer_lag over this worker's partitions."""
        return sum(v for k, v in self.metrics().items() if k.startswith("recurrence_consumer_lag{"))

    def wait_ready(self, timeout: float = 90.0, partitions: int | None = None) -> dict[str, Any]:
        """Until the worker serves its partitions (at least ``partitions`` of them)."""

        def ready() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
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

    def run(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*recurrence_command(), *args],
            check=False, env=self.env(), capture_output=True, text=True, timeout=timeout, cwd=self.workdir,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"recurrence {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def apply_topics(self) -> None:
        self.run("topics", "apply")

    def publish(self, journal: Path) -> str:
        return self.run("publish", str(journal)).stderr

    def worker(self, name: str, *extra: str) -> Worker:
        return Worker(self, name, free_port(), self.workdir / f"{name}-data", extra)

    @property
    def connection(self) -> KafkaConnection:
        return KafkaConnection(bootstrap_servers=self.bootstrap)

    def outputs(self, deduplicated: bool = True) -> list[bytes]:
        names = [f"{self.prefix}.ledger", f"{self.prefix}.review", f"{self.prefix}.dead-letters"]
        records, _ = asyncio.run(read_records(self.connection, names, dedupe=deduplicated))
        return records

    def wait_for_outputs(self, oracle: Oracle, timeout: float = 180.0) -> list[bytes]:
        """Until the deduplicated output equals the oracle (per scope, in order); the last dump."""
        want = oracle.grouped
        last: list[list[bytes]] = [[]]

        def equal() -> bool:
            last[0] = self.outputs()
            return by_scope(last[0]) == want

        try:
            wait_for(equal, timeout, 0.5, "the output topics to equal the oracle")
        except AssertionError as timeout_error:
            raise AssertionError(f"{timeout_error}\n{describe_difference(by_scope(last[0]), want)}") from None
        return last[0]

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
    return urllib.parse.quote(scope_id, safe="")
