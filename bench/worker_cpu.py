"""CPU per entry of a warm worker on a real broker, beside ``recurrence replay --jobs 1`` on the same journal.

Wall-clock ratios on a shared 2-core machine move by a third between runs; CPU
seconds per entry move far less. This publishes a seeded journal to fresh
topics while one worker is paused, resumes it, and reads the CPU of every
thread of the worker (``/proc/PID/task``) and of the broker between the
moment ``--skip`` entries are durable (start-up, the first fetches, the
caches filling: excluded) and the moment all are. The embedded reference is
the difference of two ``replay --jobs 1`` runs (the first ``--skip`` entries
and the whole journal), so start-up cancels out there too.

With ``--profile FILE`` py-spy samples the worker (every thread, 200 Hz, not
idle) over the same window and the samples are sorted into the parts of the
per-entry breakdown (``PARTS``); the raw collapsed stacks land in FILE. py-spy
takes CPU of its own, so a profiled run's rate is not a figure.

    python bench/worker_cpu.py [--entries 60000] [--skip 10000] [--processing-guarantee exactly_once]
        [--profile /tmp/aloe.txt] [--worker-arg=--batch-max=2000]
"""

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from kafka_bench import wait_until_applied
from proccpu import cpu_seconds

import devkit.deployment as deployment_module
from devkit.deployment import Deployment
from devkit.localrun import LocalBroker, replay_command
from recurrence_ledger.processor.synthetic import JournalSpec, write

#: Where a sample's CPU went, first match wins: (part, frame substrings, any of which marks the sample).
#: Checked from the innermost frame outwards per part, parts in this order.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gc", ("<gc>", "collect (gc", "between_batches")),
    ("statistics records", ("finish (recurrence/processor/stream/batch/steps.py",)),
    ("engine", ("process (recurrence/processor/core/engine.py",)),
    ("changelog encode + send", ("_send_change_set", "encode_records")),
    ("change set prepare", ("prepare (recurrence/processor/store/base.py",)),
    ("local RocksDB write", ("flush_local",)),
    ("record index", ("index_record",)),
    ("output records (headers, routes, append)", ("_engine (recurrence/processor/stream/batch/processing.py",)),
    ("producer (aiokafka sender, request encoding)", ("aiokafka/producer", "aiokafka/conn.py", "_send_produce_req")),
    ("consumer thread (fetch, decode)", ("aiokafka/consumer", "_drain_messages", "faust/transport/drivers")),
    ("fetched records -> entries, batching", ("_entries (recurrence", "fetches.py")),
    ("durability bookkeeping (plan, awaits, metrics)", ("recurrence/processor/stream/batch",)),
    ("metrics, probes, web", ("prometheus_client", "recurrence/processor/web", "views.py", "probes.py", "aiohttp")),
    ("snapshots", ("snapshots.py", "snapshottopic.py")),
    ("timers (catch-up, report)", ("catch_up", "report (recurrence")),
    ("event loop, other asyncio", ("asyncio/", "uvloop", "mode/")),
)


def part_of(frames: list[str]) -> str:
    for part, marks in PARTS:
        for frame in reversed(frames):
            if any(mark in frame for mark in marks):
                return part
    return "other"


