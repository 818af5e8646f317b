"""Instructions per entry, replay and its validation limit, counted by callgrind: A/B on a noisy machine.

Wall-clock figures on a shared 2-core machine move by ±8% or more between
runs; instruction counts do not (the same binary, input and environment give
the same count to a few parts in ten thousand, whatever else runs). This
runs ``recurrence replay`` and ``bench/validate_only.py`` under ``valgrind
--tool=callgrind`` on the first SHORT and LONG entries of a journal and
reports the difference divided by LONG - SHORT, so interpreter start-up and
imports cancel out:

    python bench/icount.py JOURNAL [--short 2000] [--long 8000]

Use it to decide whether a change to the hot path helps (run it before and
after; a change under ~0.5% is noise from hash seeds and thread timing). It
is not a speed: instructions per second differ between the two workloads
(the replay touches far more memory), so the wall-clock ratio ``make bench``
prints is lower than the instruction ratio printed here. valgrind's SHA-256
runs without the CPU's SHA extensions, so digest-heavy code weighs more here
than on the hardware.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from devkit.localrun import replay_command

PYTHON = sys.executable
BENCH = Path(__file__).resolve().parent
_COLLECTED = re.compile(rb"Collected : (\d+)")


def instructions(argv: Sequence[str]) -> int:
    """Instructions one process executes, all threads (callgrind's total)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # set and dict order, hence the count, do not vary per run
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        capture_output=True,
        env=env,
        check=False,
    )
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-1500:]}")
    return int(found.group(1))


def head(journal: Path, lines: int, into: Path) -> Path:
    with journal.open("rb") as source, into.open("wb") as out:
        for number, line in enumerate(source):
            if number >= lines:
                break
            out.write(line)
    return into


def counted_with_state(argv: Sequence[str], state: Path) -> int:
    """``instructions`` of a run that builds the state directory ``state``, removed after it."""
    try:
        return instructions(argv)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def replay_count(journal: Path, workdir: Path) -> int:
    state = workdir / f"state-{journal.stem}"
    cli = [PYTHON, "-m", "recurrence_ledger.processor.cli"]
    return counted_with_state(
        replay_command(journal, state, workdir / f"ledger-{journal.stem}.jsonl", "--jobs", "1", command=cli),
        state,
    )


def window_parser() -> argparse.ArgumentParser:
    """The arguments every count takes: the journal and the window of entries counted."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("journal", type=Path)
    parser.add_argument("--short", type=int, default=2000)
    parser.add_argument("--long", type=int, default=8000)
    return parser


def check_window(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """False (with a message) when valgrind is missing; a window that is not one is a usage error."""
    if not 0 < args.short < args.long:
        parser.error("need 0 < --short < --long")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return False
    return True


@dataclass(frozen=True)
class Window:
    """The journal's first ``--short`` and first ``--long`` entries as two files in ``workdir``: what an
    entry costs is a count over the longer less the same count over the shorter, per entry between
    (start-up and imports cancel out)."""

    workdir: Path
    short: Path
    long: Path
    entries: int

    @classmethod
    def of(cls, args: argparse.Namespace, workdir: Path) -> "Window":
        short = head(args.journal, args.short, workdir / f"head-{args.short}.jsonl")
        long = head(args.journal, args.long, workdir / f"head-{args.long}.jsonl")
        return cls(workdir, short, long, args.long - args.short)

    def per_entry(self, count: Callable[[Path], int]) -> float:
        return (count(self.long) - count(self.short)) / self.entries


def main() -> int:
    parser = window_parser()
    args = parser.parse_args()
    if not check_window(parser, args):
        return 2
    with tempfile.TemporaryDirectory(prefix="recurrence-icount-") as tmp:
        window = Window.of(args, Path(tmp))
        replay = window.per_entry(lambda journal: replay_count(journal, window.workdir))
        validate = [PYTHON, str(BENCH / "validate_only.py")]
        validation = window.per_entry(lambda journal: instructions([*validate, str(journal)]))
    print(f"entries {args.short + 1:,}-{args.long:,} of {args.journal.name}")
    print(f"replay:           {replay:,.0f} instructions per entry")
    print(f"validation limit: {validation:,.0f} instructions per entry")
    print(f"replay / limit (by instructions): {validation / replay:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
