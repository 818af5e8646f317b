"""Kafka subcommands of ``recurrence``: worker, topics, publish, ledger-dump, statistics-dump, status.

Faust is imported only when ``worker`` runs, so the other commands start fast.
Every flag comes from the settings models (``cliflags``); failures are
``RecurrenceError`` subclasses that ``processor.cli.main`` turns into one line
and an exit code: 2 the run could not proceed (settings, broker unreachable,
topics missing, web port busy), 3 topic drift (``topics apply``/``worker``),
1 an unexpected error; a worker that aborts a batch exits 70 (see ``app``).
"""

import argparse
import asyncio
import errno
import functools
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final, cast

import orjson

from ...topics.definitions import CONSUMER_GROUPS, ROLES, Role
from ..cliargs import non_negative_int, path_arg, positive_int
from ..core.tally import counted
from ..exceptions import EXIT_OK, BrokerError, TopicDriftError, UnusableError
from ..host.outputfile import Writable, check_output, output
from .clients.brokers import APPLY_HINT, quiet_client_logs
from .clients.diagnosis import NotAuthorizedError, authorization
from .clients.dumpformat import DEFAULT_FORMAT
from .cliflags import NAMING, add_config_argument, add_model_arguments, load
from .settings import KafkaConnection, StreamSettings, TopicLayout, WorkerOptions

DEFAULT_MAX_WAIT: Final = 120.0


def _settings(args: argparse.Namespace, connects: bool = True) -> StreamSettings:
    """The command's settings; with ``--verbose``, where the connection came from (a worker says it once started)."""
    verbose = bool(getattr(args, "verbose", False))
    quiet_client_logs(verbose)
    settings = load(args, connects=connects)
    if connects and verbose:
        print(
            f"recurrence {args.command}: Kafka settings: {settings.connection_sources()}", file=sys.stderr, flush=True
        )
    return settings


Command = Callable[[argparse.Namespace], int]


def acting_as(role: Role | None, operation: str) -> Callable[[Command], Command]:
    """A command of ``role`` (None: an admin's): a refusal names the operation it was doing when the
    error does not, and the ``recurrence acls`` command that prints the role's set."""

    def wrap(command: Command) -> Command:
        @functools.wraps(command)
        def run(args: argparse.Namespace) -> int:
            try:
                return command(args)
            except NotAuthorizedError as refused:
                raise (refused.for_role(role) if role else refused) from None
            except Exception as error:
                if not type(error).__module__.startswith("aiokafka"):
                    raise
                found = authorization(load(args).kafka, error, operation)
                if found is None:
                    raise
                raise (found.for_role(role) if role else found) from None

        return run

    return wrap


def _apply(settings: StreamSettings, create: bool, report: IO[str] = sys.stderr, brief: bool = False) -> None:
    """``brief`` (a worker's start): the topics that are as defined in one line, the others one by one."""
    from ...topics.definitions import topic_specs  # noqa: PLC0415
    from .clients.topicsapply import apply_topics  # noqa: PLC0415

    result = asyncio.run(apply_topics(settings.kafka, topic_specs(settings), create=create))
    ok = [topic for topic in result.reports if brief and topic.status == "ok"]
    for topic in result.reports:
        if topic not in ok:
            print(topic.line(), file=report)
    if ok:
        print(f"topics: {len(ok)} as defined (recurrence topics show lists them)", file=report)
    if result.ok:
        return
    missing = [r for r in result.reports if r.status == "would create"]
    if missing and len(missing) == len(result.drift):
        raise BrokerError(f"{len(missing)} topic(s) missing on {settings.kafka.bootstrap_servers}: {APPLY_HINT}")
    raise TopicDriftError(
        "existing topics differ from their definitions (see above); nothing was changed. "
        "Fix them by hand, or deploy with a new topic prefix and rebuild from the journal (docs/kafka.md)."
    )


@acting_as(None, "CREATE")
def _cmd_topics_apply(args: argparse.Namespace) -> int:
    _apply(_settings(args), create=not args.dry_run, report=sys.stdout)
    return EXIT_OK


def _cmd_topics_show(args: argparse.Namespace) -> int:
    from ...topics.definitions import topic_specs  # noqa: PLC0415

    for spec in topic_specs(_settings(args)):
        config = " ".join(f"{k}={v}" for k, v in sorted(spec.config.items()))
        layout = f"partitions={spec.partitions} replication={spec.replication}"
        print(f"{spec.name}\t{layout} {config}\t# {spec.description}")
    return EXIT_OK


