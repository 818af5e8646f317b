"""Every command the docs show, run against the test broker.

Blocks marked ``<!-- runnable: kafka -->`` run exactly as written
(``tests/support/docblocks.py``): a newcomer's first five minutes. Their worker binds
the documented port 6066, so concurrent runs of this test on one machine take
turns (a lock file), and a port held by something else skips the test with the
reason.

Every other fenced ``sh`` block of README.md and docs/*.md runs as one bash
script (``set -euo pipefail``) in a scratch directory (``examples/`` linked
in), against the test broker, with these substitutions so it cannot touch
anything outside the test:

* the local broker address ``127.0.0.1:19092`` -> the test broker, web port
  ``6066`` -> a free port, ``/var/lib/recurrence`` -> the scratch directory,
  a unique ``RECURRENCE_TOPIC_PREFIX`` per block;
* the managed-cluster example's brokers, ``SASL_SSL``, replication 3 and
  min.insync 2 -> the local single PLAINTEXT broker, 1 and 1 (one local broker
  cannot hold three replicas or speak SASL; the layout still comes only from
  the file, which is what the example shows);
* the embedded section's placeholders (``JOURNAL.jsonl``, ``DIR``,
  ``LEDGER.jsonl``, ``[--optional ...]``) -> real paths, no optional flags;
* ``make X`` -> ``make -C <repo> X``.

A ``recurrence worker`` line runs in the background (the docs' own ``&``, or
added for the managed-cluster example); after the block the test waits until
that worker answers ``/readyz`` and then stops it. ``SKIPPED`` lists the only
commands not run, each with the reason. The test prints how many commands ran.
"""

import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from devkit.localrun import REPO, free_port
from devkit.oracle import Oracle
from tests.support.docblocks import Block as DocBlock
from tests.support.docblocks import not_ignored, run_verbatim, runnable, written

DOCS: Final = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE: Final = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
DOCUMENTED_PORT: Final = 6066
PORT_LOCK: Final = Path("/tmp/recurrence-docs-port-6066.lock")


@contextlib.contextmanager
def documented_port() -> Iterator[None]:
    """Port 6066 for this test alone: other runs of it wait; anything else holding it skips the test."""
    with PORT_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        # As the worker binds (SO_REUSEADDR: connections of a worker just stopped do not count);
        # the previous block's worker may take a moment to exit after its SIGKILL.
        if not wait_until(lambda: _free(DOCUMENTED_PORT), 15):
            pytest.skip(f"port {DOCUMENTED_PORT}, which the docs' worker uses, is taken by another process")
        yield


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _rfc_ledger(scratch: Path) -> bytes:
    return b"".join(r + b"\n" for r in Oracle.run(REPO / "examples" / "rfc-minimum.jsonl", scratch).records)


@pytest.mark.parametrize("block", runnable("kafka"), ids=lambda b: b.where)
def test_a_runnable_kafka_block_runs_as_written(block: DocBlock, kafka_bootstrap: str, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    with documented_port():
        run_verbatim(block, scratch, kafka_bootstrap, env={"RECURRENCE_TOPIC_PREFIX": f"docs{uuid.uuid4().hex[:8]}"})
    # The quick starts promise the embedded ledger, byte for byte, and their state stays in the working folder.
    assert (scratch / "ledger.jsonl").read_bytes() == _rfc_ledger(tmp_path)
    assert any((scratch / "worker-data").iterdir())
    # Pasted into a checkout, it leaves nothing git would list as untracked (.gitignore names what it writes).
    assert not_ignored(written(scratch)) == []
    # The worker's log before its "ready" line is its own: the framework's start-up lines are for debug.
    log = (scratch / "block.log").read_text()
    assert "ready: the statistics page is at" in log and "Starting..." not in log and "Highwater" not in log


# Commands that cannot run inside this test, by prefix, and why.
INSTALLS_A_RELEASE: Final = "installs a release into ~/.venvs (tests/product/test_wheel.py installs this tree's wheel)"
SKIPPED: Final = {
    "make test": "runs the whole suite, this test included",
    "make test-fast": "runs the whole broker-less suite (make test runs it)",
    "make lint": "make test runs it before pytest",
    "make bench": "benchmarks are never run by tests",
    "make bench-kafka": "benchmarks are never run by tests",
    "make schemas": "rewrites tracked files; tests/core/test_schemas_json.py checks they match the models",
    "make tools": "installs the checkers; make test runs it",
    "make kafka-up": "the session fixture owns the test broker",
    "make kafka-down": "the session fixture owns the test broker",
    "docker": "no Docker engine here",
    "kubectl": "no Kubernetes cluster here (tests/stream/test_deploy.py validates the manifest)",
    "python3.11 -m venv ~/.venvs/recurrence": INSTALLS_A_RELEASE,
    "~/.venvs/recurrence/bin/pip install": INSTALLS_A_RELEASE,
    "~/.venvs/recurrence/bin/recurrence --version": INSTALLS_A_RELEASE,
}


@dataclass
class Block:
    doc: Path
    line: int
    commands: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)


