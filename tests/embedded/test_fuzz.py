"""Seeded fuzzing of the embedded runner: no line can crash it or change what the clean lines produce.

Each case takes a valid generated journal and mixes in mutated lines (byte
flips, truncations, number extremes, nesting past 200 levels, lines of a few
MB, non-UTF-8 bytes, duplicates), interleaved after the line they derive
from or appended at the end. A mutation that validates and sits above its
scope's last position could be accepted as a new entry, so it is skipped:
every kept mutation is either a no-op (identical to the entry accepted at
its position, or blank) or must become exactly one dead letter.

Asserted for every case: ``replay`` exits 0, twice; the statistics equal
those of the clean journal alone; each non-no-op mutated line has exactly
one dead letter, whose origin is its line, and nothing else is
dead-lettered (the second run adds none); the ledger without dead letters
equals the clean run's ledger.

The read side is fuzzed over the same states: ids given to ``explain``
(real record ids and revisions, mutated: a digit off, cut, extended, huge or
non-ASCII revisions, control characters, very long) end in exit 0 or a
one-line exit 2, never a traceback; the same ids and mutated paths sent to
``recurrence serve``'s application are answered with no 5xx, and every
refusal is a bounded JSON error.

A fixed number of seeded cases keeps it deterministic and inside ``make
test``'s time budget (a few seconds).
"""

import asyncio
import random
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from pydantic import ValidationError

from recurrence_ledger.processor.cli import main
from recurrence_ledger.processor.embedded.reading import open_state, statistics
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.schemas.canonical import canonical_json
from recurrence_ledger.schemas.journal import JOURNAL_ENTRY

CASES = 30
CLEAN_ENTRIES = 150
Verdict = Literal["dead", "no-op", "may-be-accepted"]

_NUMBERS = [
    b"18446744073709551616",
    b"-9223372036854775809",
    b"9223372036854775808",
    b"1e400",
    b"-1e400",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"0",
    b"-1",
    b"1.5",
    b"1" + b"0" * 400,
]


_PRINTABLE = bytes(range(0x20, 0x7F))
_ANY_BUT_NEWLINE = bytes(b for b in range(256) if b != 0x0A)


def _flip(rng: random.Random, line: bytes) -> bytes:
    # Mostly printable ASCII, so many flipped lines still parse and reach validation.
    data = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data))] = rng.choice(_PRINTABLE if rng.random() < 0.7 else _ANY_BUT_NEWLINE)
    return bytes(data)


def _truncate(rng: random.Random, line: bytes) -> bytes:
    return line[: rng.randrange(len(line))]


def _number(rng: random.Random, line: bytes) -> bytes:
    number = rng.choice(_NUMBERS)
    if rng.random() < 0.5 and b'"metadata":{' in line:  # a free-form place: big integers are valid there
        return line.replace(b'"metadata":{', b'"metadata":{"n":' + number + b",", 1)
    start = line.index(b'"position":') + len(b'"position":')
    end = line.index(b",", start)
    return line[:start] + number + line[end:]


def _earlier_position(rng: random.Random, line: bytes) -> bytes:
    """A valid entry moved to a position at or below its own: a conflict, a gap never accepted, or itself."""
    start = line.index(b'"position":') + len(b'"position":')
    end = line.index(b",", start)
    return line[:start] + b"%d" % rng.randint(1, int(line[start:end])) + line[end:]


def _deep(rng: random.Random, line: bytes) -> bytes:
    depth = rng.choice([201, 300, 1100, 5000])
    nested = b"[" * depth + b"1" + b"]" * depth
    if rng.random() < 0.5 and b'"metadata":{' in line:
        return line.replace(b'"metadata":{', b'"metadata":{"deep":' + nested + b",", 1)
    return b'{"deep":' + nested + b"," + line[1:]


def _huge(rng: random.Random, line: bytes) -> bytes:
    size = rng.randint(2, 3) << 20
    return b'{"pad":"' + b"a" * size + b'",' + line[1:]


def _non_utf8(rng: random.Random, line: bytes) -> bytes:
    at = rng.randrange(len(line))
    return line[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]) + line[at:]


