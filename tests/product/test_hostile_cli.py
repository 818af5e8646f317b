"""The command line refuses what is not its own (issue 26): foreign ledgers, impossible ids, devices, escapes.

Every refusal is exit 2 with one line on stderr (no traceback), and comes at
once: a command given ``/dev/zero`` runs under a memory limit here, so the
version that read it until memory ran out fails instead of eating the
machine. Text for the terminal never carries a control character from the
journal.
"""

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from devkit.localrun import run_recurrence
from recurrence_ledger.processor.embedded.ledgerfile import TAIL_BYTES
from recurrence_ledger.processor.embedded.reading import open_state
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from tests.support.tools import REPO

# The product's new modules are imported by the tests that use them, so the commands' tests also run (and
# fail) against a version without them.

EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"
MEMORY_LIMIT = 2 << 30
# What a terminal acts on: C0 but the newline, DEL, C1, the bidirectional controls, line/paragraph separators.
TERMINAL_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_recurrence(*args, timeout=timeout, preexec_fn=_limited, env={**os.environ, **(env or {})})


def refused(result: subprocess.CompletedProcess[str], *said: str) -> None:
    """Exit 2, one line on stderr saying ``said``, no traceback, nothing on stdout."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for words in said:
        assert words in lines[0], (words, lines[0])
    assert result.stdout == ""


def _replay(journal: Path, work: Path, name: str) -> tuple[Path, Path]:
    state, ledger = work / f"{name}-state", work / f"{name}-ledger.jsonl"
    result = run("replay", str(journal), "--state", str(state), "--out", str(ledger))
    assert result.returncode == 0, result.stderr
    return state, ledger


def _records(ledger: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in ledger.read_bytes().splitlines()]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A state whose ledger is well over the 64 KiB the ledger mark hashes, and its journal."""
    work = tmp_path_factory.mktemp("hostile-cli")
    journal = work / "journal.jsonl"
    journal.write_bytes(b"".join(line + b"\n" for line in generate(JournalSpec(entries=1500, scopes=4, seed=5))))
    state, ledger = _replay(journal, work, "big")
    assert ledger.stat().st_size > 4 * TAIL_BYTES
    return state, ledger, journal