def breakdown(collapsed: Path) -> dict[str, Any]:
    """py-spy's collapsed stacks (``--threads``) -> samples per part, and per thread."""
    parts: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        thread = frames[0]
        parts[part_of(frames[1:])] += int(count)
        threads[thread] += int(count)
    total = sum(parts.values()) or 1
    return {
        "samples": total,
        "parts": {part: round(n / total, 3) for part, n in parts.most_common()},
        "threads": {thread: round(n / total, 3) for thread, n in threads.most_common(8)},
    }


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread: the main thread (the event loop, the engine), ``tid N`` for each other Python
    thread (Faust's consumer thread, the snapshot thread), RocksDB's by their names (summed)."""
    found: Counter[str] = Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            stat = (task / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            if task.name == str(pid):
                name = "main"
            elif not name.startswith("rocksdb"):
                name = f"tid {task.name}"
            fields = stat.rsplit(")", 1)[1].split()
            found[name] += (int(fields[11]) + int(fields[12])) / tick
    return dict(found)


def embedded_cpu(journal: Path, skip: int, workdir: Path) -> dict[str, Any]:
    """CPU seconds per entry of ``replay --jobs 1`` past the first ``skip`` entries (two runs' difference)."""
    head = workdir / "journal-head.jsonl"
    with journal.open("rb") as source, head.open("wb") as out:
        for number, line in enumerate(source):
            if number >= skip:
                break
            out.write(line)
    used: dict[str, tuple[float, float]] = {}
    for name, path in (("head", head), ("full", journal)):
        state, ledger = workdir / f"embedded-state-{name}", workdir / f"embedded-{name}.jsonl"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(replay_command(path, state, ledger, "--jobs", "1"), check=True, capture_output=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used[name] = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall)
        shutil.rmtree(state, ignore_errors=True)
    entries = sum(1 for line in journal.open("rb") if line.strip())
    cpu = (used["full"][0] - used["head"][0]) / (entries - skip)
    wall = (used["full"][1] - used["head"][1]) / (entries - skip)
    return {
        "cpu_us_per_entry": round(cpu * 1e6, 1),
        "wall_us_per_entry": round(wall * 1e6, 1),
        "whole_run_s": round(used["full"][1], 2),
        "whole_run_entries_per_s": round(entries / used["full"][1]),
    }


def worker_cpu(bootstrap: str, workdir: Path, journal: Path, args: argparse.Namespace) -> dict[str, Any]:
    deployment = Deployment(
        bootstrap,
        workdir,
        prefix=f"cpu{uuid.uuid4().hex[:10]}",
        partitions=args.partitions,
        guarantee=args.processing_guarantee,
    )
    worker = deployment.worker("w1", "--instance-id", f"{deployment.prefix}-w1", *args.worker_arg)
    spy: subprocess.Popen[bytes] | None = None
    try:
        deployment.apply_topics()
        worker.start().wait_ready(180, partitions=args.partitions)
        worker.signal(signal.SIGSTOP)
        try:
            deployment.publish(journal)
        finally:
            worker.signal(signal.SIGCONT)
        assert worker.proc is not None
        pid = worker.proc.pid
        end = deployment.journal_end()
        t0 = time.perf_counter()
        wait_until_applied(lambda: worker.applied() or 0, args.skip, args.timeout, t0)
        warm_at, warm_applied = time.perf_counter(), worker.applied() or 0
        threads_before, total_before = thread_cpu(pid), cpu_seconds(pid)
        if args.profile:
            spy = subprocess.Popen(
                [
                    shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(pid),
                    "--rate",
                    "200",
                    "--threads",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "-o",
                    args.profile,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        wait_until_applied(lambda: worker.applied() or 0, end, args.timeout, t0)
        done_at = time.perf_counter()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        threads_after, total_after = thread_cpu(pid), cpu_seconds(pid)
        entries = end - warm_applied
        per_thread = {
            name: round((threads_after.get(name, 0) - threads_before.get(name, 0)) / entries * 1e6, 1)
            for name in threads_after
        }
        result: dict[str, Any] = {
            "entries": end,
            "warm_entries": entries,
            "entries_per_s": round(end / (done_at - t0)),
            "warm_entries_per_s": round(entries / (done_at - warm_at)),
            "cpu_us_per_entry": round((total_after - total_before) / entries * 1e6, 1),
            "cores": round((total_after - total_before) / (done_at - warm_at), 2),
            "threads_us_per_entry": dict(sorted(per_thread.items(), key=lambda kv: -kv[1])[:8]),
        }
        if args.profile:
            result["profile"] = breakdown(Path(args.profile))
        return result
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        deployment.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=60_000)
    parser.add_argument("--skip", type=int, default=10_000, help="entries left out at the start (warm-up)")
    parser.add_argument("--scopes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--experiences-per-scope", type=int, default=40, help="0: no cap")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--processing-guarantee", choices=["at_least_once", "exactly_once"], default="at_least_once")
    parser.add_argument("--profile", help="py-spy the worker's warm window; collapsed stacks into this file")
    parser.add_argument("--no-embedded", action="store_true", help="the worker only")
    parser.add_argument("--worker-arg", action="append", default=[], help="one more argument for the worker")
    parser.add_argument(
        "--recurrence",
        help="the worker's (and replay's) command, e.g. another checkout's "
        ".venv/bin/recurrence, for an A/B against an older build (this checkout's harness drives it)",
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.recurrence:
        command = [args.recurrence]
        deployment_module.recurrence_command = lambda: command  # type: ignore[attr-defined]
        globals()["recurrence_command"] = lambda: command
    workdir = Path(tempfile.mkdtemp(prefix="recurrence-worker-cpu-"))
    try:
        journal = workdir / "journal.jsonl"
        write(
            JournalSpec(
                entries=args.entries,
                scopes=args.scopes,
                seed=args.seed,
                garbage_ratio=0.01,
                experiences_per_scope=args.experiences_per_scope or None,
            ),
            str(journal),
        )
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[0]
        report: dict[str, Any] = {"guarantee": args.processing_guarantee, "load_before": float(load)}
        with LocalBroker() as broker:
            report["worker"] = worker_cpu(broker.bootstrap, workdir, journal, args)
        if not args.no_embedded:
            report["embedded"] = embedded_cpu(journal, args.skip, workdir)
            report["cpu_ratio"] = round(
                report["embedded"]["cpu_us_per_entry"] / report["worker"]["cpu_us_per_entry"], 3
            )
        with open("/proc/loadavg") as handle:
            report["load_after"] = float(handle.read().split()[0])
        print(json.dumps(report, indent=1))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