def _duplicate(rng: random.Random, line: bytes) -> bytes:
    return line


Mutator = Callable[[random.Random, bytes], bytes]
MUTATORS: list[Mutator] = [
    _flip,
    _flip,
    _truncate,
    _number,
    _number,
    _earlier_position,
    _deep,
    _non_utf8,
    _duplicate,
]


@dataclass
class Case:
    lines: list[bytes] = field(default_factory=list)
    dead_lines: list[int] = field(default_factory=list)  # 1-based line numbers that must be dead-lettered
    skipped: int = 0


def _identity(entry: Any) -> bytes:
    return canonical_json(entry.model_dump(mode="json", by_alias=True))


def verdict(line: bytes, last: dict[str, int], accepted: dict[tuple[str, int], bytes]) -> Verdict:
    """What the contract says this line does, given the clean entries before it."""
    entry_text = line.rstrip(b"\r\n")
    if not entry_text.strip():
        return "no-op"  # a blank line is not an entry
    try:
        entry_text.decode("utf-8")
        orjson.loads(entry_text)
        entry = JOURNAL_ENTRY.validate_json(entry_text)
    except (UnicodeDecodeError, orjson.JSONDecodeError, ValidationError):
        return "dead"
    if entry.position > last.get(entry.scope_id, 0):
        return "may-be-accepted"
    known = accepted.get((entry.scope_id, entry.position))
    return "no-op" if known is not None and known == _identity(entry) else "dead"


def build_case(seed: int) -> tuple[list[bytes], Case]:
    rng = random.Random(seed)
    clean = list(generate(JournalSpec(entries=CLEAN_ENTRIES, scopes=3, seed=seed)))
    case = Case()
    last: dict[str, int] = {}
    accepted: dict[tuple[str, int], bytes] = {}
    huge_left = 1 if seed % 3 == 0 else 0

    def mutate(base: bytes) -> None:
        nonlocal huge_left
        mutator = _huge if huge_left and rng.random() < 0.1 else rng.choice(MUTATORS)
        huge_left -= mutator is _huge
        line = mutator(rng, base).replace(b"\n", b" ")
        found = verdict(line, last, accepted)
        if found == "may-be-accepted":
            case.skipped += 1
            return
        case.lines.append(line)
        if found == "dead":
            case.dead_lines.append(len(case.lines))

    for index, line in enumerate(clean):
        entry = JOURNAL_ENTRY.validate_json(line)
        case.lines.append(line)
        last[entry.scope_id] = entry.position
        accepted[(entry.scope_id, entry.position)] = _identity(entry)
        if rng.random() < 0.25:
            mutate(clean[rng.randrange(index + 1)])  # from a line already applied
    for _ in range(12):
        mutate(rng.choice(clean))
    return clean, case


_ID_NOISE = ["\x1b[31m", "\x1b]0;t\x07", "\u202e", "\x00", "\n", "%", "/", "@", "²", "١", "é", " ", "\\", "?#"]


def _mutated_id(rng: random.Random, identity: str) -> str:
    choice = rng.randrange(8)
    if choice == 0 and "@" in identity:
        head = identity.rpartition("@")[0]
        return (
            head
            + "@"
            + rng.choice(
                [
                    "0",
                    "-1",
                    "18446744073709551616",
                    "9223372036854775808",
                    "9223372036854775807",
                    "9" * rng.randint(20, 5000),
                    "1" + "0" * 30,
                    "²",
                ]
            )
        )
    if choice == 1:
        return identity[: rng.randrange(len(identity))]
    if choice == 2:
        at = rng.randrange(len(identity))
        return identity[:at] + rng.choice("0123456789abcdefg/@:") + identity[at + 1 :]
    if choice == 3:
        return identity + rng.choice(_ID_NOISE) * rng.randint(1, 3)
    if choice == 4:
        at = rng.randrange(len(identity))
        return identity[:at] + rng.choice(_ID_NOISE) + identity[at:]
    if choice == 5:
        return rng.choice(_ID_NOISE) * rng.randint(1, 2000)
    if choice == 6:
        return "x/" * rng.randint(1, 300) + identity
    return identity  # the real one: must still be explained


