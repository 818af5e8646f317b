"""The worker's pattern suggestions and statistics table topic against the embedded runner (issue 11.2, 11.3).

One multi-scope journal (``recurrence generate --entries 3000 --scopes 10
--seed 8``) goes through a worker in two halves; under at-least-once the
worker is killed (-9) in between, so entries and repartitioned observations
are delivered again. Then:

* the distinct suggestions on ``<prefix>.patterns`` are exactly the records
  of ``recurrence patterns --json`` of an embedded replay, one per signature
  key (none twice at all under exactly_once, read_committed);
* the worker's ``GET /patterns`` (the patterns agent's table) lists exactly
  the rows of ``recurrence patterns --all --json``, and its suggested ones are
  ``recurrence patterns --json``;
* the statistics topic, read from the start keeping the last value per key
  (``recurrence statistics-dump``), equals ``GET /statistics`` and the
  embedded ``recurrence stats``.
"""

import asyncio
from pathlib import Path
from typing import Any

import orjson

from devkit.deployment import Deployment, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.patterns import suggestion
from recurrence_ledger.processor.stream.clients.dump import read_records, read_statistics
from recurrence_ledger.processor.synthetic import JournalSpec, generate


def _embedded_patterns(
    deployment: Deployment, journal: Path, tmp_path: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``recurrence patterns --json`` (the suggestions) and ``--all --json`` of an embedded replay."""
    state, ledger = tmp_path / "embedded-state", tmp_path / "embedded-ledger.jsonl"
    deployment.run("replay", str(journal), "--state", str(state), "--out", str(ledger))
    listed: list[dict[str, Any]] = orjson.loads(deployment.run("patterns", "--state", str(state), "--json").stdout)
    every: list[dict[str, Any]] = orjson.loads(
        deployment.run("patterns", "--state", str(state), "--all", "--json").stdout
    )
    return listed, every


def _suggestions(deployment: Deployment) -> tuple[list[bytes], list[bytes]]:
    """(distinct, raw) records on the patterns topic."""
    topic = [f"{deployment.prefix}.patterns"]
    distinct, _ = asyncio.run(read_records(deployment.connection, topic))
    raw, _ = asyncio.run(read_records(deployment.connection, topic, dedupe=False))
    return distinct, raw


def _statistics(deployment: Deployment) -> list[Any]:
    return asyncio.run(read_statistics(deployment.connection, f"{deployment.prefix}.statistics"))


def test_patterns_and_statistics_topics_equal_the_embedded_runner(
    deployment: Deployment, tmp_path: Path, guarantee: str
) -> None:
    lines = list(generate(JournalSpec(entries=3000, scopes=10, seed=8)))
    journal, first, second = tmp_path / "journal.jsonl", tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    write_journal(journal, lines)
    write_journal(first, lines[:1500])
    write_journal(second, lines[1500:])
    oracle = Oracle.run(journal, tmp_path)
    listed, every = _embedded_patterns(deployment, journal, tmp_path)
    assert len(listed) == 8 and all(row["suggested"] for row in listed)
    want = {suggestion(row["signature_key"], row["min_scopes"]).line for row in listed}

    deployment.apply_topics()
    deployment.publish(first)
    worker = deployment.worker("w1").start()
    worker.wait_ready(partitions=deployment.partitions)
    if guarantee == "at_least_once":
        wait_for(lambda: worker.metrics()["recurrence_entries_processed_total"] >= 1500, 120, 0.1, "the first half")
        worker.kill9()  # before Faust commits: both agents get their last batches again
        worker.start().wait_ready(partitions=deployment.partitions)
    # (exactly_once: no restart here; a restart waits out the transaction timeout, see test_crash.py)
    deployment.publish(second)
    # With --kinds patterns, --until-caught-up waits for the patterns agent too (behind the journal agent).
    early = deployment.run("ledger-dump", "--until-caught-up", "--max-wait", "180", "--kinds", "patterns")
    assert {line.encode() for line in early.stdout.splitlines()} == want, early.stderr

    def caught_up() -> bool:
        return set(_suggestions(deployment)[0]) == want and _statistics(deployment) == oracle.statistics()

    wait_for(caught_up, 180, 0.5, "the patterns and statistics topics to equal the embedded runner")
    distinct, raw = _suggestions(deployment)
    keys = [orjson.loads(record)["signature_key"] for record in distinct]
    assert sorted(keys) == sorted(row["signature_key"] for row in listed), "one suggestion per key"
    if guarantee == "exactly_once":
        assert len(raw) == len(distinct)
    # /patterns answers from the patterns agent's table (its rows arrive with the suggestions' batches).
    wait_for(lambda: worker.get_json("/patterns")[1].get("patterns") == every, 60, 0.5, "/patterns to equal --all")
    status, patterns = worker.get_json("/patterns")
    assert status == 200 and patterns == {"available": True, "note": None, "min_scopes": 3, "patterns": every}
    assert [row for row in patterns["patterns"] if row["suggested"]] == listed
    status, served = worker.get_json("/statistics")
    assert status == 200 and served == oracle.statistics() == _statistics(deployment)
    # The command a downstream service would start from prints the same table.
    dumped = deployment.run("statistics-dump")
    assert orjson.loads(dumped.stdout) == served
    listed_from_topic = deployment.run("ledger-dump", "--kinds", "patterns").stdout.splitlines()
    assert {line.encode() for line in listed_from_topic} == want
    metrics = worker.metrics()
    assert metrics["recurrence_statistics_records_total"] >= 10
    assert metrics["recurrence_pattern_observations_total"] > 0  # the second half alone (counts restart at 0)
