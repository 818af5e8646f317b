"""The Kafka path against the embedded oracle: the RFC example, a random journal, a replay.

The output topics, deduplicated by record id, must equal the embedded
runner's ledger record for record in per-scope order, and the HTTP statistics
must equal the embedded statistics.
"""

import json
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from devkit.deployment import Deployment, write_journal
from devkit.localrun import REPO, wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import distinct

from .workerchecks import check_statistics, scopes_of

RFC_EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"


def test_rfc_example_equals_the_embedded_runner(deployment: Deployment, tmp_path: Path) -> None:
    oracle = Oracle.run(RFC_EXAMPLE, tmp_path)
    expected_stats: Any = json.loads((REPO / "examples" / "rfc-minimum.expected-stats.json").read_text())
    assert oracle.statistics() == expected_stats
    deployment.apply_topics()
    summary = deployment.publish(RFC_EXAMPLE)
    assert "10 entries" in summary
    worker = deployment.worker("w1").start()
    worker.wait_ready(partitions=deployment.partitions)
    deployment.wait_for_outputs(oracle, timeout=90)

    # The reference consumer writes exactly the oracle's ledger file, byte for byte.
    dump = tmp_path / "dump.jsonl"
    result = deployment.run("ledger-dump", "--out", str(dump))
    assert "distinct records" in result.stderr
    assert dump.read_bytes() == b"".join(record + b"\n" for record in oracle.records)
    # ... and `recurrence verify` says so against a replay's ledger (stdin: a pipe from the dump works too).
    ledger = tmp_path / "replay-ledger.jsonl"
    deployment.run("replay", str(RFC_EXAMPLE), "--state", str(tmp_path / "replay-state"), "--out", str(ledger))
    verified = deployment.run("verify", "--ledger", str(ledger), "--outputs", str(dump))
    assert verified.stdout.startswith("equal: ledger 9 records"), verified.stdout

    check_statistics([worker], oracle, ["rfc-minimum"])
    metrics = worker.metrics()
    assert metrics["recurrence_entries_processed_total"] == 10
    assert metrics['recurrence_records_emitted_total{kind="match"}'] == 3
    assert metrics['recurrence_records_emitted_total{kind="observation"}'] == 6
    assert worker.lag() == 0