def test_explain_refuses_a_ledger_that_is_not_its_states(big: tuple[Path, Path, Path], tmp_path: Path) -> None:
    state, ledger, _ = big
    first = next(r for r in _records(ledger) if r["record"] == "observation")
    identity = str(first["observation_id"])
    assert run("explain", identity, "--state", str(state)).returncode == 0
    # Another state's ledger; the state's own, cut; the state's own with an id edited before the hashed tail
    # (same length, so only reading the record back can tell).
    other_journal = tmp_path / "other.jsonl"
    other_journal.write_bytes(EXAMPLE.read_bytes())
    _, foreign = _replay(other_journal, tmp_path, "other")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(ledger.read_bytes()[: ledger.stat().st_size // 2])
    edited = tmp_path / "edited.jsonl"
    data = ledger.read_bytes()
    at = data.index(identity.encode()) + len("sha256:")
    edited.write_bytes(data[:at] + (b"0" if data[at : at + 1] != b"0" else b"1") + data[at + 1 :])
    assert at < len(data) - TAIL_BYTES
    refused(run("explain", identity, "--state", str(state), "--out", str(foreign)), "restore the ledger file")
    refused(run("explain", identity, "--state", str(state), "--out", str(cut)), "fewer than", "truncated")
    refused(
        run("explain", identity, "--state", str(state), "--out", str(edited)),
        f"where the state indexed record {identity}",
        "not the one the state wrote",
    )
    # A record whose id is intact but whose content was changed is not that record either.
    changed = tmp_path / "changed.jsonl"
    line_at = data.rindex(b"\n", 0, at) + 1
    line = data[line_at : data.index(b"\n", at)]
    position = re.search(rb'"task_outcome_position":(\d)', line)
    assert position is not None
    digit = position.start(1) + line_at
    changed.write_bytes(data[:digit] + (b"8" if data[digit : digit + 1] != b"8" else b"7") + data[digit + 1 :])
    refused(run("explain", identity, "--state", str(state), "--out", str(changed)), "a line that is not a valid record")
    # Another journal (as long) is refused where the state's entries are read back.
    another = tmp_path / "another.jsonl"
    another.write_bytes(b"".join(line + b"\n" for line in generate(JournalSpec(entries=1500, scopes=4, seed=6))))
    refused(
        run("explain", identity, "--state", str(state), "--journal", str(another)),
        "is not the entry the state applied",
        "--journal",
    )


def test_serve_answers_409_where_the_cli_exits_2(big: tuple[Path, Path, Path], tmp_path: Path) -> None:
    state, ledger, _ = big
    first = next(r for r in _records(ledger) if r["record"] == "observation")
    identity = str(first["observation_id"])
    data = ledger.read_bytes()
    at = data.index(identity.encode()) + len("sha256:")
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(data[:at] + (b"0" if data[at : at + 1] != b"0" else b"1") + data[at + 1 :])
    # A ledger refused as a whole stops serve at start, like explain.
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:1000])
    refused(run("serve", "--state", str(state), "--out", str(cut), "--port", "1"), "fewer than")
    from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application

    store = open_state(state)
    try:
        app = application(EmbeddedReadSurface(store, edited))
        statuses = _ask(app, [f"/explain/{identity}", f"/explain/{identity}?format=json"])
    finally:
        store.close()
    assert [status for status, _ in statuses] == [409, 409]
    assert all("where the state indexed record" in body["error"] for _, body in statuses)


def _answers(app: web.Application, paths: list[str]) -> list[tuple[int, str]]:
    """Each path's status and body text, asked of ``app`` in order."""
    import asyncio

    async def main() -> list[tuple[int, str]]:
        async with TestClient(TestServer(app)) as client:
            answers = []
            for path in paths:
                response = await client.get(path)
                answers.append((response.status, await response.text()))
            return answers

    return asyncio.run(main())


def _ask(app: web.Application, paths: list[str]) -> list[tuple[int, dict[str, str]]]:
    return [(status, orjson.loads(text)) for status, text in _answers(app, paths)]


IMPOSSIBLE = [
    "experience/E7@18446744073709551616",
    "experience/E7@9223372036854775808",
    "experience/E7@0",
    "experience/E7@²",
    "experience/E7@١",
    "x/y@" + "9" * 5000,
    "not-an-id",
    "sha256:" + "g" * 64,
    "sha256:" + "0" * 63,
    "\x1b]0;pwned\x07",
    "a" * 100_000,
    "e/" + "x" * 200 + "@1",
]


def test_an_id_that_cannot_exist_is_a_clean_not_found(big: tuple[Path, Path, Path]) -> None:
    state, _, _ = big
    for identity in IMPOSSIBLE:
        result = run("explain", identity, "--state", str(state))
        refused(result)
        line = result.stderr.strip()
        assert len(line) < 600 and not TERMINAL_CONTROLS.search(line), line[:300]
        assert "can exist" in line or "is not an id" in line, line[:300]


