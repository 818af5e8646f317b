"""Migration benchmark: how long ``recurrence migrate`` takes a single-store state of 78d47b4 (issue 35).

Per journal size N (``recurrence generate`` with 200 scopes, 40 Experiences per scope,
``--recent-window 50``, 2% garbage, seed 42):

1. 78d47b4 (the engine before ``replay --jobs``, built from git by ``devkit.releases``) replays the
   journal into a fresh state: state format 1, every row in one RocksDB store;
2. ``--repeat`` times, on a fresh copy of that state: ``recurrence migrate --dry-run`` and then
   ``recurrence migrate``, each timed as a user runs it (process start included), wall and CPU;
3. once: the migrated state, continued by ``recurrence replay`` over the same journal, must append
   nothing (the whole journal was applied before) -- the migration lost nothing the resume needs.

Prints one JSON line per size with the median seconds, the rows moved and the seconds per 100k journal
entries; the rows are in bench/results/migrate.json.

    python bench/migrate_bench.py [--sizes 100000,300000] [--repeat 3]
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devkit.localrun import REPO, recurrence_command, replay_command
from devkit.releases import build

BEFORE_JOBS = "78d47b4"
RESULTS = REPO / "bench" / "results" / "migrate.json"


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of a child process (its children included), and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])}... exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stderr


def size_of(state: Path) -> int:
    return sum(path.stat().st_size for path in state.rglob("*") if path.is_file())


def one_size(entries: int, repeat: int, work: Path) -> dict[str, Any]:
    journal = work / f"journal-{entries}.jsonl"
    with journal.open("wb") as out:
        subprocess.run(
            [
                *recurrence_command(),
                "generate",
                "--entries",
                str(entries),
                "--scopes",
                "200",
                "--experiences-per-scope",
                "40",
                "--recent-window",
                "50",
                "--garbage-ratio",
                "0.02",
                "--seed",
                "42",
            ],
            stdout=out,
            check=True,
        )
    old = build(BEFORE_JOBS)
    original, ledger = work / f"single-{entries}", work / f"ledger-{entries}.jsonl"
    old.run("replay", journal, "--state", original, "--out", ledger)
    rows: list[dict[str, float]] = []
    for run in range(repeat):
        state = work / f"state-{entries}-{run}"
        shutil.copytree(original, state)
        dry_wall, dry_cpu, _ = timed([*recurrence_command(), "migrate", "--state", str(state), "--dry-run"])
        wall, cpu, said = timed([*recurrence_command(), "migrate", "--state", str(state)])
        rows.append({"dry_wall": dry_wall, "dry_cpu": dry_cpu, "wall": wall, "cpu": cpu})
        if run:
            shutil.rmtree(state)
    state = work / f"state-{entries}-0"
    length = ledger.stat().st_size
    subprocess.run(replay_command(journal, state, ledger), check=True, capture_output=True)
    if ledger.stat().st_size != length:
        sys.exit("the migrated state, resumed over the journal it had applied, appended to its ledger")
    moved = int(said.split(" rows into")[0].rsplit(" ", 1)[1].replace(",", ""))
    wall = statistics.median(row["wall"] for row in rows)
    return {
        "entries": entries,
        "rows": moved,
        "single_store_mib": round(size_of(original) / 2**20, 1),
        "migrated_mib": round(size_of(state) / 2**20, 1),
        "wall_s": round(wall, 2),
        "cpu_s": round(statistics.median(row["cpu"] for row in rows), 2),
        "dry_run_wall_s": round(statistics.median(row["dry_wall"] for row in rows), 2),
        "wall_s_per_100k_entries": round(wall * 100_000 / entries, 2),
        "rows_per_s": round(moved / wall),
        "runs": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,300000", help="journal sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="migrations timed per size (median reported)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="migrate-bench-") as scratch:
        for entries in (int(size) for size in args.sizes.split(",")):
            result = one_size(entries, args.repeat, Path(scratch))
            print(json.dumps({k: v for k, v in result.items() if k != "runs"}), flush=True)
            results.append(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"machine": platform.node(), "cpus": os.cpu_count(), "results": results}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
