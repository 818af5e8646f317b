"""Kafka subcommands of ``recurrence``: worker, topics, publish, ledger-dump.

Faust is imported only when ``worker`` runs, so the embedded commands start fast.
Exit codes follow ``processor.cli``: 0 success, 2 the run could not proceed
(broker unreachable, topics missing), 3 topic drift (``topics apply``/``worker``),
1 an unexpected error; a worker that aborts a batch exits 70 (see ``app``).
"""

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import IO, Any, Final

from recurrence.processor.cliargs import EXIT_OK, EXIT_UNUSABLE, non_negative_int, positive_int
from recurrence.processor.stream.settings import (
    StreamSettings,
    add_connection_arguments,
    add_layout_arguments,
    add_topic_arguments,
    settings_from_args,
)
from recurrence.schemas.constants import RECURRENCE_REVIEW_STREAK_THRESHOLD

EXIT_DRIFT: Final = 3  # topics exist but differ from their definitions

log = logging.getLogger("recurrence.stream.cli")


def _settings(args: argparse.Namespace) -> StreamSettings | None:
    try:
        return settings_from_args(args)
    except (ValueError, OSError) as error:
        print(f"recurrence {args.command}: {error}", file=sys.stderr)
        return None


def _apply(settings: StreamSettings, create: bool, report: IO[str] = sys.stderr) -> int:
    from recurrence.topics.apply import apply_topics  # noqa: PLC0415
    from recurrence.topics.definitions import topic_specs  # noqa: PLC0415

    try:
        result = asyncio.run(apply_topics(settings.kafka, topic_specs(settings), create=create))
    except Exception as error:  # KafkaConnectionError, timeouts, auth failures
        print(
            f"recurrence: cannot reach Kafka at {settings.kafka.bootstrap_servers}: {type(error).__name__}: {error}",
            file=sys.stderr,
        )
        return EXIT_UNUSABLE
    for topic in result.reports:
        print(topic.line(), file=report)
    if result.ok:
        return EXIT_OK
    missing = [r for r in result.reports if r.status == "would create"]
    if missing and len(missing) == len(result.drift):
        print("recurrence: topics are missing; run 'recurrence topics apply' first", file=sys.stderr)
        return EXIT_UNUSABLE
    print(
        "recurrence: existing topics differ from their definitions (see above); nothing was changed. "
        "Fix them by hand or deploy with a new --topic-prefix and rebuild from the journal.",
        file=sys.stderr,
    )
    return EXIT_DRIFT


