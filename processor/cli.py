"""``recurrence`` command line: the commands acceptance suites call (contract section 4).

Exit codes: 0 success (even when entries went to dead letters), 2 the run could
not proceed (unreadable journal, unusable state directory, bad arguments),
1 an unexpected internal error.
"""

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from recurrence.processor.cliargs import EXIT_OK, EXIT_UNUSABLE, non_negative_int, positive_int, ratio
from recurrence.processor.embedded import DEFAULT_BATCH, open_state, replay, statistics
from recurrence.processor.engine import EngineConfig
from recurrence.processor.exceptions import RecurrenceError
from recurrence.processor.synthetic import JournalSpec, generate
from recurrence.schemas.constants import DEFAULT_TOP_REVISIONS, RECURRENCE_REVIEW_STREAK_THRESHOLD


def _cmd_replay(args: argparse.Namespace) -> int:
    if args.journal != "-" and not Path(args.journal).is_file():
        print(f"recurrence replay: cannot read journal {args.journal}", file=sys.stderr)
        return EXIT_UNUSABLE
    store = open_state(Path(args.state))
    try:
        config = EngineConfig(review_threshold=args.review_threshold)
        summary = replay(args.journal, store, Path(args.out), config, batch_size=args.batch)
    finally:
        store.close()
    if summary.truncated_bytes:
        print(
            f"recurrence replay: recovered the ledger ({summary.truncated_bytes} uncommitted bytes regenerated)",
            file=sys.stderr,
        )
    print(summary.line(), file=sys.stderr)
    return EXIT_OK


def _cmd_stats(args: argparse.Namespace) -> int:
    store = open_state(Path(args.state), must_exist=True, read_only=True)
    try:
        result = statistics(store, args.scope, args.top)
    finally:
        store.close()
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    return EXIT_OK


def _cmd_generate(args: argparse.Namespace) -> int:
    spec = JournalSpec(entries=args.entries, scopes=args.scopes, seed=args.seed, garbage_ratio=args.garbage_ratio)
    out = sys.stdout.buffer
    for line in generate(spec):
        out.write(line + b"\n")
    out.flush()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recurrence",
        description="Recurring-failure ledger: did what we learned from a failure ever help?",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("replay", help="run the engine embedded over a .jsonl journal")
    p.add_argument("journal", help="journal .jsonl file, or - for stdin")
    p.add_argument("--state", required=True, help="RocksDB state directory (created if missing)")
    p.add_argument("--out", required=True, help="ledger .jsonl file; records are appended")
    p.add_argument(
        "--review-threshold",
        type=positive_int,
        default=RECURRENCE_REVIEW_STREAK_THRESHOLD,
        help="RECURRENCE_REVIEW_STREAK_THRESHOLD (fixed per state directory; default %(default)s)",
    )
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="entries per durable commit")
    p.set_defaults(func=_cmd_replay)

    p = commands.add_parser("stats", help="print per-scope recurrence statistics as JSON")
    p.add_argument("--state", required=True, help="state directory written by replay")
    p.add_argument("--scope", help="only this scope")
    p.add_argument("--top", type=non_negative_int, default=DEFAULT_TOP_REVISIONS, help="top_revisions bound N")
    p.set_defaults(func=_cmd_stats)

    p = commands.add_parser("generate", help="write a seeded synthetic journal to stdout")
    p.add_argument("--entries", type=positive_int, default=1000)
    p.add_argument("--scopes", type=positive_int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--garbage-ratio", type=ratio, default=0.0, help="share of deliberately invalid lines")
    p.set_defaults(func=_cmd_generate)

    try:
        from recurrence.processor.stream.cli import register  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the stream package ships with the product
        pass
    else:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args.func(args)
    except RecurrenceError as error:
        print(f"recurrence {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        return EXIT_OK
    except OSError as error:
        # Unreadable journal or unwritable ledger: the run cannot proceed.
        print(f"recurrence {args.command}: {error.strerror or error}: {error.filename or ''}", file=sys.stderr)
        return EXIT_UNUSABLE
    return code


if __name__ == "__main__":
    sys.exit(main())
