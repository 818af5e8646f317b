"""Kafka-path benchmark: one worker's end-to-end throughput, kill -9 recovery, and correctness.

A seeded synthetic journal of 2N entries is split in two halves (positions per
scope keep increasing across the split). With fresh topics (unique prefix and
app id), a fresh datadir and ONE ``recurrence worker`` subprocess (driven by
``devkit.deployment``, as the Kafka tests drive theirs):

1. throughput: publish the first N entries and time publish start -> every
   entry applied (the sum of the worker's ``recurrence_journal_position``
   gauges, i.e. the durable journal position in the state, reaches the
   journal's end offsets);
2. recovery: publish the second N, kill -9 the worker once half of them are
   applied, restart it with the same datadir and ``--instance-id`` and time
   restart -> ready (``/health``) and restart -> caught up;
3. correctness: the output topics, deduplicated by record id, equal the
   embedded runner's ledger (``recurrence replay`` on the same journal) per
   scope and in order (``recurrence verify``'s rule); raw duplicates are reported.

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else ``bash deploy/kafka/kafka.sh up``
(and ``down`` at the end, only if it started the broker). One JSON line per
phase; the report lands in bench/results/kafka.json (one entry per guarantee).

    python bench/kafka_bench.py [--entries 10000] [--processing-guarantee exactly_once]
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from benchdoc import emit, update_doc  # bench/ is the script's directory, so first on sys.path
from partition_balance import balance, scope_counts
from proccpu import cpu_seconds
from prometheus_client.parser import text_string_to_metric_families

from devkit.deployment import Deployment, Worker, owned_partitions
from devkit.localrun import LocalBroker, wait_for
from devkit.oracle import embedded_ledger
from recurrence_ledger.processor.core.partitioning import scope_key
from recurrence_ledger.processor.stream.batch.types import SOURCE_HEADER
from recurrence_ledger.processor.synthetic import JournalSpec, write
from recurrence_ledger.processor.verify import compare as verify

ROOT = Path(__file__).resolve().parent.parent
PUBLISH_LINGER_MS = 5


def _spec(args: argparse.Namespace, entries: int, seed: int) -> JournalSpec:
    """A journal of ``entries`` over the run's scopes, garbage and Experience cap, from ``seed``."""
    return JournalSpec(
        entries=entries,
        scopes=args.scopes,
        seed=seed,
        garbage_ratio=args.garbage,
        experiences_per_scope=args.experiences_per_scope or None,
    )


# -- comparison --------------------------------------------------------------------------------


def compare(got: list[bytes], want: list[bytes]) -> dict[str, Any]:
    """``recurrence verify``'s rule: the outputs (``got``) against the embedded ledger (``want``)."""
    result = verify(ledger=want, outputs=got)
    return {
        "equal": result.equal,
        # the embedded ledger itself repeats some records (identical dead letters for identical garbage lines)
        "oracle_raw_records": result.ledger_records,
        "distinct_records": result.outputs_distinct,
        "oracle_records": result.ledger_distinct,
        "scopes_differing": [str(d.scope_id) for d in result.differing[:10]],
    }


def one_worker(
    bootstrap: str, workdir: Path, partitions: int, guarantee: str, extra: Sequence[str] = ()
) -> tuple[Deployment, Worker]:
    """Fresh topics (their own prefix, so their own group) and one worker with a stable instance id."""
    deployment = Deployment(
        bootstrap, workdir, prefix=f"bench{uuid.uuid4().hex[:10]}", partitions=partitions, guarantee=guarantee
    )
    return deployment, deployment.worker("w1", "--instance-id", f"{deployment.prefix}-w1", *extra)


# -- worker vs embedded, one run -------------------------------------------------------------------


def listener_pid(bootstrap: str) -> int | None:
    """The process on this machine listening on the bootstrap server's port (the broker), if any."""
    port = int(bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)[1])
    sockets: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    sockets.add(f"socket:[{fields[9]}]")
    if not sockets:
        return None
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()):
                    return int(proc.name)
    return None


def cpu_by_pid(pids: Iterable[int]) -> dict[int, float]:
    """``cpu_seconds`` now of each of the processes still running."""
    found: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            found[pid] = cpu_seconds(pid)
    return found


def cores(pids: Iterable[int], before: dict[int, float], seconds: float) -> float | None:
    """CPU cores the processes used on average since ``before`` (None when one could not be read)."""
    try:
        used = sum(cpu_seconds(pid) - before[pid] for pid in pids)
    except (OSError, KeyError):
        return None
    return round(used / seconds, 2)