def _cmd_topics_apply(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings is None:
        return EXIT_UNUSABLE
    return _apply(settings, create=not args.dry_run, report=sys.stdout)


def _cmd_topics_show(args: argparse.Namespace) -> int:
    from recurrence.topics.definitions import topic_specs  # noqa: PLC0415

    settings = _settings(args)
    if settings is None:
        return EXIT_UNUSABLE
    for spec in topic_specs(settings):
        config = " ".join(f"{k}={v}" for k, v in sorted(spec.config.items()))
        layout = f"partitions={spec.partitions} replication={spec.replication}"
        print(f"{spec.name}\t{layout} {config}\t# {spec.description}")
    return EXIT_OK


def _cmd_publish(args: argparse.Namespace) -> int:
    from recurrence.processor.stream.publish import publish  # noqa: PLC0415

    if args.journal != "-" and not Path(args.journal).is_file():
        print(f"recurrence publish: cannot read journal {args.journal}", file=sys.stderr)
        return EXIT_UNUSABLE
    settings = _settings(args)
    if settings is None:
        return EXIT_UNUSABLE
    topic = settings.topics.journal
    try:
        summary = asyncio.run(publish(args.journal, settings.kafka, topic))
    except Exception as error:
        print(f"recurrence publish: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(summary.line(topic), file=sys.stderr)
    return EXIT_OK


def _cmd_ledger_dump(args: argparse.Namespace) -> int:
    from recurrence.processor.stream.dump import dump  # noqa: PLC0415

    settings = _settings(args)
    if settings is None:
        return EXIT_UNUSABLE
    names = settings.topics
    chosen = {"ledger": names.ledger, "review": names.review, "dead-letters": names.dead_letters}
    topics = [chosen[kind] for kind in args.kinds.split(",") if kind]
    out = sys.stdout.buffer if args.out in (None, "-") else Path(args.out).open("wb")  # noqa: SIM115
    try:
        summary = asyncio.run(dump(settings.kafka, topics, out, dedupe=not args.no_dedupe))
    except Exception as error:
        print(f"recurrence ledger-dump: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    print(summary.line(), file=sys.stderr)
    return EXIT_OK


def _cmd_worker(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings is None:
        return EXIT_UNUSABLE
    code = _apply(settings, create=args.create_topics)
    if code != EXIT_OK:
        return code
    settings.datadir.mkdir(parents=True, exist_ok=True)

    import faust  # noqa: PLC0415

    from recurrence.processor.stream.app import RecurrenceService  # noqa: PLC0415

    service = RecurrenceService(settings)
    worker = faust.Worker(service.app, loglevel=args.loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
    return EXIT_OK  # pragma: no cover - execute_from_commandline always raises SystemExit


def register(commands: Any) -> None:
    """Add the Kafka subcommands to ``recurrence``'s argparse subparsers."""
    p = commands.add_parser("worker", help="run the Faust stream processor against Kafka")
    add_connection_arguments(p)
    add_topic_arguments(p)
    add_layout_arguments(p)
    g = p.add_argument_group("worker")
    g.add_argument("--datadir", help="local state directory, one per worker process (RECURRENCE_DATADIR)")
    g.add_argument("--web-host", help="web bind address (RECURRENCE_WEB_HOST; 127.0.0.1)")
    g.add_argument(
        "--web-advertise",
        help="host other workers forward statistics requests to (RECURRENCE_WEB_ADVERTISE; the bind address, "
        "or the hostname when binding 0.0.0.0)",
    )
    g.add_argument("--web-port", type=positive_int, help="web port (RECURRENCE_WEB_PORT; 6066)")
    g.add_argument("--standby-replicas", type=non_negative_int, help="standby copies of each partition's state (1)")
    g.add_argument(
        "--processing-guarantee",
        choices=("at_least_once", "exactly_once"),
        help="RECURRENCE_PROCESSING_GUARANTEE (at_least_once; see docs/kafka.md)",
    )
    g.add_argument(
        "--review-threshold",
        type=positive_int,
        help=f"RECURRENCE_REVIEW_STREAK_THRESHOLD; fixed per app id ({RECURRENCE_REVIEW_STREAK_THRESHOLD})",
    )
    g.add_argument("--batch-max", type=positive_int, help="journal entries per durable batch (500)")
    g.add_argument(
        "--session-timeout",
        type=float,
        help="seconds before a silent worker's partitions move to others (RECURRENCE_SESSION_TIMEOUT; 10)",
    )
    g.add_argument(
        "--instance-id",
        help="stable id of this worker (static group membership, RECURRENCE_INSTANCE_ID): a restart takes "
        "its partitions back without a rebalance; unique per worker process",
    )
    g.add_argument("--create-topics", action="store_true", help="create missing topics first (never alters any)")
    g.add_argument("-l", "--loglevel", default="info", help="worker log level (info)")
    p.set_defaults(func=_cmd_worker)

    p = commands.add_parser("topics", help="topics as code: show definitions, create missing, report drift")
    sub = p.add_subparsers(dest="topics_command", required=True)
    for name, helptext, func in (
        ("apply", "create missing topics; report drift on existing ones (exit 3)", _cmd_topics_apply),
        ("show", "print the topic definitions", _cmd_topics_show),
    ):
        q = sub.add_parser(name, help=helptext)
        add_connection_arguments(q)
        add_topic_arguments(q)
        add_layout_arguments(q)
        if name == "apply":
            q.add_argument("--dry-run", action="store_true", help="only report; create nothing")
        q.set_defaults(func=func)

    p = commands.add_parser("publish", help="produce a journal .jsonl onto the journal topic, keyed by scope")
    p.add_argument("journal", help="journal .jsonl file, or - for stdin")
    add_connection_arguments(p)
    add_topic_arguments(p)
    p.set_defaults(func=_cmd_publish)

    p = commands.add_parser("ledger-dump", help="read the output topics back to deduplicated JSONL")
    add_connection_arguments(p)
    add_topic_arguments(p)
    p.add_argument("--out", help="output file (default stdout)")
    p.add_argument(
        "--kinds",
        default="ledger,review,dead-letters",
        help="comma-separated topics to read: ledger, review, dead-letters (all)",
    )
    p.add_argument("--no-dedupe", action="store_true", help="write every raw record, duplicates included")
    p.set_defaults(func=_cmd_ledger_dump)
