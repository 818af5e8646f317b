"""The command blocks of README.md and docs/*.md, and running the ones marked runnable exactly as written.

A fenced ``sh`` block is *runnable* when the line right before its fence is
``<!-- runnable -->`` (no broker), ``<!-- runnable: kafka -->`` (needs one) or
``<!-- runnable: secure -->`` (the secured broker: ``tests/cluster/test_docs.py``). It
runs verbatim as one bash script (``set -euo pipefail``) in a scratch folder that
holds a copy of ``examples/``, with the installed ``recurrence`` first on PATH and
no ``KAFKA_*`` or ``RECURRENCE_*`` variable from the test's environment: what a
newcomer who pastes it into a fresh clone gets. For a Kafka block the scratch
folder's ``deploy/kafka/kafka.sh`` answers ``up`` with the test session's broker
(the real script is driven by the session itself, ``devkit.localrun``), and the
deployment gets a topic prefix of its own.

Other ``sh`` blocks show commands with placeholders; ``tests/kafka/test_docs.py``
runs those with substitutions.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE: Final = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
MARK: Final = re.compile(r"<!--\s*runnable(?::\s*(\w+))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the fence
    text: str
    runnable: str | None  # None: not marked; "" runnable without a broker; "kafka" with one

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            runnable = (mark.group(1) or "") if mark else None
            found.append(Block(doc, text[: match.start()].count("\n") + 1, match.group(1), runnable))
    return found


def runnable(kind: str) -> list[Block]:
    """The blocks marked runnable with ``kind`` ("" without a broker, "kafka")."""
    return [b for b in blocks() if b.runnable == kind]


def _broker_script(line: str) -> str:
    return (
        "#!/usr/bin/env bash\n"
        "# The test's stand-in for deploy/kafka/kafka.sh: the session's broker is already up.\n"
        f'if [ "${{1:-}}" = up ]; then echo "{line}"; fi\n'
    )


def block_environment(**extra: str) -> dict[str, str]:
    """What a documented block runs in: this environment without its Kafka and recurrence settings (the
    block sets its own), this interpreter's ``bin`` first on PATH, unbuffered Python, then ``extra``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "RECURRENCE_"))}
    environment.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}", PYTHONUNBUFFERED="1", **extra
    )
    return environment


@contextlib.contextmanager
def script_session(script: str, scratch: Path, environment: dict[str, str]) -> Iterator["subprocess.Popen[bytes]"]:
    """``bash -c SCRIPT`` in ``scratch``, its output in ``scratch/block.log``, in a session of its own that is
    killed on exit, with whatever the script left running (a worker started with ``&``)."""
    with (scratch / "block.log").open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=scratch,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def run_verbatim(
    block: Block,
    scratch: Path,
    bootstrap: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300.0,
    up_line: str | None = None,
) -> str:
    """Run ``block`` as written in ``scratch``; its output. AssertionError with the script and output on failure.

    Processes the block leaves running (a worker started with ``&``) are killed afterwards.
    """
    scratch.mkdir(parents=True)
    shutil.copytree(REPO / "examples", scratch / "examples")
    if bootstrap is not None or up_line is not None:
        # ``kafka.sh up`` answers with the session broker's line (``up secure``: its RECURRENCE_CONFIG=...).
        script = scratch / "deploy" / "kafka" / "kafka.sh"
        script.parent.mkdir(parents=True)
        script.write_text(_broker_script(up_line or f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}"))
    code: int | None
    with script_session("set -euo pipefail\n" + block.text, scratch, block_environment(**(env or {}))) as proc:
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
    output = (scratch / "block.log").read_text(errors="replace")
    assert code == 0, f"{block.where} exited {code}:\n{block.text}\n--- output ---\n{output[-4000:]}"
    return output


#: What ``run_verbatim`` puts in the scratch folder itself (the rest is what the block wrote).
_SCAFFOLD: Final = frozenset({"examples", "deploy", "block.log"})


def not_ignored(names: Iterable[str]) -> list[str]:
    """The names (paths relative to the checkout's root) that git would list as untracked there."""
    names = sorted(names)
    if not names:
        return []
    found = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(names) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode in (0, 1), found.stderr  # 1: none of them is ignored
    ignored = set(found.stdout.splitlines())
    return [name for name in names if name not in ignored]


def written(scratch: Path) -> list[str]:
    """What a block wrote in its working folder, as git names the paths (a folder with its slash)."""
    return [entry.name + ("/" if entry.is_dir() else "") for entry in scratch.iterdir() if entry.name not in _SCAFFOLD]