@acting_as("publish", "WRITE")
def _cmd_publish(args: argparse.Namespace) -> int:
    from .clients.publish import publish  # noqa: PLC0415

    if args.journal != "-" and not Path(args.journal).is_file():
        raise UnusableError(f"cannot read journal {args.journal}")
    settings = _settings(args)
    topic = settings.topics.journal
    summary = asyncio.run(publish(args.journal, settings.kafka, topic, from_line=args.from_line))
    held_back = summary.held_back_line()
    if held_back is not None:
        print(held_back, file=sys.stderr)
    print(summary.line(topic), file=sys.stderr)
    return EXIT_OK


async def _follow(reader: Any, out: Writable, render: Any) -> None:
    # Ctrl-C and SIGTERM end a follow normally (exit 0), like kcat -C.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await reader.follow(out, stop, render)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


@acting_as("read", "READ")
def _cmd_ledger_dump(args: argparse.Namespace) -> int:
    from .clients.dump import OutputReader, topics_for_kinds  # noqa: PLC0415
    from .clients.dumpformat import StartOffset, compile_format  # noqa: PLC0415
    from .clients.status import wait_caught_up  # noqa: PLC0415

    if args.follow and args.until_caught_up:
        raise UnusableError("--follow and --until-caught-up exclude each other (--follow already waits)")
    check_output(args.out, args.force)  # before the broker is asked (and before --until-caught-up waits)
    start = StartOffset.parse(args.offset)
    render = compile_format(args.format)
    settings = _settings(args)
    topics = topics_for_kinds(settings.topics, args.kinds)
    if args.until_caught_up:
        # Pattern suggestions come from the patterns agent, behind the journal by the repartition topic.
        inputs = [settings.topics.journal, *([settings.topics.recurred] if settings.topics.patterns in topics else [])]
        progress = asyncio.run(wait_caught_up(settings.kafka, inputs, settings.layout.group_id, args.max_wait))
        entries = sum(p.end for p in progress.partitions)
        print(
            f"recurrence ledger-dump: group {progress.group} caught up ({entries:,} journal entries)", file=sys.stderr
        )
    reader = OutputReader(settings.kafka, topics, dedupe=not args.no_dedupe, start=start, partition=args.partition)
    with output(args.out, args.force, follow=args.follow) as out:
        if args.follow:
            asyncio.run(_follow(reader, out, render))
        else:
            for dumped in asyncio.run(reader.read_dumped()):
                out.write(render(dumped))
            out.flush()
    print(reader.summary.line(), file=sys.stderr)
    return EXIT_OK


