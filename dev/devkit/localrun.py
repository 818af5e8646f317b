"""Running the product locally against a real broker: shared by the Kafka tests and the Kafka benchmarks.

A broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set, else the project's
single-node KRaft broker (``deploy/kafka/kafka.sh``), stopped at the end only
if it was started here. ``recurrence_command`` runs the installed CLI (or the
module when no script is installed; ``run_recurrence`` runs it once), ``replay_command`` is a replay's command line,
``serve_process`` starts ``recurrence serve`` and waits until it answers, ``free_port`` finds
a port on 127.0.0.1, ``wait_for`` polls a condition with a deadline,
``chromium_arguments`` are the headless browser's switches of the page tests and benchmark.
"""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # dev/devkit/localrun.py
KAFKA_SH = REPO / "deploy" / "kafka" / "kafka.sh"


def recurrence_command() -> list[str]:
    script = Path(sys.executable).parent / "recurrence"
    return [str(script)] if script.exists() else [sys.executable, "-m", "recurrence_ledger.processor.cli"]


def run_recurrence(
    *args: str, timeout: float, check: bool = False, **options: Any
) -> "subprocess.CompletedProcess[str]":
    """``recurrence ARGS`` with its output captured as text; raises on its exit code only with ``check``
    (``options``: the rest of ``subprocess.run``'s, e.g. ``env``, ``cwd``)."""
    command = [*recurrence_command(), *args]
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=timeout, **options)


def replay_command(
    journal: str | Path, state: str | Path, out: str | Path, *extra: str, command: Sequence[str] = ()
) -> list[str]:
    """``recurrence replay JOURNAL --state STATE --out OUT EXTRA...``, through ``command`` when given (a
    module run, a probe around it), else ``recurrence_command()``."""
    head = list(command) or recurrence_command()
    return [*head, "replay", str(journal), "--state", str(state), "--out", str(out), *extra]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_process(
    state: str | Path, stderr: int = subprocess.PIPE, timeout: float = 30
) -> tuple[str, "subprocess.Popen[bytes]"]:
    """``recurrence serve --state STATE`` on a free port, once ``/livez`` answers 200: its URL and process."""
    port = free_port()
    command = [*recurrence_command(), "serve", "--state", str(state), "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url + "/livez", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for(lambda: server.poll() is None and answers(), timeout, 0.1, "recurrence serve")
    return url, server


def chromium_arguments(width: int, height: int) -> list[str]:
    """Headless, no sandbox (a container), no GPU, the window size the page is measured at."""
    return [
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ]


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
