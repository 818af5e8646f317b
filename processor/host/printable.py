"""Text for a terminal or a log line: control characters from the journal are shown escaped, never sent.

Scope, artifact and source ids, signature keys and texts come from the
journal, and anything may be in them: ``\\x1b]0;...\\x07`` retitles a terminal
window, ``\\x1b[31m`` recolours what follows, ``\\r`` and ``\\n`` forge log
lines, U+202E reverses what is shown. ``printable`` escapes them (C0, DEL,
C1, the line and paragraph separators and the bidirectional controls) as
``\\xNN`` or ``\\uNNNN``; ``printable_json`` does the same for JSON that goes to
a terminal, as JSON escapes (orjson already escapes C0; DEL, C1 and the
others pass raw), so the value a tool parses is unchanged. A backslash
itself is left as it is: an id is shown as typed, and only characters that
would act on the terminal are rewritten. ``escape_log_arguments`` applies the
same to every log record's arguments; ``shown`` makes a path fit for a message,
``error_line`` an error.
"""

import logging
import os
import re
from collections.abc import Mapping
from typing import Any, Final

_CONTROLS: Final = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL: Final = re.compile(f"[{_CONTROLS}]")
# In JSON text C0 is already escaped (a raw one is invalid JSON); the rest must be too.
_JSON_CONTROL: Final = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: How much of an id a message echoes back (an id over the limit is cut, marked with "…").
ECHO_LIMIT: Final = 160


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character escaped (newlines too: one value stays on one line)."""
    return _CONTROL.sub(_escape, text)


def printable_lines(text: str) -> str:
    """Like ``printable``, but the newlines between ``text``'s lines are kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def echoed(text: str, limit: int = ECHO_LIMIT) -> str:
    """An id for a message: printable and at most ``limit`` characters (then "…" and the length)."""
    if len(text) <= limit:
        return printable(text)
    return f"{printable(text[:limit])}… ({len(text):,} characters)"


def printable_json(data: bytes) -> bytes:
    """JSON with DEL, C1 and the bidirectional controls written as ``\\uNNNN`` escapes: the same value."""
    text = data.decode("utf-8")
    if _JSON_CONTROL.search(text) is None:
        return data
    return _JSON_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def _printable_argument(value: Any, keep_newlines: bool) -> Any:
    if not isinstance(value, str):
        return value
    return printable_lines(value) if keep_newlines else printable(value)


def escape_log_arguments() -> None:
    """Every log record's string arguments printable, whoever logs (installed once, by the command line).

    Only the arguments: a message's format string is the program's own. The product's loggers
    (``recurrence.*``) get one line per value; other libraries' keep their newlines (Faust logs its tables as
    arguments) and lose every other control character."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "escapes_arguments", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.args:
            keep = not record.name.startswith("recurrence")
            if isinstance(record.args, Mapping):
                record.args = {k: _printable_argument(v, keep) for k, v in record.args.items()}
            else:
                record.args = tuple(_printable_argument(v, keep) for v in record.args)
        return record

    factory.escapes_arguments = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def shown(path: str | os.PathLike[str]) -> str:
    """A path for a message: undecodable bytes as \\xNN escapes instead of an encoding error, no control
    characters."""
    return printable(os.fsencode(path).decode("utf-8", "backslashreplace"))


def error_line(error: BaseException) -> str:
    """What a message says of an error: an OSError's reason and the file it names (``shown``), any other's text."""
    if isinstance(error, OSError):
        where = f": {shown(error.filename)}" if error.filename else ""
        return f"{error.strerror or error}{where}"
    return str(error)