def group_rate(
    bootstrap: str,
    workdir: Path,
    journal: Path,
    want: list[bytes],
    partitions: int,
    guarantee: str,
    workers: int,
    timeout: float,
) -> dict[str, Any]:
    """Fresh topics, ``workers`` workers ready and sharing the partitions, then publish start -> all applied."""
    deployment, first = one_worker(bootstrap, workdir, partitions, guarantee)
    group = [first] + [
        deployment.worker(f"w{i + 1}", "--instance-id", f"{deployment.prefix}-w{i + 1}") for i in range(1, workers)
    ]
    try:
        deployment.apply_topics()
        for worker in group:
            worker.start()
        wait_for(
            lambda: owned_partitions(group, partitions),
            180,
            what=f"{workers} worker(s) to share {partitions} partitions",
        )
        # The publisher is slower than a worker: publish while the workers are paused (well within
        # the session timeout), then time resume -> every entry durable in the state.
        for worker in group:
            worker.signal(signal.SIGSTOP)
        try:
            deployment.publish(journal)
        finally:
            for worker in group:
                worker.signal(signal.SIGCONT)
        workers_pids = [w.proc.pid for w in group if w.proc is not None]
        broker_pid = listener_pid(bootstrap)
        cpu_before = cpu_by_pid([*workers_pids, broker_pid] if broker_pid else workers_pids)
        t0 = time.perf_counter()
        end = deployment.journal_end()

        def applied() -> int:
            merged: dict[int, int] = {}
            for worker in group:
                for partition, position in worker.positions().items():
                    merged[partition] = max(position, merged.get(partition, 0))
            return sum(merged.values())

        seconds = wait_until_applied(applied, end, timeout, t0)
        # Where the machine's cores went while the entries were applied: the workers (every thread) and
        # the broker, when it runs here (goal 5's CPU bound, ``comparison``).
        worker_cores = cores(workers_pids, cpu_before, seconds)
        broker_cores = cores([broker_pid], cpu_before, seconds) if broker_pid else None
        got, summary = deployment.read_outputs()
        result = compare(got, want)
        return {
            "entries": end,
            "seconds": round(seconds, 2),
            "entries_per_s": round(end / seconds),
            "raw_records": summary.raw_records,
            "equal": result["equal"],
            "worker_cores": worker_cores,
            "broker_cores": broker_cores,
        }
    finally:
        deployment.close()


def wait_until_applied(applied: Callable[[], int], end: int, timeout: float, since: float) -> float:
    """Seconds from ``since`` until ``applied()`` reaches ``end``, polled less often the further off it is.

    Each poll is an HTTP request the measured worker answers on the loop that runs its batches:
    at a fixed 20 a second, /readyz and its connections took ~3% of the worker's main thread. So
    the next poll is due when, at the rate so far, about half of what is left would be applied
    (at most 0.5 s, at least 20 ms away): ~15 polls instead of ~120 for a 6 s run, the end still
    seen within 20 ms.
    """
    deadline = time.perf_counter() + timeout
    while True:
        done = applied()
        now = time.perf_counter()
        if done >= end:
            return now - since
        if now > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {end} journal entries applied ({done})")
        rate = done / max(now - since, 1e-3)
        time.sleep(min(0.5, max(0.02, (end - done) / max(rate, 1.0) / 2)))


def warm_up(bootstrap: str, args: argparse.Namespace, workdir: Path) -> None:
    """One short worker run per guarantee, measured by nothing.

    A freshly started broker compiles its hot paths (produce, fetch, the transaction
    coordinator) during its first tens of seconds of load, taking most of a core on this
    2-core machine kind: without a warm-up the first figures measured that, not the worker.
    """
    journal = workdir / "journal-warm-up.jsonl"
    write(
        _spec(args, args.warm_up_entries, args.seed + 1),
        str(journal),
    )
    for guarantee in ("at_least_once", "exactly_once"):
        run = group_rate(bootstrap, workdir, journal, [], args.partitions, guarantee, 1, args.timeout)
        emit(
            "warm-up",
            guarantee=guarantee,
            entries=run["entries"],
            seconds=run["seconds"],
            note="a freshly started broker; not a figure",
        )


