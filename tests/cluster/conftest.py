"""The brokers a platform team runs: a secured node and a three-node cluster (``deploy/kafka/kafka.sh``).

Every test in this folder, and only these, gets the ``cluster`` marker (tests/conftest.py):
``make test`` leaves them out (``-m "not cluster"``) and ``make test-cluster`` runs them alone;
``.ci/run`` runs both. Each
broker is started once per session (``kafka.sh up secure|cluster``, on the ports of the
environment: ``KAFKA_SECURE_PORT``, ``KAFKA_CLUSTER_PORT``, ...) and stopped at the end if it was
started here.

The secured node has a SCRAM user per principal the tests need (``USERS``), so each test's
principal holds only the ACLs that test grants it.
"""

import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import pytest

from devkit.deployment import Deployment
from devkit.localrun import run_recurrence
from devkit.topologies import ClusterBroker, SecureBroker

#: The secured node's SCRAM users besides ``admin``: one or more per test.
USERS: Final = (
    "worker",
    "publisher",
    "reader",
    "reader2",
    "worker2",
    "worker3",
    "worker4",
    "reviewer",
    "statsreader",
    "nobody",
    "newcomer",
)
B = TypeVar("B", SecureBroker, ClusterBroker)


def _running(broker: B) -> Iterator[B]:
    """The broker started for the session (a test failure, not an error, when it cannot start), then stopped."""
    try:
        broker.__enter__()
    except RuntimeError as failure:
        pytest.fail(str(failure))
    try:
        yield broker
    finally:
        broker.__exit__(None, None, None)


@pytest.fixture(scope="session")
def secure_broker() -> Iterator[SecureBroker]:
    yield from _running(SecureBroker(USERS))


@pytest.fixture(scope="session")
def cluster_broker() -> Iterator[ClusterBroker]:
    yield from _running(ClusterBroker())


@dataclass
class SecuredDeployment:
    """A deployment on the secured node: its topics under a fresh prefix, each command as a principal."""

    broker: SecureBroker
    deployment: Deployment
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self,
        user: str,
        *args: str,
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``recurrence ARGS`` as ``user`` (its SCRAM credentials, the CA): never raises on its exit code."""
        config = {"RECURRENCE_CONFIG": str(self.broker.config(user))}
        env = {**self.deployment.env(), **config, **(env or {})}
        return run_recurrence(*args, timeout=timeout, cwd=self.deployment.workdir, env=env)


@pytest.fixture
def secured(secure_broker: SecureBroker, tmp_path: Path) -> Iterator[SecuredDeployment]:
    """Unique topics and group on the secured node; its workers killed in teardown."""
    deployment = Deployment(secure_broker.bootstrap, tmp_path)
    try:
        yield SecuredDeployment(secure_broker, deployment)
    finally:
        deployment.close()


@pytest.fixture
def replicated(cluster_broker: ClusterBroker, tmp_path: Path) -> Iterator[Deployment]:
    """A deployment on the three nodes: replication 3, ``min.insync.replicas`` 2."""
    deployment = Deployment(
        cluster_broker.bootstrap, tmp_path, extra_env={"RECURRENCE_REPLICATION": "3", "RECURRENCE_MIN_INSYNC": "2"}
    )
    try:
        yield deployment
    finally:
        deployment.close()
        for node in cluster_broker.nodes:  # a test that failed mid-restart leaves no node down
            if cluster_broker.script("status", "cluster").returncode != 0:
                cluster_broker.script("start", "cluster", str(node))
