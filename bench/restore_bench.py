"""Restore benchmark: a worker that lost its disk, with and without snapshots (issue 8, goal 6).

Per journal size N (a bounded working set: ``recurrence generate`` with 50
scopes, 40 Experiences per scope, ``--recent-window 50``, seed 42), with fresh
topics and ONE ``recurrence worker`` (4 partitions, at_least_once):

1. history: publish N entries to a running worker (snapshots at the default
   300 s / 1000 change sets, and at its clean stop), which runs them all,
   then stops (SIGTERM);
2. tail: publish N/10 more; a worker with shipping off runs them and stops, so
   the changelog holds a tail after the last snapshot, as after a crash.
   Each of the two stops only once every input of the group is drained: the
   journal *and* the repartition topic the patterns agent reads (committed
   offsets at the end offsets, ``devkit.deployment.Deployment.wait_drained``).
   A state read while the patterns agent is behind is not the state a restore
   must reproduce (a restored worker would finish the repartition topic and
   hold more pattern rows than the state it replaced);
3. with snapshots: delete the data directory, start a worker, time start ->
   ready (``/readyz`` 200 on every partition); read what it loaded and replayed
   from ``/metrics``;
4. without snapshots: stop it, delete the data directory and every snapshot
   (the snapshots topic is deleted and created again, empty), start again and
   time start -> ready: the whole changelog is replayed.

Identical output: the engine is deterministic, so a restored state that holds
exactly the rows the lost one held gives exactly the output it would have
given. The bench reads every row of every partition database (both tables)
of the worker before its disk is deleted and after each restore, and
requires the three to be equal (row count and sha256 over the rows in key
order, the changelog offset row included). Worker start (process, Faust,
group join) is inside both times. One JSON line per phase; results in
bench/results/restore.json and the table in docs/performance.md between the
``bench:restore`` markers.

The machine is shared: ``--lock FILE`` (e.g. /tmp/recurrence-bench.lock) holds
an exclusive flock on FILE only while the two restores are timed; generating,
publishing and running the history do not hold it.

    python bench/restore_bench.py [--sizes 100000,300000,1000000] [--lock FILE]
"""

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from benchdoc import emit, update_doc  # bench/ is the script's directory, so first on sys.path
from rocksdict import AccessType, Options, Rdict

from devkit.deployment import Deployment
from devkit.localrun import LocalBroker, wait_for
from recurrence_ledger.processor.synthetic import JournalSpec, write

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4


# The restores are timed to ready on every partition, with the whole backlog still to come.
READY_ANYWAY = ("--ready-max-lag", "1000000000")
SHIPPING_OFF = ("--snapshot-interval", "0", "--snapshot-batches", "0")


async def _drop_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


def drop_snapshots(d: Deployment) -> None:
    """Delete the snapshots topic and create it again, empty."""
    asyncio.run(_drop_topic(d.bootstrap, d.topics.snapshots))

    # Topic deletion completes asynchronously: apply until the topic is back, empty.
    def applied() -> bool:
        return d.run("topics", "apply", check=False).returncode == 0 and d.topic_end(d.topics.snapshots) == 0

    wait_for(applied, 120, 1.0, "the snapshots topic to be created again")


def state_digest(datadir: Path) -> dict[str, Any]:
    """Rows and sha256 over every partition database of both tables (key order), and their bytes."""
    tables: dict[str, Any] = {}
    rows = size = 0
    for path in sorted(datadir.rglob("*.db"), key=lambda p: p.name):
        digest = hashlib.sha256()
        count = 0
        options = Options(raw_mode=True)
        db = Rdict(str(path), options=options, access_type=AccessType.read_only())
        try:
            for key, value in db.items():
                digest.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
                count += 1
                size += len(key) + len(value)
        finally:
            db.close()
        tables[path.name] = [count, digest.hexdigest()]
        rows += count
    return {"databases": tables, "rows": rows, "bytes": size}


_SHIPPED = re.compile(
    rb"(\w+) partition (\d+): shipped snapshot \S+ at changelog offset \d+: (\d+) rows, \d+ chunks, "
    rb"(\d+) bytes"
)


def last_snapshots(log: Path) -> dict[str, int]:
    """The last snapshot shipped per table partition, from the worker's log: rows and compressed bytes."""
    last: dict[tuple[bytes, bytes], tuple[int, int]] = {}
    for match in _SHIPPED.finditer(log.read_bytes()):
        last[(match[1], match[2])] = (int(match[3]), int(match[4]))
    return {
        "partitions": len(last),
        "rows": sum(r for r, _ in last.values()),
        "bytes": sum(b for _, b in last.values()),
    }


