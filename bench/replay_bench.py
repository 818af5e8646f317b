"""Embedded-runner benchmark: entries/s and peak RSS at growing journal sizes.

Each size runs ``recurrence replay`` in a fresh process on a seeded synthetic
journal (fresh state dir), so peak RSS is the whole process's. Memory that
stays flat while the journal grows 10x is the "bounded memory" claim; the
numbers land in bench/results/replay.json and are quoted in docs/performance.md.

    python bench/replay_bench.py [--sizes 10000,100000] [--scopes 50] [--garbage 0.01]
"""

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recurrence.processor.synthetic import JournalSpec, write

ROOT = Path(__file__).resolve().parent.parent


def _ledger_records(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if not line.startswith(b'{"record":"dead_letter"'))


def run_once(entries: int, scopes: int, garbage: float, cap: int | None, workdir: Path) -> dict[str, float]:
    journal = workdir / f"journal-{entries}.jsonl"
    spec = JournalSpec(entries=entries, scopes=scopes, seed=42, garbage_ratio=garbage, experiences_per_scope=cap)
    write(spec, str(journal))
    state, out = workdir / f"state-{entries}", workdir / f"ledger-{entries}.jsonl"
    started = time.perf_counter()
    # /usr/bin/time-free RSS: run in a child and read its own getrusage.
    code = (
        "import resource, sys; from recurrence.processor.cli import main; rc = main(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "replay", str(journal), "--state", str(state), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - started
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    records = _ledger_records(out)
    again = subprocess.run(
        [sys.executable, "-m", "recurrence.processor.cli", "replay", str(journal), "--state", str(state),
         "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    # Dead letters are diagnostics and may be written again; ledger records may not.
    assert _ledger_records(out) == records, "a second replay appended ledger records"
    del again
    return {
        "entries": entries,
        "seconds": round(seconds, 2),
        "entries_per_s": round(entries / seconds),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "ledger_records": records,
        "journal_mib": round(journal.stat().st_size / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--scopes", type=int, default=50)
    parser.add_argument("--garbage", type=float, default=0.01)
    parser.add_argument(
        "--experiences-per-scope",
        type=int,
        default=40,
        help="cap on distinct Experiences per scope (0: unbounded, every scope's candidate set keeps growing)",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "replay.json"))
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="recurrence-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            cap = args.experiences_per_scope or None
            result = run_once(size, args.scopes, args.garbage, cap, Path(tmp))
            print(json.dumps(result), flush=True)
            results.append(result)
    report = {
        "machine": {
            "python": platform.python_version(),
            "cpus": __import__("os").cpu_count(),
            "platform": platform.platform(),
        },
        "scopes": args.scopes,
        "garbage_ratio": args.garbage,
        "experiences_per_scope": args.experiences_per_scope or None,
        "runs": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
