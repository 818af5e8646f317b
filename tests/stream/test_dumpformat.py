"""``ledger-dump --format`` and ``--offset``, as kcat's ``-f`` and ``-o`` (the broker-less part)."""

import pytest

from recurrence_ledger.processor.exceptions import SettingsError
from recurrence_ledger.processor.stream.clients.dumpformat import (
    DEFAULT_FORMAT,
    Dumped,
    StartOffset,
    compile_format,
    value_line,
)

RECORD = Dumped(
    "recurrence.ledger",
    3,
    1207,
    b"scope-7",
    b'{"record":"match"}',
    1_764_000_000_123,
    (("recurrence-source", b"3:88:0"), ("recurrence-id", b"match:ab")),
)


def test_the_default_format_writes_the_ledger_line() -> None:
    assert compile_format(DEFAULT_FORMAT)(RECORD) == b'{"record":"match"}\n' == value_line(RECORD)


def test_every_token() -> None:
    render = compile_format("%t/%p@%o %T key=%k(%K) %S bytes [%h] 100%% %s\\t|\\r\\\\\\n")
    assert render(RECORD) == (
        b"recurrence.ledger/3@1207 1764000000123 key=scope-7(7) 18 bytes "
        b'[recurrence-source=3:88:0,recurrence-id=match:ab] 100% {"record":"match"}\t|\r\\\n'
    )
    keyless = Dumped("t", 0, 0, None, b"v", 0)
    assert compile_format("%k|%K|%h|%s")(keyless) == b"|-1||v"
    # Anything else is kept as typed: a backslash before another letter, non-ASCII text.
    assert compile_format("\\x é %s")(keyless) == "\\x é v".encode()


@pytest.mark.parametrize("bad", ["%x", "%", "value %s and %Z"])
def test_an_unknown_token_is_refused_with_the_valid_ones(bad: str) -> None:
    with pytest.raises(SettingsError, match=r"unknown token .*%s, %S, %k"):
        compile_format(bad)


@pytest.mark.parametrize(
    ("text", "first", "end", "expected"),
    [
        ("beginning", 5, 20, 5),
        ("earliest", 5, 20, 5),
        ("end", 5, 20, 20),
        ("latest", 0, 0, 0),
        ("12", 5, 20, 12),
        ("0", 5, 20, 5),
        ("99", 5, 20, 20),  # clamped to the partition's records
        ("-3", 5, 20, 17),
        ("-100", 5, 20, 5),
        ("-0", 5, 20, 5),
    ],
)
def test_start_offsets(text: str, first: int, end: int, expected: int) -> None:
    assert StartOffset.parse(text).resolve(first, end) == expected


@pytest.mark.parametrize("bad", ["", "soon", "1.5", "stored"])
def test_a_start_offset_that_is_none_of_them_is_refused(bad: str) -> None:
    with pytest.raises(SettingsError, match="use beginning, end"):
        StartOffset.parse(bad)
