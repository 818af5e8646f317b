"""Embedded-replay benchmark: each figure beside its reference, measured in the same run.

1. Throughput: ``recurrence replay`` entries/s on seeded journals made by
   ``recurrence generate`` (bounded working set) and on a mixed journal
   (garbage, conflicts, unresolved evidence), each beside the project's own
   validation limit on the same journal (entry + content through the same
   pydantic models and nothing else, ``bench/validate_only.py``) and the
   orjson decode limit. Medians of ``--repeat`` fresh processes.
2. Output check: the ledger equals the pre-change engine's on the same journal
   (``--baseline REV``: that commit's engine, run from ``git archive``),
   record for record; dead letters compared by scope, position, code and raw,
   since their shape grew ``origin`` and ``dead_letter_id``.
3. Flat cost: one replay of ``--curve-entries`` (default 1M) fed through a
   pipe; µs per entry over the 10k entries before each checkpoint, and the
   process's peak RSS. Drawn to ``out/replay-curve.png``.

Results go to ``bench/results/replay.json`` (untracked) and the tables in
docs/performance.md between the ``bench:replay`` markers are regenerated.

    python bench/replay_bench.py [--quick] [--sizes 50000,100000] [--curve-entries 1000000]
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import orjson
from benchdoc import update_doc  # bench/ is the script's directory, so first on sys.path
from proccpu import cpu_seconds

from devkit.localrun import replay_command

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
EXPERIENCES_PER_SCOPE = 40
# Entries cite the 50 most recent evidence sources, receipts, Handoffs and Experience revisions of
# their scope: with the Experience cap, a bounded working set however long the journal.
RECENT_WINDOW = 50
SCOPES = 50
WINDOW = 10_000


def recurrence(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [PYTHON, "-m", "recurrence_ledger.processor.cli", *args], check=True, capture_output=True, **kwargs
    )


def generate(path: Path, entries: int, seed: int, mixed: bool) -> Path:
    if not path.exists():
        extra = ["--garbage-ratio", "0.02", "--conflict-ratio", "0.02"] if mixed else []
        args = ["generate", "--entries", str(entries), "--scopes", str(SCOPES), "--seed", str(seed)]
        args += ["--experiences-per-scope", str(EXPERIENCES_PER_SCOPE), "--recent-window", str(RECENT_WINDOW), *extra]
        with path.open("wb") as out:
            subprocess.run([PYTHON, "-m", "recurrence_ledger.processor.cli", *args], check=True, stdout=out)
    return path


def timed_child(argv: list[str], stdin: Any = None) -> tuple[float, float, bytes]:
    """Seconds and peak RSS (MiB) of one child process, and its stderr."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, stderr = proc.communicate()
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {stderr.decode(errors='replace')[-2000:]}")
    return seconds, _peak_rss_mib(stderr), stderr


_RSS_PROBE = (
    "import resource, runpy, sys; sys.argv = sys.argv[1:]; "
    "code = 0\n"
    "try:\n    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    "except SystemExit as e:\n    code = e.code or 0\n"
    "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)"
)


def _peak_rss_mib(stderr: bytes) -> float:
    for line in reversed(stderr.decode(errors="replace").splitlines()):
        if line.startswith("peak_rss_kib "):
            return int(line.split()[1]) / 1024
    return float("nan")


def module(name: str, *args: str) -> list[str]:
    return [PYTHON, "-c", _RSS_PROBE, name, *args]


def reference(journal: Path, decode: bool) -> float:
    out = subprocess.run(
        [PYTHON, str(ROOT / "bench" / "validate_only.py"), str(journal), *(["--decode"] if decode else [])],
        check=True,
        capture_output=True,
    ).stdout
    return float(json.loads(out)["entries_per_s"])


def validation_share(journal: Path) -> dict[str, float]:
    """µs per entry of a replay and of the validation limit's own work inside it (``validation_share.py``)."""
    out = subprocess.run(
        [PYTHON, str(ROOT / "bench" / "validation_share.py"), str(journal)], check=True, capture_output=True
    ).stdout
    share: dict[str, float] = json.loads(out)
    return share


def replay_once(journal: Path, workdir: Path, tag: str) -> tuple[float, float, Path, float]:
    """Whole-process seconds, peak RSS, the ledger, and the run's own seconds (its summary line:
    from opening the journal to the last commit, without the interpreter's start-up)."""
    state, ledger = workdir / f"state-{tag}", workdir / f"ledger-{tag}.jsonl"
    subprocess.run(["rm", "-rf", str(state), str(ledger)], check=True)
    # One process: what an entry costs (bench/jobs_bench.py for --jobs N).
    cli = module("recurrence_ledger.processor.cli")
    seconds, rss, stderr = timed_child(replay_command(journal, state, ledger, "--jobs", "1", command=cli))
    found = re.search(rb"entries in ([0-9.]+)s", stderr)
    return seconds, rss, ledger, float(found.group(1)) if found else seconds


