"""The other brokers ``deploy/kafka/kafka.sh`` starts: a three-node cluster and a secured node.

Each is started by ``kafka.sh up cluster|secure`` on entering and stopped by ``down`` on leaving,
but only when it was started here (one already running is used as it is; its ports and users
are then whatever it was started with). Ports come from the environment as the script reads them
(``KAFKA_CLUSTER_PORT``, ``KAFKA_SECURE_PORT``, ... ; deploy/kafka/README.md).

``ClusterBroker`` also kills, stops and starts single nodes (the cluster tests' broker failures).
``SecureBroker`` hands out each SCRAM user's client settings (a ``recurrence --config`` file),
the CA, the super user's Java tool properties, and runs ``kafka-acls`` (Kafka's own AclCommand
from the jars the script fetched).
"""

import asyncio
import os
import subprocess
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from aiokafka.admin import AIOKafkaAdminClient

from .localrun import KAFKA_SH, REPO, wait_for

#: Kafka's ``kafka-acls`` command, run from the jars ``kafka.sh`` fetched.
ACL_COMMAND: Final = "org.apache.kafka.tools.AclCommand"


class ScriptBroker:
    """One topology of ``kafka.sh``: up on entering, down on leaving if it was started here."""

    topology: str = "single"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {**os.environ, **(env or {})}
        self.started_here = False
        self.line = ""  # what ``up`` printed: NAME=value

    def script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(KAFKA_SH), *args], check=False, capture_output=True, text=True, timeout=timeout, env=self.env
        )

    def __enter__(self) -> Self:
        status = self.script("status", self.topology)
        up = self.script("up", self.topology, timeout=900)
        if up.returncode != 0:
            raise RuntimeError(f"kafka.sh up {self.topology} failed ({up.returncode}):\n{up.stderr[-3000:]}")
        lines = [line for line in up.stdout.splitlines() if "=" in line]
        if len(lines) != 1:
            raise RuntimeError(f"kafka.sh up {self.topology} printed {up.stdout!r}, not one NAME=value line")
        self.line = lines[0]
        self.started_here = status.returncode != 0
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.started_here:
            self.script("down", self.topology, timeout=300)

    @property
    def value(self) -> str:
        return self.line.split("=", 1)[1].strip()


class ClusterBroker(ScriptBroker):
    """Three KRaft nodes (replication 3, ``min.insync.replicas`` 2); nodes are 1, 2 and 3."""

    topology = "cluster"
    nodes: Final = (1, 2, 3)

    @property
    def bootstrap(self) -> str:
        return self.value

    def _node(self, action: str, node: int) -> None:
        result = self.script(action, self.topology, str(node))
        if result.returncode != 0:
            raise RuntimeError(f"kafka.sh {action} cluster {node} failed:\n{result.stderr[-3000:]}")

    def kill(self, node: int) -> None:
        """SIGKILL the node (a crash: no controlled shutdown, no flush)."""
        self._node("kill", node)

    def stop(self, node: int) -> None:
        """SIGTERM the node: a controlled shutdown moves its leaderships first."""
        self._node("stop", node)

    def start(self, node: int) -> None:
        """Start the node again on its data; returns once it answers as a member of the cluster."""
        self._node("start", node)

    def under_replicated(self) -> list[str]:
        """Partitions (``topic:partition``) with fewer in-sync replicas than replicas, over every topic."""
        return asyncio.run(_under_replicated(self.bootstrap))

    def wait_in_sync(self, timeout: float = 120.0) -> None:
        """Until every partition of every topic has all its replicas in sync (a rolling restart's next step)."""
        wait_for(lambda: not self.under_replicated(), timeout, 0.5, "every replica in sync")


async def _under_replicated(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        topics = await admin.list_topics()
        found = []
        for topic in await admin.describe_topics(sorted(topics)):
            for partition in topic["partitions"]:
                if len(partition["isr"]) < len(partition["replicas"]) or partition["leader"] < 0:
                    found.append(f"{topic['topic']}:{partition['partition']}")
        return found
    finally:
        await admin.close()


class SecureBroker(ScriptBroker):
    """One node demanding SASL_SSL + SCRAM-SHA-512, with ACLs enforced; ``admin`` is the super user."""

    topology = "secure"

    def __init__(self, users: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        super().__init__({**(env or {}), "KAFKA_SECURE_USERS": " ".join(users)})
        self.users = tuple(users)

    def __enter__(self) -> "SecureBroker":
        super().__enter__()
        missing = [user for user in self.users if not self.config(user).is_file()]
        if missing:
            raise RuntimeError(
                f"the secured broker already running has no user(s) {', '.join(missing)}: "
                "'bash deploy/kafka/kafka.sh down secure' and run again"
            )
        return self

    @property
    def clients(self) -> Path:
        return Path(self.value).parent  # RECURRENCE_CONFIG=<run dir>/clients/admin.toml

    def config(self, user: str = "admin") -> Path:
        """The user's ``recurrence --config`` file (bootstrap, SASL_SSL, SCRAM-SHA-512, password file, CA)."""
        return self.clients / f"{user}.toml"

    def settings(self, user: str = "admin") -> dict[str, str]:
        kafka: dict[str, str] = tomllib.loads(self.config(user).read_text())["kafka"]
        return kafka

    @property
    def bootstrap(self) -> str:
        return self.settings()["bootstrap_servers"]

    @property
    def ca(self) -> Path:
        return Path(self.settings()["ssl_cafile"])

    @property
    def admin_properties(self) -> Path:
        """The super user's client settings for Kafka's Java tools (``--command-config``)."""
        return self.clients / "admin.properties"

    @property
    def authorizer_log(self) -> Path:
        """Every authorization decision of the node (allowed and denied, with the matching ACL)."""
        return self.clients.parent / "authorizer.log"

    def password(self, user: str) -> str:
        return Path(self.settings(user)["sasl_password_file"]).read_text().strip()

    @property
    def mtls_port(self) -> int:
        return int(self.env.get("KAFKA_SECURE_MTLS_PORT", "19293"))

    def kafka_acls(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``kafka-acls ARGS`` (Kafka's AclCommand from the fetched jars)."""
        libs = Path(
            self.env.get(
                "KAFKA_LIBS_DIR", str(Path(self.env.get("KAFKA_CACHE_DIR", REPO / ".cache")) / "kafka" / "libs")
            )
        )
        return subprocess.run(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", f"{libs}/*", ACL_COMMAND, *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
