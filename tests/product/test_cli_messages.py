"""What a user reads after a mistake or a run: the subcommand's usage, the flag named, counted nouns,
the next command (issue 44, the second hour)."""

import argparse
from pathlib import Path
from typing import Any, Final

import pytest

from recurrence_ledger.processor.cli import build_parser, main
from recurrence_ledger.processor.cliargs import path_arg
from recurrence_ledger.processor.core.tally import counted
from recurrence_ledger.processor.stream.clients import dump
from recurrence_ledger.processor.stream.clients.dump import DumpSummary

ROOT: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = ROOT / "examples" / "rfc-minimum.jsonl"


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    assert stopped.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "usage", "error"),
    [
        (
            ["stats", "--state", "s", "--bogus"],
            "usage: recurrence stats ",
            "recurrence stats: error: unrecognized argument: --bogus",
        ),
        (
            ["stats", "--stae", "s"],
            "usage: recurrence stats ",
            "recurrence stats: error: unrecognized argument: --stae (did you mean --state?)",
        ),
        (
            ["replay", "j.jsonl", "--state", "s", "--out", "o", "--jbos", "2"],
            "usage: recurrence replay ",
            "recurrence replay: error: unrecognized argument: --jbos (did you mean --jobs?)",
        ),
        (
            ["topics", "show", "--bogus"],
            "usage: recurrence topics show ",
            "recurrence topics show: error: unrecognized argument: --bogus",
        ),
        (
            ["ledger-dump", "--offset", "-5", "--kind", "ledger", "--bogus"],
            "usage: recurrence ledger-dump ",
            "recurrence ledger-dump: error: unrecognized argument: --bogus",
        ),
        (
            ["stats", "--state", "s", "extra"],
            "usage: recurrence stats ",
            "recurrence stats: error: unrecognized argument: extra",
        ),
    ],
)
def test_a_wrong_flag_prints_that_subcommands_usage_and_names_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, error: str
) -> None:
    err = _refused(capsys, *argv)
    assert err.startswith(usage)
    assert err.rstrip().endswith(error)
    assert "{replay," not in err  # not the top-level usage with its list of commands


def test_an_unknown_flag_before_the_command_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, "--bogus")
    assert "recurrence: error: unrecognized argument: --bogus; a command's own flags follow the command" in err
    assert "required" not in err


@pytest.mark.parametrize(("typed", "meant"), [("stat", "stats"), ("repaly", "replay"), ("ledger-dumb", "ledger-dump")])
def test_a_near_command_name_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str], typed: str, meant: str) -> None:
    err = _refused(capsys, typed)
    assert f"invalid choice: '{typed}': did you mean '{meant}'?" in err


def test_a_near_choice_of_a_flag_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, "acls", "--principal", "User:a", "--role", "wrker")
    assert "recurrence acls: error: argument --role: invalid choice: 'wrker': did you mean 'worker'?" in err


def test_a_known_flag_and_values_that_look_like_flags_still_parse() -> None:
    # -5 is a value (argparse's negative numbers); -v after the command is the top level's flag.
    assert main(["generate", "--entries", "2", "--seed", "-5", "-v"]) == 0


def test_stats_top_says_it_bounds_revisions_in_the_help_and_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["stats", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "--top N at most N revisions in each scope's top_revisions" in helptext
    assert "every scope is listed whatever N" in helptext
    usage = " ".join((ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split())
    assert "`--top N` bounds revisions, not scopes: at most N in each scope's `top_revisions`" in usage


def test_a_new_out_on_a_bound_state_names_the_ledger_the_state_is_bound_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(ledger)]) == 0
    capsys.readouterr()
    other = tmp_path / "other.jsonl"
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(other)]) == 2
    size = ledger.stat().st_size
    assert capsys.readouterr().err == (
        f"recurrence replay: this state is bound to its ledger {ledger} ({size:,} bytes written), and there is no "
        f"{other}: pass --out {ledger} to go on, or rebuild: replay the journal into a fresh --state with a "
        "fresh --out\n"
    )
    other.write_bytes(b"{}\n")  # another file that exists: the same advice after what is wrong with it
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"fewer than the {size:,} the state recorded" in err
    assert err.rstrip().endswith(
        f"this state is bound to its ledger {ledger}: pass --out {ledger} to go on, "
        "or rebuild: replay the journal into a fresh --state with a fresh --out"
    )
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(ledger)]) == 0  # its own still goes on