def count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


# -- the pre-change engine, for the output check ---------------------------------------------
def baseline_ledger(rev: str, journal: Path, workdir: Path) -> Path:
    """The ledger the engine at ``rev`` writes for ``journal`` (its top-level packages, same venv)."""
    tree = workdir / f"baseline-{rev}"
    if not tree.exists():
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "processor", "schemas"], check=True, capture_output=True
        ).stdout
        tree.mkdir()
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
    ledger = workdir / f"baseline-{journal.stem}.jsonl"
    if not ledger.exists():
        state = workdir / f"baseline-state-{journal.stem}"
        code = (
            f"import sys; sys.path.insert(0, {str(tree)!r}); from processor.cli import main; "
            "sys.exit(main(sys.argv[1:]))"
        )
        subprocess.run(
            [PYTHON, "-c", code, "replay", str(journal), "--state", str(state), "--out", str(ledger)],
            check=True,
            capture_output=True,
            cwd=tree,
        )
    return ledger


def _comparable(line: bytes) -> bytes:
    """What must not have changed: everything, except the fields this round added on purpose."""
    record = orjson.loads(line)
    kind = record.get("record")
    if kind == "dead_letter":  # grew origin and dead_letter_id; its detail no longer echoes input
        return orjson.dumps([record["scope_id"], record["position"], record["error"], record["raw"]])
    if kind == "admission":  # grew target and recall_cue at the end
        record.pop("target", None)
        record.pop("recall_cue", None)
        return orjson.dumps(record)
    return line


def same_output(ours: Path, theirs: Path) -> bool:
    with ours.open("rb") as a, theirs.open("rb") as b:
        for left, right in zip(a, b, strict=False):
            if _comparable(left.rstrip(b"\n")) != _comparable(right.rstrip(b"\n")):
                return False
    return count_lines(ours) == count_lines(theirs)


# -- flat cost --------------------------------------------------------------------------------
SUB_WINDOW = 2_000


