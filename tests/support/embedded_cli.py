"""Helpers for the embedded runner's end-to-end tests: the real CLI in a subprocess, fault hooks.

Faults are injected without product test hooks: ``hook_env`` puts a generated
``sitecustomize.py`` on the child's PYTHONPATH that wraps ``os.fsync``,
``Transaction.flush`` or ``Engine.process`` and, at the Nth call, kills the
process (SIGKILL), sends it signals, or raises ENOSPC, exactly as the outside
world would.
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.synthetic import JournalSpec, write

Target = Literal["fsync", "flush", "process", "commit", "shard", "rename", "apply", "unlink"]
When = Literal["before", "after"]

_SITECUSTOMIZE = '''
import atexit, errno, json, os, signal

_HOOKS = json.loads(os.environ.get("RECURRENCE_TEST_HOOKS", "[]"))
_COUNTS = {}


def _act(hook):
    action = hook["action"]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    else:
        for number in action:
            os.kill(os.getpid(), number)


def _first(hook):
    """A hook with ``once`` fires in the first process that reaches it (forked workers count apart)."""
    if not hook.get("once"):
        return True
    try:
        os.close(os.open(hook["once"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _fire(target, when):
    for hook in _HOOKS:
        if hook["target"] == target and hook["when"] == when:
            key = (target, when)
            _COUNTS[key] = _COUNTS.get(key, 0) + 1
            if _COUNTS[key] == hook["n"] and _first(hook):
                _act(hook)


def _wrap(owner, name, target):
    real = getattr(owner, name)

    def wrapper(*args, **kwargs):
        _fire(target, "before")
        result = real(*args, **kwargs)
        _fire(target, "after")
        return result

    setattr(owner, name, wrapper)


if _HOOKS:
    targets = {hook["target"] for hook in _HOOKS}
    if "fsync" in targets:
        _wrap(os, "fsync", "fsync")
    if "flush" in targets:
        from recurrence_ledger.processor.store.base import Transaction
        _wrap(Transaction, "flush", "flush")
    if "process" in targets:
        from recurrence_ledger.processor.core.engine import Engine
        _wrap(Engine, "process", "process")
    if "commit" in targets:  # the coordinator's commit of a batch: ledger lines, then the main store
        from recurrence_ledger.processor.embedded.coordinator import Run
        _wrap(Run, "_commit", "commit")
    if "shard" in targets:  # a shard flushing committed batches into its partitions
        from recurrence_ledger.processor.embedded.shard import Shard
        _wrap(Shard, "commit", "shard")
    if "rename" in targets:  # recurrence migrate moving the new stores into place
        _wrap(os, "rename", "rename")
    if "apply" in targets:  # a write batch into any RocksDB store
        from recurrence_ledger.processor.store.rocksdb import RocksStore
        _wrap(RocksStore, "apply", "apply")
    if "unlink" in targets:  # a file removed (recurrence migrate removing the single store's files)
        _wrap(os, "unlink", "unlink")
    count_file = os.environ.get("RECURRENCE_TEST_COUNTS")
    if count_file:
        counted = lambda: {f"{t}-{w}": n for (t, w), n in _COUNTS.items()}
        atexit.register(lambda: open(count_file, "w").write(json.dumps(counted())))
'''


@dataclass(frozen=True)
class Hook:
    """At the ``n``-th call of ``target`` (before or after it runs): ``kill``, ``enospc``, or send these signals.

    Counts are per process: a forked worker starts with its parent's.
    """

    target: Target
    when: When
    n: int
    action: str | tuple[int, ...] = "kill"
    once: str = ""  # a path: only the first process to reach the hook acts (its file marks it)


def hook_env(directory: Path, hooks: Sequence[Hook], count_file: Path | None = None) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": str(directory), "RECURRENCE_TEST_HOOKS": json.dumps([asdict(h) for h in hooks])}
    if count_file is not None:
        env["RECURRENCE_TEST_COUNTS"] = str(count_file)
    return env


def call_counts(directory: Path, args: Sequence[str | Path], targets: Sequence[Target]) -> dict[str, int]:
    """How often each target is called in an uninterrupted run (the hooks never fire at n=0)."""
    counts = directory / "counts.json"
    env = hook_env(directory, [Hook(t, "before", 0) for t in targets], counts)
    done = cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(counts.read_text())
    return result


def cli(
    *args: str | Path | bytes,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    preexec_fn: Callable[[], Any] | None = None,
    timeout: float = 120,
) -> "subprocess.CompletedProcess[bytes]":
    command: list[str | bytes] = [sys.executable, "-m", "recurrence_ledger.processor.cli"]
    command += [a if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run(
        command, capture_output=True, input=input, env=env, preexec_fn=preexec_fn, timeout=timeout, check=False
    )


def replay(
    journal: str | Path, state: Path, out: Path | bytes, *extra: str, **kwargs: Any
) -> "subprocess.CompletedProcess[bytes]":
    return cli("replay", journal, "--state", state, "--out", out, *extra, **kwargs)


def stats(state: Path) -> Any:
    """``recurrence stats`` in process (read-only, as the command opens it): a subprocess costs ~0.4 s."""
    store = open_state(state, must_exist=True)
    try:
        return statistics(store, None, None)
    finally:
        store.close()


def one_line(stderr: bytes) -> str:
    """The single readable line a failing run prints (no traceback, no second message)."""
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def journal(path: Path, entries: int = 450, seed: int = 1, scopes: int = 3, garbage: float = 0.0) -> Path:
    write(JournalSpec(entries=entries, scopes=scopes, seed=seed, garbage_ratio=garbage), str(path))
    return path


def head(source: Path, target: Path, lines: int) -> Path:
    target.write_bytes(b"".join(source.read_bytes().splitlines(keepends=True)[:lines]))
    return target


def records(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger.read_bytes().splitlines()]


def dead_letters(ledger: Path) -> list[dict[str, Any]]:
    return [r for r in records(ledger) if r["record"] == "dead_letter"]


def serve_state(state: Path) -> tuple[str, "subprocess.Popen[bytes]"]:
    """``recurrence serve`` on ``state`` at a free port, once it answers ``/livez``: its URL and process."""
    import urllib.request

    from devkit.localrun import free_port, recurrence_command, wait_for

    port = free_port()
    server = subprocess.Popen(
        [*recurrence_command(), "serve", "--state", str(state), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url + "/livez", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for(lambda: server.poll() is None and answers(), 30, 0.1, "recurrence serve")
    return url, server


def stop_server(server: "subprocess.Popen[bytes]") -> None:
    server.terminate()
    server.wait(timeout=30)