def test_counted_puts_the_noun_in_the_number_it_needs() -> None:
    assert [counted(n, "scope") for n in (0, 1, 2, 1234)] == ["0 scopes", "1 scope", "2 scopes", "1,234 scopes"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries") == "3 entries"


def test_the_replay_summary_ends_with_the_next_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "my state"
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(tmp_path / "l.jsonl")]) == 0
    last = capsys.readouterr().err.splitlines()[-1]
    quoted = f"'{state}'"  # as a shell would need it
    assert last == (
        f"recurrence replay: next: recurrence stats --state {quoted} --table (the statistics), "
        f"recurrence serve --state {quoted} (the page)"
    )


def test_patterns_counts_one_scope_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    assert main(["replay", str(EXAMPLE), "--state", str(state), "--out", str(tmp_path / "l.jsonl")]) == 0
    capsys.readouterr()
    assert main(["patterns", "--state", str(state), "--all"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("1 scope, 2 recurrences (below the threshold): ")


def test_statistics_dump_counts_one_scope_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def one_scope(connection: object, topic: str) -> list[Any]:  # the topic's table, without a broker
        return [{"scope_id": "s", "recurrence": {}}]

    monkeypatch.setattr(dump, "read_statistics", one_scope)
    assert main(["statistics-dump", "--out", str(tmp_path / "statistics.json")]) == 0
    assert capsys.readouterr().err == "recurrence statistics-dump: 1 scope from recurrence.statistics\n"


def test_the_ledger_dump_summary_has_no_dangling_separator() -> None:
    empty = DumpSummary(seconds=0.5)  # e.g. --kinds patterns before any suggestion
    assert empty.line() == ("recurrence ledger-dump: 0 distinct records from 0 read (0 duplicates dropped) in 0.50s")
    one = DumpSummary(raw_records=2, distinct=1, by_topic={"recurrence.patterns": 1}, seconds=0.5)
    assert one.line() == (
        "recurrence ledger-dump: 1 distinct record from 2 read (1 duplicate dropped) in 0.50s; recurrence.patterns=1"
    )


def _path_flags() -> list[tuple[tuple[str, ...], argparse.Action]]:
    """Every (command, action) of the full command line whose value names a file or a folder."""
    found: list[tuple[tuple[str, ...], argparse.Action]] = []

    def walk(parser: Any, command: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*command, name))
            elif action.dest.split("__")[-1] in PATH_DESTS:
                found.append((command, action))

    walk(build_parser(), ())
    return found


PATH_DESTS: Final = {
    "journal", "state", "out", "ledger", "outputs", "config", "command_config", "http_token_file",
    "datadir", "sasl_password_file", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
}  # fmt: skip


def test_every_path_flag_refuses_an_empty_path(capsys: pytest.CaptureFixture[str]) -> None:
    flags = _path_flags()
    assert len(flags) > 30  # every command's --state, --out, --config, ... (a walk that finds none proves nothing)
    for command, action in flags:
        assert action.type is path_arg, (command, action.dest)
    for command, flag in [(("stats",), "--state"), (("topics", "show"), "--ssl-cafile"), (("worker",), "--datadir")]:
        err = _refused(capsys, *command, flag, "")
        assert err.rstrip().endswith(
            f"recurrence {' '.join(command)}: error: argument {flag}: an empty path: give a file or folder "
            "(. is the current directory)"
        )
    err = _refused(capsys, "replay", "", "--state", "s", "--out", "o")
    assert "recurrence replay: error: argument journal: an empty path" in err