@contextlib.contextmanager
def bench_lock(path: str | None) -> Iterator[None]:
    """An exclusive flock on ``path`` (the machine's shared benchmark lock), or nothing without one."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        waited = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_EX)
        emit("lock", waited_seconds=round(time.monotonic() - waited, 1))
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def split_journal(spec: JournalSpec, workdir: Path, entries: int) -> tuple[Path, Path]:
    lines = workdir / f"journal-{entries}.jsonl"
    if not lines.exists():
        write(spec, str(lines))
    history_file, tail_file = workdir / f"history-{entries}.jsonl", workdir / f"tail-{entries}.jsonl"
    with lines.open("rb") as source, history_file.open("wb") as history, tail_file.open("wb") as tail:
        for number, line in enumerate(source):  # streamed: a million lines need not be in memory
            (history if number < entries else tail).write(line)
    return history_file, tail_file


def measure(bootstrap: str, workdir: Path, entries: int, lock: str | None) -> dict[str, Any]:
    tail_entries = max(1, entries // 10)
    spec = JournalSpec(entries=entries + tail_entries, scopes=50, seed=42, experiences_per_scope=40, recent_window=50)
    history_file, tail_file = split_journal(spec, workdir, entries)

    d = Deployment(bootstrap, workdir, prefix=f"rb{uuid.uuid4().hex[:10]}", partitions=PARTITIONS)
    # One disk and one log across every run: the same name.
    history, quiet = d.worker("worker", *READY_ANYWAY), d.worker("worker", *READY_ANYWAY, *SHIPPING_OFF)
    d.apply_topics()
    # The worker runs while the journal is published (the publisher is the slower one), so it
    # takes normal batches: a worker started on a large backlog may read it in one catch-up batch.
    started = time.monotonic()
    history.start().wait_ready(3600, partitions=PARTITIONS)
    d.publish(history_file, timeout=3600)
    history.wait_applied(entries, 7200)
    processed = time.monotonic() - started
    # Only a state that has applied every input is the one to compare with: journal positions at
    # the end say nothing of the patterns agent, still working off the repartition topic.
    d.wait_drained(7200)
    history.stop(600)
    emit("history", entries=entries, seconds=round(processed, 1))

    d.publish(tail_file, timeout=3600)
    quiet.start().wait_applied(entries + tail_entries, 7200)
    d.wait_drained(7200)
    quiet.stop(600)
    changelog = d.topic_end(d.topics.changelog) + d.topic_end(d.topics.patterns_changelog)
    snapshot_records = d.topic_end(d.topics.snapshots)
    lost = state_digest(quiet.datadir)  # what the disk held before it was lost
    emit("state", entries=entries, rows=lost["rows"], bytes=lost["bytes"])

    results: dict[str, Any] = {
        "entries": entries,
        "tail_entries": tail_entries,
        "changelog_records": changelog,
        "state_rows": lost["rows"],
        "state_bytes": lost["bytes"],
        "snapshots": last_snapshots(quiet.log_path),
    }
    digests = {}
    with bench_lock(lock):
        for label in ("with", "without"):
            if label == "without":
                drop_snapshots(d)
            shutil.rmtree(quiet.datadir)
            started = time.monotonic()
            quiet.start().wait_ready(3600, partitions=PARTITIONS)
            seconds = time.monotonic() - started
            metrics = quiet.metrics()
            positions = quiet.applied()
            quiet.stop(600)
            digests[label] = state_digest(quiet.datadir)
            results[label] = {
                "seconds": round(seconds, 2),
                "snapshots_loaded": metrics.get("recurrence_snapshots_restored_total", 0),
                "rows_loaded": metrics.get("recurrence_snapshot_restored_rows_total", 0),
                "records_replayed": metrics.get("recurrence_changelog_replayed_records_total", 0)
                + metrics.get("recurrence_restore_repaired_change_sets_total", 0),
                "journal_positions": positions,
                "state_equals_lost": digests[label]["databases"] == lost["databases"],
            }
            emit(f"restore {label} snapshots", entries=entries, **results[label])
    d.close()
    if results["with"]["journal_positions"] != results["without"]["journal_positions"]:
        raise SystemExit(f"the two restores ended at different journal positions: {results}")
    if not (results["with"]["state_equals_lost"] and results["without"]["state_equals_lost"]):
        raise SystemExit(f"a restored state differs from the lost one: {lost} {digests}")
    results["snapshot_records"] = snapshot_records
    shutil.rmtree(quiet.datadir, ignore_errors=True)
    return results


def table(points: list[dict[str, Any]]) -> str:
    head = (
        "| journal entries (history + tail) | changelog records | state rows (MB) | snapshots (MB compressed) "
        "| restore with snapshots | rows loaded | records replayed | restore without snapshots "
        "| records replayed | restored state = lost state |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    body = "".join(
        f"| {p['entries']:,} + {p['tail_entries']:,} | {p['changelog_records']:,} | "
        f"{p['state_rows']:,} ({p['state_bytes'] / 1e6:,.0f}) | {p['snapshots']['bytes'] / 1e6:,.1f} | "
        f"{p['with']['seconds']:.1f} s | "
        f"{p['with']['rows_loaded']:,.0f} | {p['with']['records_replayed']:,.0f} | "
        f"{p['without']['seconds']:.1f} s | {p['without']['records_replayed']:,.0f} | "
        f"{'yes' if p['with']['state_equals_lost'] and p['without']['state_equals_lost'] else 'no'} |\n"
        for p in points
    )
    return head + body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,300000,1000000")
    parser.add_argument("--workdir", help="keep journals here (default: a temporary directory)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    parser.add_argument("--lock", help="hold an exclusive flock on this file while the restores are timed")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    points = []
    with LocalBroker() as broker, tempfile.TemporaryDirectory(prefix="restore-bench-") as scratch:
        workdir = Path(args.workdir) if args.workdir else Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        for entries in sizes:
            points.append(measure(broker.bootstrap, workdir, entries, args.lock))
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
        "points": points,
    }
    (results / "restore.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    text = table(points)
    print(text)
    if not args.no_doc:
        update_doc("restore", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
