"""A real Kafka broker for the session, and a fresh deployment per test.

Every test in this folder, and only these, gets the ``kafka`` marker (tests/conftest.py):
the folder means "needs a broker" (broker-less tests of the stream code live in
``tests/``), and ``make test-fast`` (``-m "not kafka ..."``) leaves this folder out.

Broker, in order of preference:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set (any cluster; nothing is started or stopped);
2. testcontainers' Kafka container when a Docker engine answers;
3. the project's single-node KRaft broker: ``bash deploy/kafka/kafka.sh up``, and
   ``down`` at session end -- only if this session started it, and never under
   ``pytest -n`` (``make test`` starts the broker before the processes, dev/suite.sh).
"""

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.deployment import Deployment
from devkit.localrun import KAFKA_SH, LocalBroker


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], check=False, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    if _docker_answers():
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError:
            pass
        else:
            with KafkaContainer().with_kraft() as container:
                yield container.get_bootstrap_server()
            return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Each process would start (and stop) the broker the others use: the broker belongs to the whole run.
        pytest.fail(
            'with pytest -n, start the broker first (`make test` does: `export "$(bash deploy/kafka/kafka.sh '
            'up)"`) or set KAFKA_BOOTSTRAP_SERVERS'
        )
    if not KAFKA_SH.exists():
        pytest.fail(f"no broker: set KAFKA_BOOTSTRAP_SERVERS, run Docker, or provide {KAFKA_SH}")
    try:
        broker = LocalBroker().__enter__()
    except RuntimeError as failure:
        pytest.fail(str(failure))
    try:
        yield broker.bootstrap
    finally:
        broker.__exit__(None, None, None)


@pytest.fixture
def deployment(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Deployment]:
    """Unique topics, consumer group, data directories and ports; workers killed in teardown."""
    deployment = Deployment(kafka_bootstrap, tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


@pytest.fixture(params=["at_least_once", "exactly_once"])
def guarantee(deployment: Deployment, request: pytest.FixtureRequest) -> str:
    """Each processing guarantee in turn (a test per guarantee), set on the test's ``deployment``."""
    deployment.guarantee = str(request.param)
    return deployment.guarantee
