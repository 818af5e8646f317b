"""A rolling upgrade from the previous release under exactly_once (issue 35, docs/upgrading.md).

A worker of the previous release (``devkit.releases.PREVIOUS``, built from git by ``make releases``)
runs the deployment alone; a worker of this release joins its group, and the two share the partitions
while the journal grows (each restores the other's partitions from changelogs and snapshots the other
wrote); then the old one stops and the new one carries on alone. The outputs equal the embedded
ledger at every step, and a read_committed consumer never sees a record twice.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from devkit.deployment import Deployment, Worker, owned_partitions, write_journal
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from devkit.releases import PREVIOUS, ReleaseUnavailableError, build
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import distinct

from .workerchecks import check_statistics, scopes_of


def _processed(worker: Worker) -> float:
    return worker.metrics()["recurrence_entries_processed_total"]


def test_a_rolling_upgrade_from_the_previous_release_keeps_exactly_once(deployment: Deployment, tmp_path: Path) -> None:
    try:
        previous = build(PREVIOUS)
    except ReleaseUnavailableError as missing:
        pytest.skip(f"the previous release cannot be built here: {missing}")
    # The old worker runs the release's own code, not this checkout's.
    where = subprocess.run(
        [sys.executable, "-c", f"import {previous.package}.processor.cli as m; print(m.__file__)"],
        env=previous.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(previous.lib)
    deployment.guarantee = "exactly_once"
    lines = list(generate(JournalSpec(entries=1800, scopes=24, seed=35, garbage_ratio=0.02)))
    parts = [lines[:600], lines[600:1200], lines[1200:]]
    chunks = []
    for index, part in enumerate(parts):
        chunks.append(tmp_path / f"chunk{index}.jsonl")
        write_journal(chunks[-1], part)
    upto: list[Path] = []
    for index in range(3):
        upto.append(tmp_path / f"upto{index}.jsonl")
        write_journal(upto[-1], [line for part in parts[: index + 1] for line in part])

    # The deployment as the previous release made it: its topics, its worker alone.
    previous.run("topics", "apply", env=deployment.env())
    deployment.publish(chunks[0])
    old = deployment.worker("old", release=previous).start()
    old.wait_ready(partitions=deployment.partitions)
    deployment.wait_for_outputs(Oracle.run(upto[0], tmp_path), timeout=120)

    # Rolling: this release joins the group and the two split the partitions.
    new = deployment.worker("new").start()
    wait_for(lambda: owned_partitions([old, new], deployment.partitions), 120, 0.2, "the two releases to share")
    before = _processed(new)
    deployment.publish(chunks[1])
    deployment.wait_for_outputs(Oracle.run(upto[1], tmp_path), timeout=180)
    assert _processed(new) > before, "the new release processed nothing while both ran"

    # The old one goes; the new one takes its partitions over and carries on alone.
    assert old.stop() == 0
    new.wait_ready(timeout=120, partitions=deployment.partitions)
    deployment.publish(chunks[2])
    oracle = Oracle.run(upto[2], tmp_path)
    deployment.wait_for_outputs(oracle, timeout=180)
    raw = deployment.outputs(deduplicated=False)
    assert len(raw) == len(distinct(raw)), "a read_committed consumer saw a record id twice"
    check_statistics([new], oracle, scopes_of(oracle, 4))