def comparison(bootstrap: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Goals 3 and 5 of issue 8: each figure beside its reference on the same journal, in interleaved rounds.

    On a shared 2-core machine one run moves by a third, and the reference moves with it (the
    embedded replay ran at 6,628 and 8,144 entries/s in two runs minutes apart). So each round runs
    the embedded reference, one worker per guarantee, and one and two workers on 2 partitions, one
    after another; a ratio is the median of the rounds' ratios, each against its own round's
    reference, and the rates shown are the medians of the rounds.
    """
    journal = workdir / "journal-compare.jsonl"
    write(
        _spec(args, args.entries, args.seed),
        str(journal),
    )
    want: list[bytes] = []
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        (workdir / f"embedded-{number}").mkdir()
        load_before = load_average()
        records, seconds = embedded_ledger(journal, workdir / f"embedded-{number}")
        want = want or records
        runs: dict[str, Any] = {"embedded": {"entries_per_s": round(args.entries / seconds)}}
        for guarantee in ("at_least_once", "exactly_once"):
            runs[guarantee] = group_rate(bootstrap, workdir, journal, want, args.partitions, guarantee, 1, args.timeout)
        for workers in (1, 2):
            runs[f"scale-{workers}"] = group_rate(
                bootstrap, workdir, journal, want, 2, "at_least_once", workers, args.timeout
            )
        runs["load"] = [load_before, load_average()]
        emit(
            "round",
            round=number + 1,
            **{name: run["entries_per_s"] for name, run in runs.items() if name != "load"},
            cores={
                name: [run.get("worker_cores"), run.get("broker_cores")] for name, run in runs.items() if name != "load"
            },
            load=runs["load"],
        )
        rounds.append(runs)

    def rates(name: str) -> list[int]:
        return [r[name]["entries_per_s"] for r in rounds]

    embedded = emit(
        "embedded",
        entries=args.entries,
        entries_per_s=round(statistics.median(rates("embedded"))),
        runs_entries_per_s=rates("embedded"),
        note=f"recurrence replay, process start included, median of {args.rounds} rounds (reference)",
    )
    rows: dict[str, Any] = {"embedded": embedded, "rounds": args.rounds}
    for name in ("at_least_once", "exactly_once", "scale-1", "scale-2"):
        row: dict[str, Any] = {
            "entries_per_s": round(statistics.median(rates(name))),
            "runs_entries_per_s": rates(name),
            "equal": all(r[name]["equal"] for r in rounds),
        }
        if name in ("at_least_once", "exactly_once"):
            ratios = [r[name]["entries_per_s"] / r["embedded"]["entries_per_s"] for r in rounds]
            row.update(
                guarantee=name,
                partitions=args.partitions,
                workers=1,
                vs_embedded=round(statistics.median(ratios), 3),
                runs_vs_embedded=[round(x, 3) for x in ratios],
            )
            rows[name] = emit("worker", **row)
        else:
            row.update(guarantee="at_least_once", partitions=2, workers=int(name[-1]))
            rows[name] = emit("scale", **row)
    scale = [r["scale-2"]["entries_per_s"] / r["scale-1"]["entries_per_s"] for r in rounds]
    rows["scale_ratio"] = round(statistics.median(scale), 2)
    rows["runs_scale_ratio"] = [round(x, 2) for x in scale]
    # Two workers and the broker share this machine's cores: at one worker's CPU per entry (its own
    # and the broker's), the cores cap the rate at cpus / (worker + broker cores) times one worker's.
    used = [(r["scale-1"]["worker_cores"], r["scale-1"]["broker_cores"]) for r in rounds]
    if all(worker is not None and broker is not None for worker, broker in used):
        cpus = os.cpu_count() or 1
        rows["scale_cpu"] = {
            "cpus": cpus,
            "worker_cores": statistics.median(worker for worker, _ in used),
            "broker_cores": statistics.median(broker for _, broker in used),
            "bound": round(statistics.median(cpus / (worker + broker) for worker, broker in used), 2),
            "runs_bound": [round(cpus / (worker + broker), 2) for worker, broker in used],
        }
    # The journal is keyed by scope: the busiest of the 2 partitions caps what 2 workers can reach.
    with journal.open("rb") as handle:
        rows["scale_bound"] = balance(scope_counts(line for line in handle if line.strip()), 2)["speedup_bound"]
    rows["load"] = [r["load"] for r in rounds]
    # Latency at a fixed offered rate (issue 36: 2,800 entries/s; --latency-rate 0: a share of the measured
    # maximum), in interleaved rounds for the same reason as above: one 30 s window's p99 is decided by
    # whether the shared machine had a slow few seconds in it. Exactly-once also under each of
    # --latency-eos-settings, the settings that bound a transaction.
    settings = latency_settings(args)
    latency_runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in settings}
    for number in range(args.latency_rounds):
        for label, guarantee, extra in settings:
            rate = args.latency_rate or rows[guarantee]["entries_per_s"] * args.latency_load
            before = load_average()
            measured = latency(bootstrap, workdir, args, guarantee, rate, extra)
            latency_runs[label].append(
                emit(
                    "latency",
                    setting=label,
                    guarantee=guarantee,
                    partitions=args.partitions,
                    round=number + 1,
                    load=[before, load_average()],
                    **measured,
                )
            )
    rows["latency"] = {label: latency_summary(measured) for label, measured in latency_runs.items()}
    return rows


def latency_settings(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(label, guarantee, worker arguments) of each latency configuration: both guarantees as configured by
    default, then exactly_once under each of ``--latency-eos-settings`` (';' between settings, ',' between
    the arguments of one)."""
    found = [("at_least_once", "at_least_once", []), ("exactly_once", "exactly_once", [])]
    for setting in filter(None, (part.strip() for part in args.latency_eos_settings.split(";"))):
        extra = [arg.strip() for arg in setting.split(",") if arg.strip()]
        found.append((f"exactly_once {' '.join(extra)}", "exactly_once", extra))
    return found


def load_average() -> float:
    """The machine's 1-minute load average (every figure of a shared machine is quoted beside it)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def latency_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds of one latency configuration: each percentile the median of the rounds' own, and every round."""
    summary: dict[str, Any] = {
        "offered_per_s": runs[0]["offered_per_s"],
        "published_per_s": round(statistics.median(run["published_per_s"] for run in runs)),
        "load": [load for run in runs for load in run["load"]],
    }
    for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "produced_p50_ms", "produced_p99_ms"):
        summary[key] = round(statistics.median(run[key] for run in runs), 1)
        summary[f"runs_{key}"] = [run[key] for run in runs]
    cores = [run["worker_cores"] for run in runs if run.get("worker_cores") is not None]
    summary["worker_cores"] = round(statistics.median(cores), 2) if cores else None
    summary["rounds"] = len(runs)
    return summary