@acting_as("read", "READ")
def _cmd_statistics_dump(args: argparse.Namespace) -> int:
    from .clients.dump import read_statistics  # noqa: PLC0415

    check_output(args.out, args.force)  # before the broker is asked
    settings = _settings(args)
    statistics = asyncio.run(read_statistics(settings.kafka, settings.topics.statistics))
    with output(args.out, args.force) as out:
        out.write(orjson.dumps(statistics, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print(
        f"recurrence statistics-dump: {counted(len(statistics), 'scope')} from {settings.topics.statistics}",
        file=sys.stderr,
    )
    return EXIT_OK


def _cmd_acls(args: argparse.Namespace) -> int:
    from .acls import Grant, check_principal, render  # noqa: PLC0415

    check_principal(args.principal)
    role = cast(Role, args.role)  # argparse's choices are the roles
    if args.apply or args.remove:
        return _change_acls(args)
    form = "json" if args.json else "strimzi" if args.strimzi else "text"
    grant = Grant(_settings(args, connects=False), role, args.principal, args.group)
    sys.stdout.buffer.write(render(grant, form, args.command_config, args.strimzi or ""))
    return EXIT_OK


@acting_as(None, "ALTER")
def _change_acls(args: argparse.Namespace) -> int:
    """``--apply`` / ``--remove``: the set through the admin API, as the principal the settings name."""
    from .acls import ROLE_NAMES, Grant  # noqa: PLC0415
    from .clients.aclsapply import apply_acls, remove_acls  # noqa: PLC0415

    role = cast(Role, args.role)
    settings = _settings(args)
    grant = Grant(settings, role, args.principal, args.group)
    acls = grant.acls()
    change = remove_acls if args.remove else apply_acls
    done = asyncio.run(change(settings.kafka, acls))
    said, kept = ("removed", "were not there") if args.remove else ("created", "already there")
    for word, group in ((said, done.changed), (kept, done.unchanged)):
        for acl in group:
            print(f"{word}\t{acl.resource_type} {acl.resource_name} {acl.pattern_type} {acl.operation}")
    print(
        f"recurrence acls: {args.principal} as a recurrence {ROLE_NAMES[role]} ({grant.described()}): "
        f"{len(done.changed)} {said}, {len(done.unchanged)} {kept} on {settings.kafka.bootstrap_servers}",
        file=sys.stderr,
    )
    return EXIT_OK


@acting_as("read", "DESCRIBE")
def _cmd_status(args: argparse.Namespace) -> int:
    from .clients.status import group_progress  # noqa: PLC0415

    settings = _settings(args)
    inputs = [settings.topics.journal, settings.topics.recurred]
    progress = asyncio.run(group_progress(settings.kafka, inputs, settings.layout.group_id))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(progress.as_json()) + b"\n")
    else:
        print("\n".join(progress.lines()))
    return EXIT_OK


def check_web_port(settings: StreamSettings) -> None:
    """A busy web port is an operator error (exit 2, one line), not a traceback from deep inside Faust."""
    family = socket.AF_INET6 if ":" in settings.worker.web_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # The same option aiohttp sets, so a port in TIME_WAIT is not mistaken for a busy one.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((settings.worker.web_host, settings.worker.web_port))
        except OSError as error:
            why = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be bound ({error.strerror})"
            raise UnusableError(
                f"web port {settings.worker.web_host}:{settings.worker.web_port} {why}; choose another --web-port "
                "(RECURRENCE_WEB_PORT) or stop the process holding it"
            ) from None


@acting_as("worker", "DESCRIBE")
def _cmd_worker(args: argparse.Namespace) -> int:
    from ..host.folderlock import lock_folder, release_folder  # noqa: PLC0415
    from ..web.websecurity import exposure_warning  # noqa: PLC0415
    from ..web.webtoken import Access  # noqa: PLC0415

    settings = _settings(args)
    # Before anything reaches the broker: a second worker on this folder stops here, and the group never sees it.
    lock_folder(settings.worker.datadir)
    try:
        warning = exposure_warning(settings.worker.web_host, Access(settings.web_token()))
        if warning is not None:
            print(f"recurrence worker: {warning}", file=sys.stderr, flush=True)
        check_web_port(settings)
        _apply(settings, create=settings.worker.create_topics, brief=True)

        from .worker.build import build_worker  # noqa: PLC0415
        from .worker.frameworklog import Worker  # noqa: PLC0415

        service = build_worker(settings)
        if not getattr(args, "verbose", False):  # its start log says where the connection came from
            print(f"recurrence worker: Kafka settings: {settings.connection_sources()}", file=sys.stderr, flush=True)
    except BaseException:
        release_folder(settings.worker.datadir)  # a refused start leaves no data folder it created behind
        raise
    worker = Worker(
        service.app,
        loglevel=settings.worker.loglevel,
        quiet=True,
        redirect_stdouts=False,
        stop_timeout=settings.worker.stop_timeout,
    )
    worker.execute_from_commandline()
    return EXIT_OK  # pragma: no cover - execute_from_commandline always raises SystemExit


def _common(p: argparse.ArgumentParser, layout: tuple[str, ...] | None = NAMING) -> None:
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging on stderr")
    add_config_argument(p)
    add_model_arguments(p, KafkaConnection, "Kafka connection")
    add_model_arguments(p, TopicLayout, "topics", only=layout)


def register(commands: Any) -> None:
    """Add the Kafka subcommands to ``recurrence``'s argparse subparsers."""
    p = commands.add_parser("worker", help="run the Faust stream processor against Kafka")
    _common(p, layout=None)
    add_model_arguments(p, WorkerOptions, "worker")
    p.set_defaults(func=_cmd_worker)

    p = commands.add_parser("topics", help="topics as code: show definitions, create missing, report drift")
    sub = p.add_subparsers(dest="topics_command", required=True)
    q = sub.add_parser("apply", help="create missing topics; report drift on existing ones (exit 3)")
    _common(q, layout=None)
    q.add_argument("--dry-run", action="store_true", help="only report; create nothing (exit 2 if any is missing)")
    q.set_defaults(func=_cmd_topics_apply)
    q = sub.add_parser("show", help="print the topic definitions (no broker needed)")
    _common(q, layout=None)
    q.set_defaults(func=_cmd_topics_show)

    p = commands.add_parser("publish", help="produce a journal .jsonl onto the journal topic, keyed by scope")
    p.add_argument("journal", type=path_arg, help="journal .jsonl file, or - for stdin")
    p.add_argument(
        "--from-line",
        type=positive_int,
        default=1,
        metavar="N",
        help="publish from journal line N on (default 1): a run stopped at a line the topic cannot take names "
        "the N that goes on past it",
    )
    _common(p)
    p.set_defaults(func=_cmd_publish)

    p = commands.add_parser("ledger-dump", help="read the output topics back to deduplicated JSONL")
    _common(p)
    g = p.add_argument_group("ledger-dump")
    g.add_argument("--out", type=path_arg, help="output file (default stdout); an existing one only with --force")
    g.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    g.add_argument(
        "--kinds",
        default="ledger,review,dead-letters",
        help="comma-separated output topics to read: ledger, review, dead-letters, patterns (singular/plural and "
        "record kinds such as observations or admissions accepted; default the ledger: all but patterns)",
    )
    g.add_argument("--no-dedupe", action="store_true", help="write every raw record, duplicates included")
    g.add_argument(
        "--offset",
        "-o",
        default="beginning",
        metavar="beginning|end|N|-N",
        help="where each partition is read from, as kcat -o: beginning (default), end (with --follow: only new "
        "records), an offset N, or -N for the last N records of each partition",
    )
    g.add_argument(
        "--partition",
        "-p",
        type=non_negative_int,
        metavar="N",
        help="read only partition N of each chosen topic (default all)",
    )
    g.add_argument(
        "--format",
        "-F",
        default=DEFAULT_FORMAT,
        metavar="FORMAT",
        help="how each record is written, as kcat -f: %%s record, %%S its length, %%k key, %%K key length, "
        "%%t topic, %%p partition, %%o offset, %%T timestamp (ms), %%h headers, %%%% and \\n \\t \\r \\\\ "
        "(default %(default)s: the embedded ledger's bytes)",
    )
    g.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="after the existing records, keep writing new distinct ones as they arrive until Ctrl-C (exit 0)",
    )
    g.add_argument(
        "--until-caught-up",
        action="store_true",
        help="first wait until the worker group's committed journal offsets reach the journal's end offsets "
        "(with --kinds patterns, then the repartition topic's too)",
    )
    g.add_argument(
        "--max-wait",
        type=float,
        default=DEFAULT_MAX_WAIT,
        metavar="SECONDS",
        help="--until-caught-up gives up after this long with exit 2 (default %(default)g)",
    )
    p.set_defaults(func=_cmd_ledger_dump)

    p = commands.add_parser(
        "statistics-dump", help="read the statistics table topic: the last value per scope, as recurrence stats prints"
    )
    _common(p)
    p.add_argument("--out", type=path_arg, help="output file (default stdout); an existing one only with --force")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.set_defaults(func=_cmd_statistics_dump)

    p = commands.add_parser(
        "acls",
        help="the least Kafka ACLs a principal needs for one role (no broker needed); --apply creates them",
    )
    _common(p, layout=None)
    add_model_arguments(p, WorkerOptions, "worker", only=("processing_guarantee", "create_topics"))
    g = p.add_argument_group("acls")
    g.add_argument("--principal", required=True, metavar="User:NAME", help="who gets the ACLs (User:NAME)")
    g.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="worker: recurrence worker; publish: recurrence publish; read: ledger-dump, statistics-dump, status; "
        "review: a Review service consuming <prefix>.review; statistics: a service consuming <prefix>.statistics",
    )
    g.add_argument(
        "--group",
        metavar="GROUP",
        help="review and statistics: the service's own consumer group (default "
        + ", ".join(f"{role} {group}" for role, group in CONSUMER_GROUPS.items())
        + ")",
    )
    change = g.add_mutually_exclusive_group()
    change.add_argument(
        "--apply",
        action="store_true",
        help="create the set on the brokers through the admin API, as the principal the settings name (an admin); "
        "what is already there is left as it is",
    )
    change.add_argument("--remove", action="store_true", help="delete the set's ACLs from the brokers")
    form = g.add_mutually_exclusive_group()
    form.add_argument(
        "--json",
        action="store_true",
        help="a JSON list of ACLs in Kafka's names (principal, host, resource_type, resource_name, "
        "pattern_type, operation, permission) instead of kafka-acls commands",
    )
    form.add_argument(
        "--strimzi",
        metavar="CLUSTER",
        help="a Strimzi KafkaUser (SCRAM-SHA-512) for the Kafka cluster resource CLUSTER instead",
    )
    g.add_argument(
        "--command-config",
        type=path_arg,
        default="admin.properties",
        metavar="PATH",
        help="the super user's client properties file the kafka-acls commands name (default %(default)s)",
    )
    p.set_defaults(func=_cmd_acls)

    p = commands.add_parser(
        "status", help="per input partition (journal, repartition topic): end offset, the group's committed offset, lag"
    )
    _common(p)
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.set_defaults(func=_cmd_status)