def _ids(ledger: list[bytes]) -> list[str]:
    found = []
    for line in ledger:
        record = orjson.loads(line)
        for name in ("observation_id", "match_digest", "dead_letter_id"):
            if name in record:
                found.append(record[name])
        art = record.get("artifact_ref")
        if art:
            found.append(f"{art['family']}/{art['artifact_id']}@{art['revision']}")
    return found


def _fuzz_reads(rng: random.Random, ledger: list[bytes], workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fuzzed ids to ``explain`` and fuzzed paths to ``serve``: exit 0 or one line and 2; no 5xx, ever."""
    from aiohttp.test_utils import TestClient, TestServer

    from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application

    ids = [_mutated_id(rng, rng.choice(_ids(ledger))) for _ in range(6)]
    state = workdir / "state"
    for identity in ids:
        code = main(["explain", identity, "--state", str(state)])
        printed = capsys.readouterr()
        assert code in (0, 2), identity
        if code == 2:
            assert len(printed.err.strip().splitlines()) == 1 and "Traceback" not in printed.err
    paths = [f"/explain/{urllib.parse.quote(identity, safe=rng.choice(['', '/@']))}" for identity in ids]
    paths += [
        f"/explain/{urllib.parse.quote(i, safe='')}?scope={urllib.parse.quote(_mutated_id(rng, 's'))}" for i in ids[:2]
    ]
    paths += [
        f"/scopes/{urllib.parse.quote(_mutated_id(rng, 'scope-0'), safe='')}/statistics",
        f"/statistics?top={rng.choice(['-1', '1001', 'x', '9' * 30, '', '0'])}",
        f"/explain/{urllib.parse.quote(ids[0], safe='')}?format={rng.choice(['json', 'text', 'yaml', ''])}",
    ]
    store = open_state(state, must_exist=True)
    try:
        app = application(EmbeddedReadSurface(store))

        async def ask() -> list[tuple[str, int, str, bytes]]:
            async with TestClient(TestServer(app)) as client:
                answers = []
                for path in paths:
                    response = await client.get(path, allow_redirects=False)
                    answers.append((path, response.status, response.content_type, await response.read()))
                return answers

        for path, status, content_type, body in asyncio.run(ask()):
            assert status < 500, (path, status, body[:300])
            if status >= 400 and not (status == 400 and content_type == "text/plain"):  # aiohttp's: too long
                refusal = orjson.loads(body)
                assert len(body) <= 1024 and "error" in refusal and set(refusal) <= {"error", "paths"}, (path, body)
    finally:
        store.close()


def _replay(lines: list[bytes], workdir: Path, times: int = 1) -> tuple[list[bytes], Any]:
    workdir.mkdir()
    journal, state, out = workdir / "journal.jsonl", workdir / "state", workdir / "ledger.jsonl"
    journal.write_bytes(b"".join(line + b"\n" for line in lines))
    for _ in range(times):
        assert main(["replay", str(journal), "--state", str(state), "--out", str(out)]) == 0
    store = open_state(state, must_exist=True)
    try:
        return out.read_bytes().splitlines(), statistics(store, None, None)
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_journals_never_crash_and_never_change_what_the_clean_lines_produce(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean, case = build_case(seed)
    assert len(case.lines) - len(clean) >= 20  # the seed really mutated something
    clean_ledger, clean_stats = _replay(clean, tmp_path / "clean")
    assert not [line for line in clean_ledger if line.startswith(b'{"record":"dead_letter"')]
    ledger, stats = _replay(case.lines, tmp_path / "mutated", times=2)  # the rerun must add nothing
    capsys.readouterr()

    assert stats == clean_stats
    letters = [orjson.loads(line) for line in ledger if line.startswith(b'{"record":"dead_letter"')]
    by_line = Counter(letter["origin"]["line"] for letter in letters)
    assert by_line == Counter(case.dead_lines)  # exactly one per bad line, at its own line, and no other
    assert [line for line in ledger if not line.startswith(b'{"record":"dead_letter"')] == clean_ledger
    _fuzz_reads(random.Random(seed), ledger, tmp_path / "mutated", capsys)