# -- latency at an offered load -------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def offered_load(
    d: Deployment, worker: Worker, lines: list[bytes], rate: float, warmup: float, timeout: float
) -> dict[str, Any]:
    """Publish ``lines`` at ``rate`` entries/s while reading the outputs; latency per entry with an output.

    An entry's latency is from the moment the publisher hands it to its producer to the moment
    a read_committed consumer here receives the entry's first output record (found by the
    ``recurrence-source`` header, ``partition:offset:index``); entries published during the
    first ``warmup`` seconds are left out. Entries without an output (a quiet Task Outcome)
    have no latency to measure.
    """
    connection = d.connection
    outputs = list(d.topics.outputs())
    # The publisher lingers 5 ms, Kafka's producer default since 4.0 (KIP-1030), and the linger counts in
    # each entry's latency. With no linger every entry was a produce request of its own (2,500 a second):
    # a quarter of this process's CPU went to socket writes and the broker served them too, on the two
    # cores the measured worker shares with both.
    producer = AIOKafkaProducer(
        **connection.aiokafka_kwargs(), acks="all", enable_idempotence=True, linger_ms=PUBLISH_LINGER_MS
    )
    # A short fetch wait: aiokafka leaves partitions whose records are not yet taken out of its next
    # fetch request, one request in flight, so right after a fetch of ledger records the next request
    # holds only the quiet review and dead-letter partitions, and the broker held it (and the ledger's
    # next records behind it) for the default 500 ms: latency the reader added, not the worker.
    consumer = AIOKafkaConsumer(
        *outputs,
        **connection.aiokafka_kwargs(),
        group_id=None,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=10,
    )
    # (partition, offset) -> when its first output was read, and when the worker's producer created it
    # (CreateTime, wall clock): latency up to there is the worker's alone, without the broker's
    # acknowledgement and this reader.
    received: dict[tuple[int, int], tuple[float, float]] = {}
    wall_minus_monotonic = time.time() - time.monotonic()
    done = asyncio.Event()

    async def receive() -> None:
        while not done.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            for records in batches.values():
                for record in records:
                    source = dict(record.headers).get(SOURCE_HEADER)
                    if source is None:
                        continue
                    partition, offset, index = (int(part) for part in source.decode().split(":"))
                    if index == 0 and (partition, offset) not in received:
                        received[(partition, offset)] = (now, record.timestamp / 1000 - wall_minus_monotonic)

    await producer.start()
    await consumer.start()
    try:
        reader = asyncio.ensure_future(receive())
        sent_at: list[float] = []
        pending: list[asyncio.Future[Any]] = []
        began = time.monotonic()
        warm: asyncio.Future[Any] | None = None
        cpu_from = (began, 0.0)
        for number, line in enumerate(lines):
            due = began + number / rate
            ahead = due - time.monotonic()
            if ahead > 0.001:
                await asyncio.sleep(ahead)
            if warm is None and time.monotonic() - began >= warmup:  # the worker's histograms from here on
                warm = asyncio.ensure_future(asyncio.to_thread(histograms, worker))
                cpu_from = (time.monotonic(), worker_cpu_seconds(worker))
            key = scope_key(line)
            sent_at.append(time.monotonic())
            pending.append(
                await producer.send(d.topics.journal, value=line, key=key, partition=0 if key is None else None)
            )
        published = time.monotonic() - began
        # Not ``gather``: over every send of the run its callbacks ran in one turn of this loop, which held
        # the reader for most of a second and added that to the last entries' latencies.
        metadata = [await future for future in pending]  # a done future's await takes no loop turn
        end = len(metadata)
        deadline = time.monotonic() + timeout
        while (await asyncio.to_thread(worker.applied) or 0) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{end} journal entries not applied within {timeout} s")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # the last outputs reach the reader
        done.set()
        await reader
        cpu_to = (time.monotonic(), worker_cpu_seconds(worker))
        profile = worker_profile(await warm if warm is not None else {}, await asyncio.to_thread(histograms, worker))
    finally:
        await consumer.stop()
        await producer.stop()
    measured = [
        (received[(meta.partition, meta.offset)], sent)
        for meta, sent in zip(metadata, sent_at, strict=True)
        if sent - began >= warmup and (meta.partition, meta.offset) in received
    ]
    latencies = [(read - sent) * 1000 for (read, _), sent in measured]
    until_produced = [(created - sent) * 1000 for (_, created), sent in measured]
    return {
        "offered_per_s": round(rate),
        "published_per_s": round(len(lines) / published),
        "entries": len(lines),
        "measured_entries": len(latencies),
        "p50_ms": round(percentile(latencies, 0.50), 1),
        "p90_ms": round(percentile(latencies, 0.90), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "produced_p50_ms": round(percentile(until_produced, 0.50), 1),
        "produced_p99_ms": round(percentile(until_produced, 0.99), 1),
        # The worker's CPU (every thread) from the end of the warm-up to the last entry applied: what the
        # offered rate costs it, so what a setting trades for its latency.
        "worker_cores": round((cpu_to[1] - cpu_from[1]) / max(cpu_to[0] - cpu_from[0], 1e-3), 2) if warm else None,
        "worker": profile,
    }


def worker_cpu_seconds(worker: Worker) -> float:
    """CPU seconds the worker process has used so far (0 when it is gone)."""
    try:
        return cpu_seconds(worker.proc.pid) if worker.proc is not None else 0.0
    except OSError:
        return 0.0


def quantile_bound(buckets: list[tuple[float, float]], q: float) -> float:
    """The upper bound of the histogram bucket holding quantile ``q`` (cumulative (le, count) pairs)."""
    total = buckets[-1][1]
    for bound, count in buckets:
        if count >= q * total:
            return bound
    return buckets[-1][0]


Histograms = dict[str, dict[str, Any]]


def histograms(worker: Worker) -> Histograms:
    """The worker's latency-related histograms from /metrics: series name -> buckets, sum, count."""
    try:
        _, body = worker.get("/metrics")
    except OSError:
        body = b""
    found: Histograms = defaultdict(lambda: {"buckets": {}, "sum": 0.0, "count": 0.0})
    for family in text_string_to_metric_families(body.decode()):
        if family.type != "histogram" or not family.name.startswith(
            ("recurrence_batch", "recurrence_event_loop", "recurrence_gc_pause")
        ):
            continue
        for sample in family.samples:
            label = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            series = found[f"{family.name}{'{' + label + '}' if label else ''}"]
            if sample.name.endswith("_bucket"):
                series["buckets"][float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_sum"):
                series["sum"] = sample.value
            elif sample.name.endswith("_count"):
                series["count"] = sample.value
    return dict(found)


def worker_profile(before: Histograms, after: Histograms) -> dict[str, Any]:
    """The worker's own view of the measured window (``after`` minus ``before``): batch sizes, where a batch's
    time went, event loop stalls and GC pauses -- mean, and the bucket bounds holding p50, p99 and the maximum
    (milliseconds; entries for the batch size)."""
    found: dict[str, Any] = {}
    for name, values in after.items():
        earlier = before.get(name, {"buckets": {}, "sum": 0.0, "count": 0.0})
        count = values["count"] - earlier["count"]
        if not count:
            continue
        buckets = sorted((bound, n - earlier["buckets"].get(bound, 0.0)) for bound, n in values["buckets"].items())
        scale = 1 if name.startswith("recurrence_batch_entries") else 1000
        found[name.removeprefix("recurrence_")] = {
            "count": int(count),
            "mean": round((values["sum"] - earlier["sum"]) / count * scale, 2),
            **{
                f"{label}_le": quantile_bound(buckets, q) * scale
                for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
            },
        }
    return found


def latency(
    bootstrap: str, workdir: Path, args: argparse.Namespace, guarantee: str, rate: float, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """One worker (``extra``: more of its arguments), fresh topics, the journal published at ``rate`` for
    ``--latency-seconds``."""
    journal = workdir / f"journal-latency-{round(rate)}.jsonl"
    write(
        _spec(args, max(1000, round(rate * args.latency_seconds)), args.seed + 1),
        str(journal),
    )
    lines = [line for line in journal.read_bytes().splitlines() if line.strip()]
    d, worker = one_worker(bootstrap, workdir, args.partitions, guarantee, extra)
    try:
        d.apply_topics()
        worker.start().wait_ready(180, partitions=d.partitions)
        return asyncio.run(offered_load(d, worker, lines, rate, args.latency_warmup, args.timeout))
    finally:
        d.close()


def latency_table(rows: dict[str, Any]) -> str:
    configurations = rows["latency"]
    first = next(iter(configurations.values()))
    lines = [
        "| configuration | offered entries/s | published | p50 ms | p90 ms | p99 ms | p99 ms, each round | max ms "
        "| until produced: p50 / p99 ms | worker CPU, cores | load average | goal p99 |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in configurations.items():
        each = " / ".join(f"{x:.0f}" for x in row["runs_p99_ms"])
        lines.append(
            f"| {label} | {row['offered_per_s']:,} | {row['published_per_s']:,} | {row['p50_ms']:.0f} | "
            f"{row['p90_ms']:.0f} | {row['p99_ms']:.0f} | {each} | {row['max_ms']:.0f} | "
            f"{row['produced_p50_ms']:.0f} / {row['produced_p99_ms']:.0f} | "
            f"{row['worker_cores'] if row['worker_cores'] is not None else '-'} | "
            f"{min(row['load']):.1f}-{max(row['load']):.1f} | < 250 |"
        )
    return "\n".join(lines) + (
        f"\n\nEach percentile is the median of {first['rounds']} interleaved rounds' own. *Until produced*: to the "
        "output's creation time, stamped by the worker's producer (the worker's share, without the broker's "
        "acknowledgement and the reader). *Worker CPU*: every thread of the worker over the measured window "
        "(median of the rounds): what the offered rate costs it under that setting. "
        f"{time.strftime('%Y-%m-%d')}, load average before and after each run.\n"
    )


def comparison_table(rows: dict[str, Any]) -> str:
    embedded = rows["embedded"]["entries_per_s"]
    n = rows["rounds"]
    lines = [
        f"| what | entries/s (median of {n} rounds) | reference, same rounds | ratio (median of the rounds' ratios) "
        "| each round | goal | output equals the embedded ledger |",
        "|---|---:|---:|---:|---|---:|---|",
    ]
    for guarantee, goal in (("at_least_once", "75%"), ("exactly_once", "75%")):
        row = rows[guarantee]
        each = " / ".join(f"{x:.0%}" for x in row["runs_vs_embedded"])
        lines.append(
            f"| one worker, {row['partitions']} partitions, {guarantee} | {row['entries_per_s']:,} | "
            f"embedded replay {embedded:,} | {row['vs_embedded']:.0%} | {each} | {goal} | "
            f"{'yes' if row['equal'] else 'NO'} |"
        )
    one, two = rows["scale-1"], rows["scale-2"]
    each = " / ".join(f"{x:.2f}x" for x in rows["runs_scale_ratio"])
    lines.append(
        f"| two workers, 2 partitions, at_least_once | {two['entries_per_s']:,} | one worker {one['entries_per_s']:,} "
        f"| {rows['scale_ratio']:.2f}x | {each} | 1.6x | {'yes' if one['equal'] and two['equal'] else 'NO'} |"
    )
    lines.append(f"| the same, bound by key skew (busiest partition) | | | {rows['scale_bound']:.2f}x | | | |")
    cpu = rows.get("scale_cpu")
    if cpu is not None:
        each = " / ".join(f"{x:.2f}x" for x in cpu["runs_bound"])
        lines.append(
            f"| the same, bound by CPU: one worker used {cpu['worker_cores']:.2f} cores and the broker "
            f"{cpu['broker_cores']:.2f}, of the machine's {cpu['cpus']} | | | {cpu['bound']:.2f}x | {each} | | |"
        )
    loads = " / ".join(f"{before:.1f}-{after:.1f}" for before, after in rows["load"])
    return "\n".join(lines) + f"\n\n{time.strftime('%Y-%m-%d')}; load average before and after each round: {loads}.\n"


# -- cold start ---------------------------------------------------------------------------------


def cold_start(bootstrap: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """A new worker (fresh topics, empty data directory) started beside a backlog: launch -> /readyz.

    Per guarantee, in interleaved rounds: with ``--cold-start-backlog`` entries published before the
    worker starts, and on empty topics (start-up alone). /readyz answers 200 once the worker serves its
    partitions, restored, and is at most ``--ready-max-lag`` (1000) entries behind on each: with a
    backlog that is after the backlog's first entries have run, on purpose (a worker that far behind
    would serve statistics minutes old). Also launch -> every entry applied.
    """
    journal = workdir / "journal-cold-start.jsonl"
    write(
        _spec(args, args.cold_start_backlog, args.seed + 2),
        str(journal),
    )
    measured: dict[str, list[dict[str, Any]]] = {}
    for number in range(args.cold_start_rounds):
        for guarantee in ("at_least_once", "exactly_once"):
            for backlog in (args.cold_start_backlog, 0):
                d, worker = one_worker(bootstrap, workdir, args.partitions, guarantee)
                try:
                    d.apply_topics()
                    if backlog:
                        d.publish(journal)
                    end = d.journal_end()
                    before = load_average()
                    started = time.perf_counter()
                    worker.start().wait_ready(180, partitions=d.partitions)
                    ready = time.perf_counter() - started
                    applied_at_ready = worker.applied() or 0
                    caught_up = wait_until_applied(lambda w=worker: w.applied() or 0, end, args.timeout, started)
                finally:
                    d.close()
                run = emit(
                    "cold-start",
                    guarantee=guarantee,
                    backlog=backlog,
                    round=number + 1,
                    ready_s=round(ready, 2),
                    applied_at_ready=applied_at_ready,
                    caught_up_s=round(caught_up, 2),
                    load=[before, load_average()],
                )
                measured.setdefault(f"{guarantee}/{backlog}", []).append(run)
    return {
        key: {
            "ready_s": round(statistics.median(r["ready_s"] for r in runs), 2),
            "runs_ready_s": [r["ready_s"] for r in runs],
            "caught_up_s": round(statistics.median(r["caught_up_s"] for r in runs), 2),
            "applied_at_ready": round(statistics.median(r["applied_at_ready"] for r in runs)),
            "load": [x for r in runs for x in r["load"]],
        }
        for key, runs in measured.items()
    }


def cold_start_table(found: dict[str, Any], backlog: int) -> str:
    lines = [
        "| guarantee | topics | launch -> /readyz, s (median) | each round | applied at ready | launch -> caught up, s "
        "| load average | goal |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for guarantee in ("at_least_once", "exactly_once"):
        for entries in (backlog, 0):
            row = found[f"{guarantee}/{entries}"]
            each = " / ".join(f"{x:.2f}" for x in row["runs_ready_s"])
            lines.append(
                f"| {guarantee} | {f'{entries:,}-entry backlog' if entries else 'empty'} | {row['ready_s']:.2f} | "
                f"{each} | {row['applied_at_ready']:,} | {row['caught_up_s']:.2f} | "
                f"{min(row['load']):.1f}-{max(row['load']):.1f} | {'3 s' if entries else ''} |"
            )
    return "\n".join(lines) + f"\n\n{time.strftime('%Y-%m-%d')}.\n"


# -- the benchmark ------------------------------------------------------------------------------


def bench(bootstrap: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    n = args.entries
    full = workdir / "journal-full.jsonl"
    spec = _spec(args, 2 * n, args.seed)
    write(spec, str(full))
    lines = full.read_bytes().splitlines(keepends=True)
    first, second = workdir / "journal-1.jsonl", workdir / "journal-2.jsonl"
    first.write_bytes(b"".join(lines[:n]))
    second.write_bytes(b"".join(lines[n:]))

    want_first, embedded_seconds = embedded_ledger(first, workdir)
    want_full, _ = embedded_ledger(full, workdir)
    phases: dict[str, Any] = {}
    phases["embedded"] = emit(
        "embedded",
        entries=n,
        seconds=round(embedded_seconds, 2),
        entries_per_s=round(n / embedded_seconds),
        note="recurrence replay on the first half, process start included (reference)",
    )

    d, worker = one_worker(bootstrap, workdir, args.partitions, args.processing_guarantee)
    try:
        d.apply_topics()
        started = time.perf_counter()
        worker.start().wait_ready(120, partitions=d.partitions)
        startup = time.perf_counter() - started

        # 1. throughput
        t0 = time.perf_counter()
        d.publish(first)
        published = time.perf_counter() - t0
        end1 = d.journal_end()
        worker.wait_applied(end1, args.timeout)
        seconds = time.perf_counter() - t0
        got, summary = d.read_outputs()
        phases["throughput"] = emit(
            "throughput",
            guarantee=d.guarantee,
            entries=end1,
            worker_ready_s=round(startup, 2),
            publish_s=round(published, 2),
            seconds=round(seconds, 2),
            entries_per_s=round(end1 / seconds),
            raw_records=summary.raw_records,
            **compare(got, want_first),
        )

        # 2. recovery
        t1 = time.perf_counter()
        publisher = d.publish_in_background(second)
        worker.wait_applied(end1 + n // 2, args.timeout)
        before_kill = worker.applied() or 0
        pre_kill_s = time.perf_counter() - t1
        worker.kill9()
        killed = time.perf_counter()
        if publisher.wait(timeout=600) != 0:
            raise RuntimeError(f"publish failed: {publisher.stderr.read().decode() if publisher.stderr else ''}")
        end2 = d.journal_end()
        restarted = time.perf_counter()
        worker.start().wait_ready(180, partitions=d.partitions)
        ready_s = time.perf_counter() - restarted
        worker.wait_applied(end2, args.timeout)
        caught_up_s = time.perf_counter() - restarted
        phases["recovery"] = emit(
            "recovery",
            guarantee=d.guarantee,
            applied_at_kill=before_kill,
            backlog_at_kill=end2 - before_kill,
            second_half_rate_before_kill=round((before_kill - end1) / pre_kill_s),
            kill_to_restart_s=round(restarted - killed, 2),
            restart_to_ready_s=round(ready_s, 2),
            restart_to_caught_up_s=round(caught_up_s, 2),
        )

        # 3. correctness over the whole journal
        got, summary = d.read_outputs()
        raw = summary.raw_records
        result = compare(got, want_full)
        phases["correctness"] = emit(
            "correctness",
            guarantee=d.guarantee,
            entries=end2,
            raw_records=raw,
            raw_duplicates=raw - result["distinct_records"],
            raw_beyond_oracle=raw - result["oracle_raw_records"],
            **result,
        )
        if not result["equal"]:
            print(f"worker log: {worker.log_path}", file=sys.stderr)
    finally:
        d.close()
        if args.keep:
            print(f"kept {workdir}", file=sys.stderr)
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "broker": "KAFKA_BOOTSTRAP_SERVERS" if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") else "deploy/kafka/kafka.sh",
        "entries_per_half": n,
        "scopes": args.scopes,
        "seed": args.seed,
        "garbage_ratio": args.garbage,
        "experiences_per_scope": args.experiences_per_scope or None,
        "partitions": args.partitions,
        "processing_guarantee": args.processing_guarantee,
        "phases": phases,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=10000, help="entries per half (2N are generated)")
    parser.add_argument("--scopes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--garbage", type=float, default=0.01)
    parser.add_argument("--experiences-per-scope", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--processing-guarantee", choices=["at_least_once", "exactly_once"], default="at_least_once")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each phase to finish")
    parser.add_argument(
        "--out",
        default=str(ROOT / "bench" / "results" / "kafka.json"),
        help="report file; each processing guarantee keeps its own entry under 'runs'",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=2800.0,
        help="--compare: entries/s offered in the latency runs (0: --latency-load of the maximum)",
    )
    parser.add_argument(
        "--latency-load",
        type=float,
        default=0.5,
        help="--compare with --latency-rate 0: offered load, as a fraction of the measured maximum",
    )
    parser.add_argument(
        "--latency-eos-settings",
        default="--batch-min=1000,--batch-within=0.05;--batch-min=1000,--batch-within=0.1",
        help="--compare: exactly_once latency also under each of these worker settings "
        "(';' between settings, ',' between the arguments of one; '' for none)",
    )
    # 30 s: a 12 s window's p99 was the top ~130 measured entries, decided by one or two stalls.
    parser.add_argument("--latency-seconds", type=float, default=30.0, help="seconds of publishing (latency runs)")
    parser.add_argument(
        "--latency-warmup",
        type=float,
        default=2.0,
        help="--compare: seconds at the start of publishing left out of the latency figures",
    )
    parser.add_argument(
        "--latency-rounds",
        type=int,
        default=3,
        help="--compare: latency runs per guarantee, interleaved (each percentile: the rounds' median)",
    )
    parser.add_argument(
        "--latency",
        type=float,
        metavar="RATE",
        help="instead: only the latency of one worker (--processing-guarantee) at RATE entries/s",
    )
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="--latency: one more argument for the worker (repeat; e.g. --worker-arg=--batch-max=500)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (journals, worker log)")
    parser.add_argument(
        "--warm-up",
        choices=["auto", "yes", "no"],
        default="auto",
        help="--compare: first run a worker per guarantee over --warm-up-entries, measured by "
        "nothing (auto: only when this run started the broker)",
    )
    parser.add_argument("--warm-up-entries", type=int, default=10_000)
    parser.add_argument(
        "--cold-start-backlog",
        type=int,
        default=20_000,
        help="--compare: entries published before a new worker starts (cold start)",
    )
    parser.add_argument("--cold-start-rounds", type=int, default=3, help="--compare: cold starts per guarantee")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="--compare: interleaved rounds (embedded, each guarantee, one and two workers)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="instead: one worker under each guarantee and two workers vs one on 2 partitions, each beside its "
        "reference on the same journal (--entries of it); writes the table into docs/performance.md",
    )
    args = parser.parse_args()
    out = Path(args.out)
    workdir = Path(tempfile.mkdtemp(prefix="recurrence-kafka-bench-"))
    try:
        with LocalBroker() as broker:
            if args.latency:
                emit(
                    "latency",
                    guarantee=args.processing_guarantee,
                    partitions=args.partitions,
                    worker_args=args.worker_arg,
                    **latency(
                        broker.bootstrap, workdir, args, args.processing_guarantee, args.latency, args.worker_arg
                    ),
                )
                return 0
            if args.compare:
                if args.warm_up == "yes" or (args.warm_up == "auto" and broker.started_here):
                    warm_up(broker.bootstrap, args, workdir)
                rows = comparison(broker.bootstrap, args, workdir)
                if args.cold_start_rounds:
                    rows["cold_start"] = cold_start(broker.bootstrap, args, workdir)
            else:
                report = bench(broker.bootstrap, args, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.compare:
        table = comparison_table(rows)
        print(table)
        update_doc("kafka", table)
        table = latency_table(rows)
        print(table)
        update_doc("kafka-latency", table)
        if "cold_start" in rows:
            table = cold_start_table(rows["cold_start"], args.cold_start_backlog)
            print(table)
            update_doc("kafka-cold-start", table)
        out.parent.mkdir(parents=True, exist_ok=True)
        (out.parent / "kafka-compare.json").write_text(json.dumps(rows, indent=2) + "\n")
        equal = all(rows[k]["equal"] for k in ("at_least_once", "exactly_once", "scale-1", "scale-2"))
        return 0 if equal else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    runs = previous.get("runs", {}) if isinstance(previous, dict) else {}
    runs[args.processing_guarantee] = report
    out.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    return 0 if report["phases"]["correctness"]["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