def logical_commands(text: str) -> list[str]:
    """Lines joined across backslash continuations, a heredoc kept with its command."""
    commands: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                body.append(lines[i])
                i += 1
            line = "\n".join([line, *body, heredoc.group(1)])
            i += 1
        commands.append(line)
    return commands


def blocks() -> list[Block]:
    """The blocks not marked runnable (those run as written, above)."""
    verbatim = {(b.doc, b.line) for b in runnable("") + runnable("kafka") + runnable("secure")}
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 1
            if (doc, line) not in verbatim:
                found.append(Block(doc, line, logical_commands(match.group(1))))
    return found


def substitute(command: str, bootstrap: str, port: int, scratch: Path) -> str:
    replacements = {
        "127.0.0.1:19092": bootstrap,
        '"b-1.example:9096,b-2.example:9096"': f'"{bootstrap}"',
        '"SASL_SSL"': '"PLAINTEXT"',
        "replication = 3": "replication = 1",
        "min_insync = 2": "min_insync = 1",
        "/var/lib/recurrence": str(scratch / "var"),
        "JOURNAL.jsonl": "examples/rfc-minimum.jsonl",
        "< journal.jsonl": "< examples/rfc-minimum.jsonl",
        "LEDGER.jsonl": str(scratch / "embedded-ledger.jsonl"),
    }
    for old, new in replacements.items():
        command = command.replace(old, new)
    command = re.sub(r"\b6066\b", str(port), command)
    command = re.sub(r"--state DIR\b", f"--state {scratch / 'embedded-state'}", command)
    command = re.sub(r"\s\[--[^\]]*\]", "", command)  # optional flags shown in brackets
    command = re.sub(r"^make ", f"make -C {REPO} ", command)
    if command.startswith("recurrence worker") and not command.rstrip().endswith("&"):
        command = command.split("#")[0].rstrip() + " &"  # a foreground worker would never return
    return command


def _skip_reason(command: str) -> str | None:
    # Whole words: "make test" does not match "make test-fast".
    return next((why for prefix, why in SKIPPED.items() if re.match(rf"{re.escape(prefix)}(?![\w-])", command)), None)


def _ready(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    return False


def run_block(block: Block, bootstrap: str, scratch: Path) -> tuple[int, list[tuple[str, str]]]:
    scratch.mkdir(parents=True)
    (scratch / "examples").symlink_to(REPO / "examples")
    port = free_port()
    script = ["set -euo pipefail"]
    ran = 0
    skipped = []
    for command in block.commands:
        why = _skip_reason(command)
        if why is not None:
            skipped.append((command.splitlines()[0], why))
            continue
        script.append(substitute(command, bootstrap, port, scratch))
        ran += 1
    if ran == 0:
        return 0, skipped
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "RECURRENCE_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        RECURRENCE_TOPIC_PREFIX=f"docs{uuid.uuid4().hex[:8]}",
        RECURRENCE_WEB_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    log = scratch / "block.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", "\n".join(script)],
            cwd=scratch,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=300)
            worker = any("recurrence worker" in line for line in script)
            ready = _ready(port, 90) if worker and code == 0 else True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the block's background worker, if any
    where = f"{block.doc.relative_to(REPO)}:{block.line}"
    output = log.read_text()[-4000:]
    assert code == 0, f"{where} failed ({code}):\n" + "\n".join(script) + "\n--- output ---\n" + output
    assert ready, f"{where}: the worker never became ready\n{log.read_text()[-4000:]}"
    ledger = scratch / "ledger.jsonl"
    if ledger.exists():  # the quick starts promise the embedded ledger, byte for byte
        oracle = Oracle.run(REPO / "examples" / "rfc-minimum.jsonl", scratch)
        assert ledger.read_bytes() == b"".join(r + b"\n" for r in oracle.records), where
    return ran, skipped


def test_every_documented_command_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    found = blocks()
    assert found, "no sh blocks found"
    total = 0
    report = []
    for index, block in enumerate(found):
        ran, skipped = run_block(block, kafka_bootstrap, tmp_path / f"block{index}")
        total += ran
        report.append(f"  {block.doc.relative_to(REPO)}:{block.line}: {ran} run, {len(skipped)} skipped")
        report.extend(f"      skipped `{command}`: {why}" for command, why in skipped)
    print(f"\n[docs] {total} commands run from {len(found)} sh blocks\n" + "\n".join(report))
    assert total >= 10
