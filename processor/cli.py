"""``recurrence`` command line: the commands acceptance suites call (contract section 4).

Exit codes (``exit_code`` is the one mapping from exceptions to codes):
0 success, even when entries went to dead letters; 2 the run could not
proceed (unreadable journal, unusable state directory, a ledger that is not
the state's, a full disk, bad arguments); 4 ``verify`` found the outputs
different from the ledger; 130/143 stopped by SIGINT/SIGTERM (what was
durable stays; run again to resume); 1 an unexpected internal error (a bug:
it prints a traceback).
"""

import argparse
import logging
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import orjson

from ..schemas.constants import DEFAULT_TOP_REVISIONS
from .cliargs import non_negative_int, partition_count_arg, path_arg, port_number, positive_int, ratio
from .cliparser import CommandParser
from .core.engineconfig import EngineConfig, add_flags, from_flags
from .core.formats import version_lines
from .core.patterns import listing
from .core.state import State
from .core.tally import counted
from .core.whatif import MAX_THRESHOLD, parse_thresholds
from .embedded.header import state_config
from .embedded.migration import migrate
from .embedded.paths import check_paths
from .embedded.reading import listed_scopes, open_archive, open_state, statistics
from .embedded.runner import DEFAULT_BATCH, ReplayInterrupted, ReplayOptions, RunSummary, replay
from .embedded.statedir import DEFAULT_PARTITIONS, MAX_PARTITIONS, closing_store
from .exceptions import (
    EXIT_OK,
    Interrupted,
    OutputsDifferError,
    RecurrenceError,
    SettingsError,
    UnusableError,
    exit_code,
)
from .explain import IDS_ARE, Explainer, NotFoundError, render
from .host.printable import error_line, escape_log_arguments, printable, printable_json, printable_lines, shown
from .host.stopsignals import StopSignals
from .store.base import StateStore, Transaction
from .synthetic import JournalSpec, generate
from .verify import compare, read_records

#: The engine settings ``replay`` takes as flags (declared in ``engineconfig``).
REPLAY_SETTINGS = ("review_threshold", "pattern_scopes")


@contextmanager
def _state(path: Path, must_exist: bool = False) -> Iterator[StateStore]:
    """The state, read-only (``StateView``), closed with one line on a failure."""
    with closing_store(open_state(path, must_exist=must_exist), shown(path)) as store:
        yield store


def _report(summary: RunSummary, journal: str) -> None:
    if summary.truncated_bytes:
        print(
            f"recurrence replay: recovered the ledger ({summary.truncated_bytes:,} uncommitted bytes regenerated)",
            file=sys.stderr,
        )
    if summary.resumed is not None:
        print(
            f"recurrence replay: resumed after line {summary.resumed.line:,} "
            f"({summary.resumed.offset:,} bytes already applied)",
            file=sys.stderr,
        )
    if summary.caught_up:
        print(
            f"recurrence replay: read {summary.caught_up:,} lines again for partitions a crash left behind the ledger "
            "(applied to them only; nothing written twice)",
            file=sys.stderr,
        )
    if summary.replayed_whole:
        print(
            "recurrence replay: the journal does not start with the part already applied; "
            "replayed it whole (nothing already written is written again)",
            file=sys.stderr,
        )
    if summary.held_back is not None:
        print(
            f"recurrence replay: the journal's last line ({summary.held_back.line:,}, {summary.held_back.size:,} "
            "bytes) has no line end and is not JSON yet: held back, not applied; the next run reads it once it is "
            "complete",
            file=sys.stderr,
        )
    print(summary.line(), file=sys.stderr)
    warning = summary.nothing_applied()
    if warning is not None:
        source = "the input" if journal == "-" else shown(journal)
        print(
            f"recurrence replay: warning: {warning}: is {source} a journal (JSON entries, one per line)?",
            file=sys.stderr,
        )