def test_random_journal_equals_the_embedded_runner(deployment: Deployment, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    entries = write_journal(journal, generate(JournalSpec(entries=3000, scopes=40, seed=11, garbage_ratio=0.02)))
    oracle = Oracle.run(journal, tmp_path)
    kinds = {orjson.loads(r)["record"] for r in oracle.records}
    assert {"match", "observation", "dead_letter", "admission"} <= kinds

    deployment.apply_topics()
    deployment.publish(journal)
    started = time.monotonic()
    worker = deployment.worker("w1").start()
    worker.wait_ready(partitions=deployment.partitions)
    ready = time.monotonic()
    wait_for(
        lambda: worker.metrics()["recurrence_entries_processed_total"] >= entries, 180, 0.05, "all entries processed"
    )
    done = time.monotonic()

    def positions() -> dict[str, int]:
        report = worker.health() or {}
        found: dict[str, int] = report.get("positions", {})
        return found

    # /readyz reports each partition's durable journal position: every entry, once applied.
    wait_for(lambda: sum(positions().values()) == entries, 60, 0.1, "positions at the journal's end")
    assert set(positions()) == {str(p) for p in range(deployment.partitions)}
    outputs = deployment.wait_for_outputs(oracle, timeout=60)
    print(
        f"\n[throughput] one worker, {entries} entries ({journal.stat().st_size:,} bytes), {len(distinct(outputs))} "
        f"records: {entries / (done - ready):,.0f} entries/s from ready to processed "
        f"({done - ready:.2f}s); {entries / (done - started):,.0f} entries/s including worker start "
        f"({done - started:.2f}s, ready after {ready - started:.2f}s)"
    )
    check_statistics([worker], oracle, scopes_of(oracle))


def test_publishing_the_journal_twice_adds_no_distinct_records(deployment: Deployment, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    entries = write_journal(journal, generate(JournalSpec(entries=800, scopes=10, seed=5, garbage_ratio=0.03)))
    oracle = Oracle.run(journal, tmp_path)
    worker, first = deployment.one_worker_through(journal, oracle)
    raw_before = deployment.outputs(deduplicated=False)

    deployment.publish(journal)  # the same journal again, a backfill replay
    wait_for(
        lambda: worker.metrics()["recurrence_entries_processed_total"] >= 2 * entries,
        120,
        0.1,
        "the replayed entries to be processed",
    )
    after = deployment.outputs()
    raw_after = deployment.outputs(deduplicated=False)

    def ledger_only(records: list[bytes]) -> list[bytes]:
        return [r for r in records if orjson.loads(r)["record"] != "dead_letter"]

    assert ledger_only(after) == ledger_only(first), "a replay produced new distinct ledger records"
    assert ledger_only(raw_after) == ledger_only(raw_before), "a replay re-emitted ledger records"
    # The second copy is new journal records at new offsets: each bad line is a new dead
    # letter (its own origin and id, contract section 2); nothing else is new.
    seen = set(first)
    new_letters = [orjson.loads(r) for r in after if r not in seen]
    assert {r["record"] for r in new_letters} <= {"dead_letter"}
    assert len(new_letters) == sum(1 for r in oracle.records if orjson.loads(r)["record"] == "dead_letter")
    print(
        f"\n[replay] {entries} entries published twice: 0 new ledger records, "
        f"{len(new_letters)} new dead letters, one per republished bad entry"
    )
    check_statistics([worker], oracle, scopes_of(oracle, 3))


def test_rebuilding_all_state_from_the_journal_with_a_new_app_id(deployment: Deployment, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    entries = write_journal(journal, generate(JournalSpec(entries=600, scopes=8, seed=9, garbage_ratio=0.02)))
    oracle = Oracle.run(journal, tmp_path)
    first, before = deployment.one_worker_through(journal, oracle)
    assert first.stop() == 0

    # The documented procedure: a new app id is a new consumer group and a new changelog,
    # so the worker reads the journal from the beginning and rebuilds every partition.
    app_id = f"{deployment.prefix}-rebuild"
    deployment.run("topics", "apply", "--app-id", app_id)
    rebuilt = deployment.worker("rebuild", "--app-id", app_id).start()
    rebuilt.wait_ready(partitions=deployment.partitions)
    wait_for(lambda: rebuilt.metrics()["recurrence_entries_processed_total"] >= entries, 120, 0.1, "the rebuild")
    assert deployment.outputs() == before, "a rebuild produced a record that was not there before"
    check_statistics([rebuilt], oracle, scopes_of(oracle, 3))


def test_the_review_threshold_is_pinned_per_state_on_the_worker_too(deployment: Deployment, tmp_path: Path) -> None:
    oracle = Oracle.run(RFC_EXAMPLE, tmp_path)
    worker, _ = deployment.one_worker_through(RFC_EXAMPLE, oracle, timeout=90)
    worker.stop()
    # The same state with another threshold would move needing_review silently: refused, exit 2.
    other = deployment.worker("w1", "--review-threshold", "1")
    other.datadir = worker.datadir
    other.start()
    more = tmp_path / "more.jsonl"
    write_journal(more, [json.dumps({**json.loads(RFC_EXAMPLE.read_text().splitlines()[0]), "position": 99}).encode()])
    deployment.publish(more)
    assert other.proc is not None
    code = other.proc.wait(timeout=120)
    log_text = other.log_path.read_text(errors="replace")
    assert code == 2, log_text[-3000:]
    assert "review_threshold=3, not 1" in log_text


_EXPLODING = """
from recurrence_ledger.processor.core import ledger

_real = ledger.OutcomeLedger.process


def _exploding(self, scope_id, meta, ref, *rest):
    if ref[1] == "O12-unknown":
        raise KeyError("SECRET-OUTCOME-TEXT")
    return _real(self, scope_id, meta, ref, *rest)
"""
_INSTALL = "\nledger.OutcomeLedger.process = _exploding\n"


def test_an_entry_that_makes_the_engine_raise_is_dead_lettered_and_the_worker_goes_on(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same fault in the worker (a sitecustomize on its PYTHONPATH) and in the oracle (monkeypatch).
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_EXPLODING + _INSTALL)
    namespace: dict[str, Any] = {}
    exec(_EXPLODING, namespace)
    from recurrence_ledger.processor.core import ledger

    monkeypatch.setattr(ledger.OutcomeLedger, "process", namespace["_exploding"])
    oracle = Oracle.run(RFC_EXAMPLE, tmp_path)
    letters = [orjson.loads(r) for r in oracle.records if orjson.loads(r)["record"] == "dead_letter"]
    assert [(r["error"], r["position"]) for r in letters] == [("internal_error", 8)]

    deployment.extra_env["PYTHONPATH"] = str(hook)
    deployment.apply_topics()
    deployment.publish(RFC_EXAMPLE)
    worker = deployment.worker("w1").start()
    worker.wait_ready(partitions=deployment.partitions)
    outputs = deployment.wait_for_outputs(oracle, timeout=90)  # the entries after it were processed
    (letter,) = [orjson.loads(r) for r in outputs if orjson.loads(r)["record"] == "dead_letter"]
    assert letter["origin"]["topic"] == f"{deployment.prefix}.journal" and "SECRET" not in letter["detail"]
    assert worker.alive()
    # Its offset is behind the committed position: a restart does not run it again.
    worker.stop()
    worker.start().wait_ready(partitions=deployment.partitions)
    time.sleep(3)
    assert len(deployment.outputs(deduplicated=False)) == len(outputs)