def curve(journal: Path, workdir: Path, checkpoints: list[int]) -> dict[str, Any]:
    """Feed the journal through a pipe; at each checkpoint, the cost of the 10k entries before it.

    Two figures, each robust to a different kind of noise on a shared machine: wall µs per entry
    as the median of five 2k-entry sub-windows (a burst of another process's work moves one of
    them, not the median), and the child's own CPU µs per entry over the 10k window (what it
    spent, whatever else ran).
    """
    state, ledger = workdir / "state-curve", workdir / "ledger-curve.jsonl"
    subprocess.run(["rm", "-rf", str(state), str(ledger)], check=True)
    argv = module(
        "recurrence_ledger.processor.cli", "replay", "-", "--state", str(state), "--out", str(ledger), "--jobs", "1"
    )
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    stamps: dict[int, tuple[float, float]] = {}
    steps = range(WINDOW // SUB_WINDOW + 1)
    wanted = {c - i * SUB_WINDOW for c in checkpoints for i in steps if c - i * SUB_WINDOW >= 0}
    started = time.perf_counter()
    stamps[0] = (0.0, cpu_seconds(proc.pid))
    count = 0
    with journal.open("rb") as handle:
        for line in handle:
            proc.stdin.write(line)
            count += 1
            if count in wanted:
                proc.stdin.flush()
                stamps[count] = (time.perf_counter() - started, cpu_seconds(proc.pid))
    proc.stdin.close()
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    proc.wait()
    total = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(stderr.decode(errors="replace")[-2000:])
    points = []
    for checkpoint in checkpoints:
        subs = [
            (stamps[end][0] - stamps[end - SUB_WINDOW][0]) / SUB_WINDOW * 1e6
            for end in range(checkpoint, max(checkpoint - WINDOW, 0), -SUB_WINDOW)
        ]
        start = max(checkpoint - WINDOW, 0)
        cpu = (stamps[checkpoint][1] - stamps[start][1]) / (checkpoint - start) * 1e6
        points.append(
            {
                "entries": checkpoint,
                "us_per_entry": round(statistics.median(subs), 1),
                "cpu_us_per_entry": round(cpu, 1),
            }
        )
    return {
        "entries": count,
        "seconds": round(total, 1),
        "peak_rss_mib": round(_peak_rss_mib(stderr), 1),
        "points": points,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only the bench draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    xs = [p["entries"] for p in result["points"]]
    ys = [p["us_per_entry"] for p in result["points"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(xs, ys, marker="o")
    ax.set_xscale("log")
    ax.set_ylim(0, max(ys) * 1.3)
    ax.set_xlabel("entries replayed so far")
    ax.set_ylabel("µs per entry (last 10k)")
    ax.set_title(f"recurrence replay: cost per entry, peak RSS {result['peak_rss_mib']:.0f} MiB")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


# -- report -------------------------------------------------------------------------------------
def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| journal | replay entries/s (whole process) | same, after start-up | validation limit | "
        "replay / limit | after start-up / limit | orjson decode | peak RSS | same ledger as before |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    body = "".join(
        f"| {r['journal']} | {r['replay_per_s']:,.0f} | {r['steady_per_s']:,.0f} | {r['validate_per_s']:,.0f} | "
        f"{r['ratio']:.0%} | {r['steady_ratio']:.0%} | "
        f"{r['decode_per_s']:,.0f} | {r['peak_rss_mib']:.0f} MiB | {r['same_as_baseline']} |\n"
        for r in rows
    )
    return head + body


def budget_table(rows: list[dict[str, Any]]) -> str:
    """Goal 1's budget per journal: at a quarter of the limit's rate, what is left beside the validation."""
    head = (
        "| journal | validation limit, µs per entry | a replay at 25% of it, µs per entry | "
        "of which the same validation inside a replay | left for everything else | "
        "everything else today (after start-up) |\n"
        "|---|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        limit = 1e6 / r["validate_per_s"]
        inside = r["validation_inside_us"]
        lines.append(
            f"| {r['journal']} | {limit:.1f} | {4 * limit:.1f} | {inside:.1f} | {4 * limit - inside:.1f} | "
            f"{1e6 / r['steady_per_s'] - inside:.1f} |\n"
        )
    return head + "".join(lines)


def curve_table(result: dict[str, Any]) -> str:
    first, first_cpu = result["points"][0]["us_per_entry"], result["points"][0]["cpu_us_per_entry"]
    head = (
        "| entries so far | wall µs per entry | vs first 10k | CPU µs per entry | vs first 10k |\n"
        "|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {p['entries']:,} | {p['us_per_entry']:.1f} | {p['us_per_entry'] / first:.2f}x | "
        f"{p['cpu_us_per_entry']:.1f} | {p['cpu_us_per_entry'] / first_cpu:.2f}x |\n"
        for p in result["points"]
    )
    return head + body + f"\nPeak RSS of the whole {result['entries']:,}-entry run: {result['peak_rss_mib']:.0f} MiB.\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--curve-entries", type=int, default=1_000_000)
    parser.add_argument("--baseline", default="b6b64ac", help="commit of the pre-change engine ('' to skip)")
    parser.add_argument("--quick", action="store_true", help="10k journals, 1 repeat, a 100k curve")
    parser.add_argument("--workdir", help="keep journals and ledgers here (default: a temporary directory)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeat, args.curve_entries = "10000", 1, 100_000
    sizes = [int(s) for s in args.sizes.split(",")]
    checkpoints = [c for c in (10_000, 100_000, 300_000, 1_000_000) if c <= args.curve_entries]
    with tempfile.TemporaryDirectory(prefix="recurrence-bench-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for size in sizes:
            for mixed in (False, True):
                name = f"{'mixed' if mixed else 'generate'}-{size // 1000}k"
                journal = generate(workdir / f"{name}.jsonl", size, 42 if not mixed else 43, mixed)
                runs = [replay_once(journal, workdir, f"{name}-{i}") for i in range(args.repeat)]
                seconds = statistics.median(r[0] for r in runs)
                steady = statistics.median(r[3] for r in runs)
                validate = statistics.median(reference(journal, False) for _ in range(args.repeat))
                decode = statistics.median(reference(journal, True) for _ in range(args.repeat))
                share = validation_share(journal)
                same = "not checked"
                if args.baseline:
                    same = "yes" if same_output(runs[0][2], baseline_ledger(args.baseline, journal, workdir)) else "NO"
                entries = count_lines(journal)
                row = {
                    "journal": name,
                    "entries": entries,
                    "replay_per_s": entries / seconds,
                    "steady_per_s": entries / steady,
                    "validate_per_s": validate,
                    "decode_per_s": decode,
                    "ratio": entries / seconds / validate,
                    "steady_ratio": entries / steady / validate,
                    "peak_rss_mib": max(r[1] for r in runs),
                    "same_as_baseline": same,
                    "validation_inside_us": share["validation_us_per_entry"],
                    "share_replay_us": share["replay_us_per_entry"],
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
        curve_journal = generate(workdir / f"curve-{args.curve_entries}.jsonl", args.curve_entries, 7, False)
        flat = curve(curve_journal, workdir, checkpoints)
        print(json.dumps(flat), flush=True)
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "scopes": SCOPES,
        "experiences_per_scope": EXPERIENCES_PER_SCOPE,
        "recent_window": RECENT_WINDOW,
        "repeat": args.repeat,
        "throughput": rows,
        "curve": flat,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "replay.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(flat, ROOT / "out" / "replay-curve.png")
    print(table(rows))
    print(budget_table(rows))
    print(curve_table(flat))
    if not args.quick:
        update_doc("replay", table(rows))
        update_doc("budget", budget_table(rows))
        update_doc("curve", curve_table(flat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