def _cmd_replay(args: argparse.Namespace) -> int:
    # Every setting is checked before anything is created or written (the state header pins them).
    config = from_flags(args, REPLAY_SETTINGS)
    state, out = Path(args.state), Path(args.out)
    check_paths(args.journal, state, out)
    stopped: ReplayInterrupted | None = None
    with StopSignals() as stop:
        try:
            options = ReplayOptions(config, batch_size=args.batch, jobs=args.jobs, partitions=args.partitions)
            summary = replay(args.journal, state, out, options, stop)
        except ReplayInterrupted as error:
            stopped = error
    # Reported once the handlers are restored and the state is closed: a further signal is then an
    # ordinary interrupt, never a half-written report.
    if stopped is not None:
        _report(stopped.summary, args.journal)
        raise stopped
    _report(summary, args.journal)
    if summary.nothing_applied() is not None:
        return EXIT_OK  # its warning is the last word: the input is likely the wrong file
    where = shlex.quote(shown(state))
    print(
        f"recurrence replay: next: recurrence stats --state {where} --table (the statistics), "
        f"recurrence serve --state {where} (the page)",
        file=sys.stderr,
    )
    return EXIT_OK


def _cmd_stats(args: argparse.Namespace) -> int:
    from .statstable import no_such_scope, table  # noqa: PLC0415 - difflib and textwrap for one command

    with _state(Path(args.state), must_exist=True) as store:
        result = statistics(store, args.scope, args.top)
        if args.scope is not None and not result:
            raise no_such_scope(args.scope, listed_scopes(store), shown(args.state))
    if args.table:
        sys.stdout.write(printable_lines(table(result)))
        return EXIT_OK
    _print_json(result, orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    if len(result) > 1 and sys.stdout.isatty():
        # The contract's JSON stays the default (suites parse it); a person reading it here learns of the table.
        print(f"recurrence stats: {len(result):,} scopes; --table prints them as a table", file=sys.stderr)
    return EXIT_OK


def _print_json(value: Any, option: int = orjson.OPT_INDENT_2) -> None:
    """JSON on stdout; control characters from the journal as escapes (``printable_json``)."""
    sys.stdout.buffer.write(printable_json(orjson.dumps(value, option=option)) + b"\n")


def _cmd_explain(args: argparse.Namespace) -> int:
    with _state(Path(args.state), must_exist=True) as store:
        archive = open_archive(
            store, Path(args.out) if args.out else None, Path(args.journal) if args.journal else None
        )
        explainer = Explainer(State(Transaction(store)), archive)
        try:
            result = explainer.explain(args.id)
        except NotFoundError as missing:
            raise UnusableError(str(missing) if IDS_ARE in str(missing) else f"{missing}; {IDS_ARE}") from None
    if args.json:
        _print_json(result)
    else:
        sys.stdout.write(render(result))
    return EXIT_OK


def _artifact_of(identity: str) -> tuple[str, str]:
    """``family/artifact_id``, or an ``artifact_id`` alone for an Experience."""
    family, slash, artifact_id = identity.partition("/")
    if not slash:
        return "experience", identity
    if not family or not artifact_id:
        raise SettingsError(f"{printable(identity)!r} is not family/artifact_id (for example experience/E7)")
    return family, artifact_id


def _scopes(store: StateStore, scope: str | None, state: str) -> list[str]:
    from .statstable import no_such_scope  # noqa: PLC0415 - difflib for one message

    scopes = listed_scopes(store)
    if scope is None:
        return scopes
    if scope not in scopes:
        raise no_such_scope(scope, scopes, shown(state))
    return [scope]


def _cmd_history(args: argparse.Namespace) -> int:
    from .repairloop import history, scopes_with  # noqa: PLC0415
    from .repairreport import history_text  # noqa: PLC0415

    family, artifact_id = _artifact_of(args.artifact)
    with _state(Path(args.state), must_exist=True) as store:
        config = state_config(store)
        state = State(Transaction(store))
        scopes = _scopes(store, args.scope, args.state) if args.scope else scopes_with(state, family, artifact_id)
        try:
            found = [
                history(state, scope, family, artifact_id, config.review_threshold, args.min_selections)
                for scope in scopes
            ]
        except NotFoundError as missing:
            raise UnusableError(str(missing)) from None
    if not found:
        raise UnusableError(f"no revision of {printable(family)}/{printable(artifact_id)} in any scope of the state")
    if args.json:
        _print_json(found)
    else:
        sys.stdout.write(history_text(found, shown(args.state)))
    return EXIT_OK


def _rules(args: argparse.Namespace) -> Any:
    from .core.retirement import RetirementRules  # noqa: PLC0415

    try:
        return RetirementRules(**{name: getattr(args, name) for name in RetirementRules.names()})
    except ValueError as bad:
        raise SettingsError(f"--{bad}") from None


@contextmanager
def _scoped_state(args: argparse.Namespace) -> Iterator[tuple[State, list[str]]]:
    """The repair loop's reads: the state's engine rows and the scopes asked for (``--scope``, or every one)."""
    with _state(Path(args.state), must_exist=True) as store:
        yield State(Transaction(store)), _scopes(store, args.scope, args.state)


def _cmd_suggestions(args: argparse.Namespace) -> int:
    from .core.retirement import MAX_RULE_THRESHOLD  # noqa: PLC0415
    from .repairloop import scope_suggestions, suggestions_what_if  # noqa: PLC0415
    from .repairreport import suggestions_text, what_if_text  # noqa: PLC0415

    rules = _rules(args)
    try:
        thresholds = None if args.what_if is None else parse_thresholds(args.what_if, top=MAX_RULE_THRESHOLD, why="")
    except ValueError as bad:
        raise SettingsError(f"--what-if: {bad}") from None
    with _scoped_state(args) as (state, scopes):
        if thresholds is None:
            found: Any = [scope_suggestions(state, scope, rules) for scope in scopes]
        else:
            found = suggestions_what_if(state, scopes, thresholds, rules.unknown_percent)
    if args.json:
        _print_json(found)
    elif thresholds is None:
        sys.stdout.write(suggestions_text(found, shown(args.state)))
    else:
        sys.stdout.write(what_if_text(found))
    return EXIT_OK


def _cmd_trends(args: argparse.Namespace) -> int:
    from .core.trends import WindowTooSmallError  # noqa: PLC0415
    from .repairloop import trends  # noqa: PLC0415
    from .repairreport import trends_csv  # noqa: PLC0415

    with _scoped_state(args) as (state, scopes):
        try:
            found = [trends(state, scope, args.window) for scope in scopes]
        except WindowTooSmallError as small:
            raise SettingsError(f"--window: {small}") from None
    if args.csv:
        sys.stdout.write(printable_lines(trends_csv(found)))
    else:
        _print_json(found)
    return EXIT_OK


def _cmd_patterns(args: argparse.Namespace) -> int:
    with _state(Path(args.state), must_exist=True) as store:
        config = state_config(store)
        rows = listing(Transaction(store), config.pattern_scopes, suggested_only=not args.all)
    if args.json:
        _print_json(rows)
        return EXIT_OK
    if not rows:
        print(f"no signature has recurred in {config.pattern_scopes} or more scopes yet")
    for row in rows:
        more = "+" if row["scopes_more_than_listed"] else ""
        mark = "suggested" if row["suggested"] else "below the threshold"
        scopes = f"{row['scope_count']}{more} scope{'' if row['scope_count'] == 1 and not more else 's'}"
        print(f"{scopes}, {counted(row['recurrences'], 'recurrence')} ({mark}): {row['signature_key']!r}")
        print(printable(f"    scopes: {_summarized(row['scopes'], row['scopes_more_than_listed'], 8)}"))
        revisions = [
            f"{r['scope_id']}:{r['artifact_ref']['family']}/{r['artifact_ref']['artifact_id']}"
            f"@{r['artifact_ref']['revision']}"
            for r in row["revisions"]
        ]
        print(printable(f"    revisions: {_summarized(revisions, row['revisions_more_than_listed'], 3)}"))
    return EXIT_OK


def _summarized(items: list[str], more: bool, shown: int) -> str:
    """A pattern's list on one line: at most ``shown`` items, then how many more (``--json`` has them all)."""
    if len(items) <= shown and not more:
        return ", ".join(items)
    if not more:
        return f"{', '.join(items[:shown])} … {len(items) - shown} more (--json lists them)"
    # The state keeps the first ``len(items)`` of a pattern's list: the rest were seen, not kept.
    return f"{', '.join(items[:shown])} … {len(items) - shown} more kept (--json lists them), and more not kept"


def _cmd_serve(args: argparse.Namespace) -> int:
    # aiohttp is loaded only by the command that serves.
    from .web.follow import follow_state  # noqa: PLC0415
    from .web.serve import EmbeddedReadSurface, serve  # noqa: PLC0415
    from .web.webtoken import TOKEN_ENV, Access, load_token  # noqa: PLC0415

    token_file = Path(args.http_token_file) if args.http_token_file else None
    access = Access(load_token(token_file))
    ledger = Path(args.out) if args.out else None
    journal = Path(args.journal) if args.journal else None
    follower = follow_state(Path(args.state))
    try:
        open_archive(follower.view, ledger, journal)  # refused at start: not the state's ledger, a device
        surface = EmbeddedReadSurface(follower.view, ledger, journal, mark=follower.mark, following=True)
        source = f"the content of {shown(token_file)}" if token_file else f"the value of {TOKEN_ENV}"
        serve(surface, args.host, args.port, access, follower, token_source=source)
    finally:
        follower.close()
    return EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    from .tune import state_what_if, table, tune  # noqa: PLC0415 - only this command needs it

    if (args.journal is None) == (args.state is None):
        both = ", not both" if args.journal is not None else ""
        raise SettingsError(
            f"give a journal (a dry run of replay over it) or --state DIR (the counters a replay kept){both}"
        )
    try:
        thresholds = parse_thresholds(args.thresholds)
    except ValueError as bad:
        raise SettingsError(f"--thresholds: {bad}") from None
    if args.state is not None:
        body, configured, incomplete, line = state_what_if(Path(args.state), thresholds)
        print(
            f"recurrence tune: from the counters {shown(args.state)} kept, as of journal line {line:,}; "
            "no journal read",
            file=sys.stderr,
        )
        if incomplete:
            print(
                f"recurrence tune: warning: {counted(len(incomplete), 'scope')} "
                f"{'was' if len(incomplete) == 1 else 'were'} replayed before the counters were kept and count "
                f"short ({', '.join(incomplete[:5])}{', …' if len(incomplete) > 5 else ''}); "
                "rebuild the state to include them",
                file=sys.stderr,
            )
    else:
        with StopSignals() as stop:
            try:
                body, summary = tune(args.journal, thresholds, batch_size=args.batch, stop=stop, jobs=args.jobs)
            except ReplayInterrupted as stopped:
                # A dry run has nothing to resume: its scratch state is gone already.
                print(f"recurrence tune: {stopped}; nothing was kept", file=sys.stderr)
                return stopped.code
        print(summary.line(), file=sys.stderr)
        configured = EngineConfig().review_threshold
    if args.json:
        sys.stdout.buffer.write(printable_json(orjson.dumps(body)) + b"\n")
    else:
        sys.stdout.write(printable_lines(table(body, configured, from_state=args.state is not None)))
    return EXIT_OK


def _cmd_migrate(args: argparse.Namespace) -> int:
    report = migrate(Path(args.state), dry_run=args.dry_run, partitions=args.partitions)
    for change in report.changes:
        print(f"recurrence migrate: {printable(change)}", file=sys.stderr)
    if not report.changes:
        print(f"recurrence migrate: the state is state format {report.found} already; nothing to do", file=sys.stderr)
    elif args.dry_run:
        print("recurrence migrate: dry run: nothing was changed; run without --dry-run to migrate", file=sys.stderr)
    else:
        print(
            f"recurrence migrate: done in {report.seconds:.2f}s; go on with 'recurrence replay' on the same --state "
            "and --out",
            file=sys.stderr,
        )
    return EXIT_OK


def _cmd_generate(args: argparse.Namespace) -> int:
    spec = JournalSpec(
        entries=args.entries,
        scopes=args.scopes,
        seed=args.seed,
        garbage_ratio=args.garbage_ratio,
        experiences_per_scope=args.experiences_per_scope,
        recent_window=args.recent_window,
        conflict_ratio=args.conflict_ratio,
    )
    out = sys.stdout.buffer
    for line in generate(spec):
        out.write(line + b"\n")
    out.flush()
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.ledger == "-" and args.outputs == "-":
        raise UnusableError("--ledger and --outputs cannot both be - (stdin): give one of them as a file")
    result = compare(ledger=read_records(args.ledger, "--ledger"), outputs=read_records(args.outputs, "--outputs"))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result.as_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print("\n".join(result.lines()))
    sys.stdout.flush()
    if not result.equal:
        raise OutputsDifferError(
            f"the outputs differ from the ledger in {len(result.differing):,} of {counted(result.scopes, 'scope')}"
        )
    return EXIT_OK


def _add_replay(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser("replay", help="run the engine embedded over a .jsonl journal")
    p.add_argument("journal", type=path_arg, help="journal .jsonl file, a pipe (e.g. <(zcat j.gz)), or - for stdin")
    p.add_argument("--state", type=path_arg, required=True, help="RocksDB state directory (created if missing)")
    p.add_argument(
        "--out",
        type=path_arg,
        required=True,
        help="ledger .jsonl file; records are appended (bound to --state: see docs/usage.md)",
    )
    add_flags(p, REPLAY_SETTINGS, note="; fixed per state directory")
    p.add_argument(
        "--batch", type=positive_int, default=DEFAULT_BATCH, help="entries per durable commit (default %(default)s)"
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes, each running the engine over its share of the scopes; the ledger is the same bytes "
        "whatever N (default: the cores this process may use, 1 for a journal file under 1 MiB)",
    )
    p.add_argument(
        "--partitions",
        type=partition_count_arg,
        default=None,
        metavar="P",
        help=f"partitions of a new state (scopes are spread over them; fixed when the state is created, and "
        f"--jobs cannot use more processes than partitions; default {DEFAULT_PARTITIONS}, at most {MAX_PARTITIONS})",
    )
    p.set_defaults(func=_cmd_replay)


def _add_tune(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser(
        "tune", help="what-if: the review load a replay at each threshold would produce (a dry run, writes nothing)"
    )
    p.add_argument("journal", type=path_arg, nargs="?", help="journal .jsonl file, a pipe, or - for stdin (or --state)")
    p.add_argument(
        "--state",
        type=path_arg,
        help="instead of a journal: a state replay wrote, answered from the counters it kept (nothing is replayed)",
    )
    p.add_argument(
        "--thresholds",
        default="2,3,4,5",
        metavar="K,K,...",
        help=f"review thresholds to compare, 1..{MAX_THRESHOLD}, one row each in the order given (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the contract's JSON (section 5) instead of a table")
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="entries per commit (default %(default)s)")
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes, as replay --jobs: the counts are the same whatever N (default: the cores this process "
        "may use, 1 for a journal file under 1 MiB)",
    )
    p.set_defaults(func=_cmd_tune)


def _add_stats(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser(
        "stats", help="per-scope recurrence statistics: JSON (contract section 4), or a table with --table"
    )
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--scope", help="only this scope (exit 2 when the state has no such scope)")
    p.add_argument(
        "--table",
        action="store_true",
        help="a table for people instead of the JSON: a row per scope and the total; with --scope, "
        "also its top revisions",
    )
    p.add_argument(
        "--top",
        type=non_negative_int,
        default=DEFAULT_TOP_REVISIONS,
        metavar="N",
        help="at most N revisions in each scope's top_revisions (by terminal recurrence streak); every scope is "
        "listed whatever N (default %(default)s)",
    )
    p.set_defaults(func=_cmd_stats)


def _add_migrate(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser(
        "migrate",
        help="upgrade a state written by an earlier recurrence to the format this one writes, in place",
        description="Upgrade --state in place to the state format this release writes (recurrence --version "
        "prints it), with progress; killed at any point, run it again. The ledger file is not touched. A state "
        "of a newer recurrence is refused.",
    )
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    p.add_argument(
        "--partitions",
        type=partition_count_arg,
        default=None,
        metavar="P",
        help=f"partitions of a single-store state split by the migration (default {DEFAULT_PARTITIONS})",
    )
    p.set_defaults(func=_cmd_migrate)


def _add_generate(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser("generate", help="write a seeded synthetic journal to stdout")
    p.add_argument("--entries", type=positive_int, default=1000, help="journal lines to write (default %(default)s)")
    p.add_argument("--scopes", type=positive_int, default=8, help="scopes to spread them over (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed: same seed, same bytes (default %(default)s)")
    p.add_argument(
        "--garbage-ratio",
        type=ratio,
        default=0.0,
        help="share of deliberately invalid lines, 0..1 (default %(default)s)",
    )
    p.add_argument(
        "--experiences-per-scope",
        type=positive_int,
        default=None,
        metavar="N",
        help="cap on distinct Experiences per scope (default: no cap)",
    )
    p.add_argument(
        "--recent-window",
        type=positive_int,
        default=None,
        metavar="N",
        help="entries cite only the N most recent evidence sources, receipts, Handoffs and Outcomes of their "
        "scope, and Handoffs one of an Experience's 3 latest revisions (default: anything earlier); with "
        "--experiences-per-scope the working set stays bounded however long the journal",
    )
    p.add_argument(
        "--conflict-ratio",
        type=ratio,
        default=0.0,
        help="share of entries that re-send an earlier one: identical, or changed (conflicts), 0..1 "
        "(default %(default)s)",
    )
    p.set_defaults(func=_cmd_generate)


def _add_explain(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser("explain", help="why was this counted? the evidence chain of a record or revision")
    p.add_argument(
        "id", help="an observation_id, match_digest or dead_letter_id, or a revision family/artifact_id@revision"
    )
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--out", type=path_arg, help="the ledger file (default: the one the state last wrote)")
    p.add_argument("--journal", type=path_arg, help="the journal file (default: the one the state last read)")
    p.add_argument("--json", action="store_true", help="print the chain as JSON")
    p.set_defaults(func=_cmd_explain)


def _add_repair_loop(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from .core.history import REPAIR_MIN_SELECTIONS  # noqa: PLC0415
    from .core.retirement import RetirementRules  # noqa: PLC0415
    from .core.trends import DEFAULT_TREND_WINDOW  # noqa: PLC0415

    p = commands.add_parser(
        "history", help="an artifact's revisions in order: yield, streak, head positions, proposals, repair effect"
    )
    p.add_argument("artifact", help="family/artifact_id (experience/E7), or an Experience's artifact_id")
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--scope", help="only this scope (default: every scope holding the artifact)")
    p.add_argument(
        "--min-selections",
        type=positive_int,
        default=REPAIR_MIN_SELECTIONS,
        help="selections each side of a repair needs before its effect is judged (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (a list: one history per scope)")
    p.set_defaults(func=_cmd_history)

    p = commands.add_parser(
        "suggestions", help="retirement suggestions from measured yield (suggestions only: nothing changes)"
    )
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--scope", help="only this scope (default: every scope)")
    defaults = RetirementRules()
    helps = {
        "min_selected": "never_avoids: selections without an avoided (default %(default)s)",
        "min_unselected_recurred": "never_selected: recurrences without a selection (default %(default)s)",
        "min_unknown": "unknown_binding: selections without a verdict (default %(default)s)",
        "unknown_percent": "unknown_binding: their share of the selections, percent (default %(default)s)",
    }
    for name in RetirementRules.names():
        p.add_argument(
            "--" + name.replace("_", "-"), type=positive_int, default=getattr(defaults, name), help=helps[name]
        )
    p.add_argument(
        "--what-if",
        metavar="N,N,...",
        help="instead of the suggestions: how many each rule would make with its count threshold at each N "
        "(1,2,3,5,10: one row each; --unknown-percent as given), over the scopes listed",
    )
    p.add_argument("--json", action="store_true", help="print JSON (a list: one body per scope; --what-if: one body)")
    p.set_defaults(func=_cmd_suggestions)

    p = commands.add_parser("trends", help="yield per window of journal positions, per scope and per revision")
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--scope", help="only this scope (default: every scope)")
    p.add_argument(
        "--window", type=positive_int, default=DEFAULT_TREND_WINDOW, help="positions per window (default %(default)s)"
    )
    p.add_argument("--csv", action="store_true", help="print CSV (one row per window, scope then revisions)")
    p.set_defaults(func=_cmd_trends)


def _add_patterns(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser("patterns", help="signatures that recurred in many scopes (suggestions only)")
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--all", action="store_true", help="also list signatures below the threshold")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_patterns)


def _add_serve(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser("serve", help="the statistics page and the read surface (HTTP) over a state")
    p.add_argument("--state", type=path_arg, required=True, help="state directory written by replay")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=port_number, default=6067, help="port (default %(default)s)")
    p.add_argument("--out", type=path_arg, help="the ledger file, for /explain (default: the one the state last wrote)")
    p.add_argument(
        "--journal", type=path_arg, help="the journal file, for /explain (default: the one the state last read)"
    )
    p.add_argument(
        "--http-token-file",
        type=path_arg,
        metavar="PATH",
        help="file holding the bearer token every data path asks for (default: RECURRENCE_HTTP_TOKEN; "
        "neither: no token, for a loopback --host)",
    )
    p.set_defaults(func=_cmd_serve)


def _add_verify(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser(
        "verify",
        help="do a Kafka deployment's outputs equal an embedded replay's ledger? (exit 0 equal, 4 different)",
        description="Compare the output topics (as `recurrence ledger-dump --out` wrote them) with the ledger "
        "of `recurrence replay` over the same journal: deduplicated by record id, scope by scope, in order; "
        "dead letters without origin and dead_letter_id. Exit 0 equal, 4 different, 2 cannot compare.",
    )
    p.add_argument(
        "--ledger", type=path_arg, required=True, help="the ledger `recurrence replay --out` wrote (- for stdin)"
    )
    p.add_argument(
        "--outputs", type=path_arg, required=True, help="the outputs `recurrence ledger-dump --out` wrote (- for stdin)"
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (every differing scope)")
    p.set_defaults(func=_cmd_verify)


def _verbose_everywhere(commands: Any) -> None:
    """-v after the subcommand too (nested ones included); SUPPRESS keeps a -v given before it."""
    for sub in commands.choices.values():
        with suppress(argparse.ArgumentError):  # a subcommand with its own -v keeps it
            sub.add_argument(
                "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging on stderr"
            )
        for group in getattr(sub, "subcommand_groups", ()):
            _verbose_everywhere(group)


class _VersionAction(argparse.Action):
    """``--version``, with the installed version looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from .. import __version__  # noqa: PLC0415 - importlib.metadata costs every command ~25 ms

        print("\n".join(version_lines(__version__)))
        parser.exit()


# Commands that need nothing from the Kafka side: parsing their command line skips importing it
# (pydantic-settings, asyncio, ...), a tenth of a second off every embedded run.
EMBEDDED_COMMANDS = frozenset(
    {
        "replay",
        "stats",
        "tune",
        "generate",
        "explain",
        "patterns",
        "history",
        "suggestions",
        "trends",
        "serve",
        "verify",
        "migrate",
    }
)


def build_parser(with_stream: bool = True) -> CommandParser:
    parser = CommandParser(
        prog="recurrence",
        description="Recurring-failure ledger: did what we learned from a failure ever help?",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_replay(commands)
    _add_stats(commands)
    _add_tune(commands)
    _add_generate(commands)
    _add_explain(commands)
    _add_patterns(commands)
    _add_repair_loop(commands)
    _add_serve(commands)
    _add_verify(commands)
    _add_migrate(commands)
    if not with_stream:
        _verbose_everywhere(commands)
        return parser
    try:
        from .stream.cli import register  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the stream package ships with the product
        pass
    else:
        register(commands)
    _verbose_everywhere(commands)
    return parser


class _CommandLogFormat(logging.Formatter):
    """A warning reads like every other message of the command: ``recurrence replay: warning: ...``."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.prefix = f"recurrence {command}: "

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prefix}{record.levelname.lower()}: {super().format(record)}"


def _message(error: BaseException) -> str | None:
    if isinstance(error, ReplayInterrupted) and error.abandoned:
        return f"{error} again: the batch in progress was abandoned; run again to resume (it repairs the ledger)"
    if isinstance(error, Interrupted):
        return f"{error}; run again to resume"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, BrokenPipeError):
        return None
    return error_line(error)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in arguments if not a.startswith("-")), None)
    parser = build_parser(with_stream=command not in EMBEDDED_COMMANDS)
    args = parser.parse_command_line(arguments)
    handler = logging.StreamHandler(sys.stderr)
    if args.verbose or args.command == "worker":
        # A debug log, and a service's log, are read by time and by logger.
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_CommandLogFormat(args.command))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, handlers=[handler])
    escape_log_arguments()
    try:
        code: int = args.func(args)
    except (RecurrenceError, OSError, KeyboardInterrupt) as error:
        message = _message(error)
        if message is not None:
            print(f"recurrence {args.command}: {printable(message)}", file=sys.stderr)
        return exit_code(error)
    return code


if __name__ == "__main__":
    sys.exit(main())