def test_file_arguments_must_be_regular_files_and_are_refused_at_once(
    big: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    state, ledger, journal = big
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    revision = "experience/E7@1"
    cases: list[tuple[list[str], str]] = []
    for where in ("/dev/zero", str(fifo), str(tmp_path)):
        kind = {"/dev/zero": "is a device", str(fifo): "is a FIFO"}.get(where, "is a directory")
        cases += [
            (["explain", revision, "--state", str(state), "--out", where], kind),
            (["explain", revision, "--state", str(state), "--journal", where], kind),
            (["serve", "--state", str(state), "--out", where, "--port", "1"], kind),
            (["topics", "show", "--config", where], kind),
            (["serve", "--state", str(state), "--http-token-file", where, "--port", "1"], kind),
        ]
    cases += [
        (["replay", "/dev/zero", "--state", str(tmp_path / "s"), "--out", str(tmp_path / "l")], "is a device"),
        (["replay", str(journal), "--state", str(tmp_path / "s"), "--out", str(fifo)], "not a regular file"),
        (["publish", str(fifo), "--bootstrap-servers", "127.0.0.1:1"], "cannot read journal"),
        (["ledger-dump", "--out", str(ledger), "--bootstrap-servers", "127.0.0.1:1"], "exists; pass --force"),
        (["ledger-dump", "--out", "/dev/null", "--force", "--bootstrap-servers", "127.0.0.1:1"], "is a device"),
        (["statistics-dump", "--out", str(ledger), "--bootstrap-servers", "127.0.0.1:1"], "exists; pass --force"),
    ]
    for argv, said in cases:
        began = time.monotonic()
        result = run(*argv, timeout=30)
        refused(result, said)
        assert time.monotonic() - began < 10, argv


def test_verify_refuses_devices_fifos_long_lines_and_malformed_records_in_one_line(
    big: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, ledger, _ = big
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    no_newline = tmp_path / "zeros.jsonl"
    with no_newline.open("wb") as handle:
        handle.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes and no line end
    malformed = {
        "match.jsonl": b'{"record":"match"}\n',
        "observation.jsonl": b'{"record":"observation","observation_id":7}\n',
        "scope.jsonl": b'{"record":"review_proposal","scope_id":{"a":1}}\n',
    }
    cases: list[tuple[list[str], str]] = [
        (["--ledger", "/dev/zero", "--outputs", str(ledger)], "--ledger /dev/zero is a device"),
        (["--ledger", str(ledger), "--outputs", str(fifo)], "is a FIFO"),
        (["--ledger", str(fifo), "--outputs", str(ledger)], "is a FIFO"),
        (["--ledger", str(no_newline), "--outputs", str(ledger)], "line 1 is longer than 8,388,608 bytes"),
    ]
    for name, content in malformed.items():
        (tmp_path / name).write_bytes(ledger.read_bytes()[:2000].rsplit(b"\n", 1)[0] + b"\n" + content)
        cases.append((["--ledger", str(ledger), "--outputs", str(tmp_path / name)], "is not an output record"))
    for argv, said in cases:
        refused(run("verify", *argv, timeout=30), said)


def test_explain_refuses_a_journal_that_is_not_the_states(big: tuple[Path, Path, Path], tmp_path: Path) -> None:
    state, ledger, journal = big
    identity = str(next(r for r in _records(ledger) if r["record"] == "observation")["observation_id"])
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")  # a file, but fewer lines than the state read
    refused(run("explain", identity, "--state", str(state), "--journal", str(short)), "is not the entry the state")
    if Path("/etc/passwd").is_file():
        refused(run("explain", identity, "--state", str(state), "--journal", "/etc/passwd"), "is not the entry")
    # The state's own journal with the Task Outcome's line grown (JSON whitespace) past the largest record:
    # refused in one line, not read into memory whole.
    record = next(r for r in _records(ledger) if r.get("observation_id") == identity)
    wanted = (record["scope_id"], record["task_outcome_position"])
    padded = tmp_path / "padded.jsonl"
    with padded.open("wb") as handle:
        for line in journal.read_bytes().splitlines(keepends=True):
            entry = orjson.loads(line)
            grown = (entry["scope_id"], entry["position"]) == wanted
            handle.write(line.rstrip(b"\n") + b" " * (9 << 20) + b"\n" if grown else line)
    refused(run("explain", identity, "--state", str(state), "--journal", str(padded)), "is longer than 8,388,608")


def _hostile_journal(path: Path) -> None:
    """The RFC example with escape sequences in its scope, artifact and source ids."""
    text = EXAMPLE.read_text()
    text = text.replace('"rfc-minimum"', '"rfc\\u001b]0;pwned\\u0007-min\\u009b31m\\u202eimum"')
    text = text.replace('"E7"', '"E7\\u001b[31m"').replace('"O12-recurred"', '"O12\\u001b[2J\\r-recurred"')
    path.write_text(text)


def test_terminal_text_never_carries_a_control_character_from_the_journal(tmp_path: Path) -> None:
    journal = tmp_path / "hostile.jsonl"
    _hostile_journal(journal)
    state, ledger = _replay(journal, tmp_path, "hostile")
    records = _records(ledger)
    assert any("\x1b" in str(r.get("scope_id")) for r in records), "the ids did reach the ledger"
    recurred = next(r for r in records if r.get("event") == "recurred")
    outputs = {}
    for argv in (
        ["explain", str(recurred["observation_id"])],
        ["explain", str(recurred["observation_id"]), "--json"],
        ["explain", "experience/E7\x1b[31m@1"],
        ["explain", "experience/E7\x1b[31m@1", "--json"],
        ["patterns", "--all"],
        ["patterns", "--all", "--json"],
        ["stats"],
        ["stats", "--top", "1"],
    ):
        result = run(*argv, "--state", str(state))
        assert result.returncode == 0, (argv, result.stderr)
        outputs[" ".join(argv)] = result.stdout
        assert not TERMINAL_CONTROLS.search(result.stdout), (argv, result.stdout[:500])
        assert not TERMINAL_CONTROLS.search(result.stderr), (argv, result.stderr[:500])
    assert "\\x1b]0;pwned\\x07" in outputs[f"explain {recurred['observation_id']}"]
    # The JSON is the same value, only escaped.
    assert orjson.loads(outputs["stats"])[0]["scope_id"] == recurred["scope_id"]
    missing = run("explain", "experience/E7\x1b[31m@99", "--state", str(state))
    refused(missing, "\\x1b[31m")
    assert not TERMINAL_CONTROLS.search(missing.stderr)
    # The same text over HTTP (``text/plain``, what curl prints to a terminal), and the refusals' JSON.
    from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application

    store = open_state(state)
    try:
        texts = _answers(
            application(EmbeddedReadSurface(store)),
            [
                f"/explain/{recurred['observation_id']}",
                "/explain/experience%2FE7%1B%5B31m@1",
                "/explain/experience%2FE7%1B%5B31m@99",
                "/explain/%1B%5D0;pwned%07",
            ],
        )
    finally:
        store.close()
    assert [status for status, _ in texts] == [200, 200, 404, 404]
    for _, text in texts:
        assert not TERMINAL_CONTROLS.search(text), text[:300]
    assert "\\x1b]0;pwned\\x07" in texts[0][1]


def test_printable_escapes_every_control_and_keeps_the_rest() -> None:
    from recurrence_ledger.processor.host.printable import printable, printable_json

    shown = printable("a\x1b[31mb\x07\r\n\x7f\x9b\u202e\u2028é✓\\")
    assert shown == "a\\x1b[31mb\\x07\\x0d\\x0a\\x7f\\x9b\\u202e\\u2028é✓\\"
    data = orjson.dumps({"k": "\x1b\x7f\x9b\u202e\u2066é"})
    assert orjson.loads(printable_json(data)) == {"k": "\x1b\x7f\x9b\u202e\u2066é"}
    assert not TERMINAL_CONTROLS.search(printable_json(data).decode())


def test_log_arguments_are_escaped(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from recurrence_ledger.processor.host.printable import escape_log_arguments

    escape_log_arguments()
    with caplog.at_level(logging.WARNING):
        logging.getLogger("recurrence.test").warning("scope %s skipped", "x\x1b]0;pwned\x07\ny")
        logging.getLogger("faust.test").warning("table:\n%s", "row 1\nrow\x1b[2J 2")
    assert caplog.messages == ["scope x\\x1b]0;pwned\\x07\\x0ay skipped", "table:\nrow 1\nrow\\x1b[2J 2"]


def test_ledger_dump_out_is_never_overwritten_without_force_and_a_followed_file_is_watched(tmp_path: Path) -> None:
    from recurrence_ledger.processor.host.outputfile import OutputChangedError, output

    existing = tmp_path / "dump.jsonl"
    existing.write_bytes(b"keep\n")
    with pytest.raises(Exception, match="exists; pass --force"), output(str(existing), force=False):
        pass
    assert existing.read_bytes() == b"keep\n"
    with output(str(existing), force=True) as out:
        out.write(b"new\n")
    assert existing.read_bytes() == b"new\n"
    # Followed: truncated, replaced, removed under it -> stop, never a write at the old position.
    for change in ("truncate", "replace", "remove"):
        target = tmp_path / f"follow-{change}.jsonl"
        with pytest.raises(OutputChangedError), output(str(target), force=False, follow=True) as out:
            out.write(b"x" * 1000 + b"\n")
            out.flush()
            if change == "truncate":
                target.write_bytes(b"")
            elif change == "replace":
                (tmp_path / "other").write_bytes(b"y" * 2000)
                os.replace(tmp_path / "other", target)
            else:
                target.unlink()
            out.write(b"more\n")
            out.flush()
        if change == "truncate":
            assert target.read_bytes() == b"", "nothing was written after the truncation"


def test_a_second_worker_on_a_data_folder_exits_2_at_once_naming_the_holder(tmp_path: Path) -> None:
    from recurrence_ledger.processor.host.folderlock import LOCK_NAME, lock_folder

    folder = tmp_path / "w1"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from recurrence_ledger.processor.host.folderlock import lock_folder; "
            f"lock_folder(Path({str(folder)!r})); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        began = time.monotonic()
        result = run("worker", "--datadir", str(folder), "--bootstrap-servers", "127.0.0.1:1", "--web-port", "1")
        refused(result, str(folder), f"pid {holder.pid}", "in use by another worker")
        assert time.monotonic() - began < 5
        assert (folder / LOCK_NAME).read_text().split()[0] == str(holder.pid)
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (killed): the lock went with it, nothing stale is left to clean up.
    lock_folder(folder)
    assert (folder / LOCK_NAME).read_text().split()[0] == str(os.getpid())


def test_a_worker_refuses_a_bad_token_setting_at_once_and_warns_when_exposed(tmp_path: Path) -> None:
    offline = ["--bootstrap-servers", "127.0.0.1:1", "--timeout", "1"]
    for extra, env, said in (
        ([], {"RECURRENCE_HTTP_TOKEN": ""}, "is empty"),
        ([], {"RECURRENCE_HTTP_TOKEN": "short"}, "at least 16"),
        (["--http-token-file", "/dev/zero"], {}, "is a device"),
    ):
        began = time.monotonic()
        result = run("worker", "--datadir", str(tmp_path / "w"), *offline, *extra, env=env)
        refused(result, said)
        assert time.monotonic() - began < 10
    # Exposed without a token: a warning first (the broker then is not there: exit 2 all the same).
    exposed = run("worker", "--datadir", str(tmp_path / "w"), "--web-host", "0.0.0.0", *offline)
    assert exposed.returncode == 2
    assert exposed.stderr.startswith("recurrence worker: warning: serving 0.0.0.0 without a token")
    guarded = run(
        "worker",
        "--datadir",
        str(tmp_path / "w"),
        "--web-host",
        "0.0.0.0",
        *offline,
        env={"RECURRENCE_HTTP_TOKEN": "x" * 32},
    )
    assert guarded.returncode == 2 and "warning" not in guarded.stderr
