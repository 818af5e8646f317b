"""Running the product locally against a real broker: shared by the Kafka tests and the Kafka benchmarks.

A broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set, else the project's
single-node KRaft broker (``deploy/kafka/kafka.sh``), stopped at the end only
if it was started here. ``recurrence_command`` runs the installed CLI (or the
module when no script is installed), ``free_port`` finds a port on 127.0.0.1,
``wait_for`` polls a condition with a deadline.
"""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # dev/devkit/localrun.py
KAFKA_SH = REPO / "deploy" / "kafka" / "kafka.sh"


def recurrence_command() -> list[str]:
    script = Path(sys.executable).parent / "recurrence"
    return [str(script)] if script.exists() else [sys.executable, "-m", "recurrence_ledger.processor.cli"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(condition: Callable[[], Any], timeout: float, interval: float = 0.25, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something true; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class LocalBroker:
    """``KAFKA_BOOTSTRAP_SERVERS``, or the local KRaft broker (stopped at the end only if started here)."""

    def __init__(self) -> None:
        self.started_here = False
        self.bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")

    def __enter__(self) -> "LocalBroker":
        if self.bootstrap:
            return self
        status = subprocess.run(["bash", str(KAFKA_SH), "status"], check=False, capture_output=True)
        up = subprocess.run(["bash", str(KAFKA_SH), "up"], check=False, capture_output=True, text=True, timeout=900)
        if up.returncode != 0:
            raise RuntimeError(f"kafka.sh up failed ({up.returncode}):\n{up.stderr[-3000:]}")
        lines = [line for line in up.stdout.splitlines() if line.startswith("KAFKA_BOOTSTRAP_SERVERS=")]
        if not lines:
            raise RuntimeError(f"kafka.sh up printed no bootstrap line:\n{up.stdout}\n{up.stderr[-2000:]}")
        self.started_here = status.returncode != 0
        self.bootstrap = lines[-1].split("=", 1)[1].strip()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.started_here:
            subprocess.run(["bash", str(KAFKA_SH), "down"], check=False, capture_output=True, timeout=180)
