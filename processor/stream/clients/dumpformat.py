"""``ledger-dump --offset`` and ``--format``: where to start reading and how to print, as kcat's ``-o`` and ``-f``.

``--offset`` is where each chosen partition is read from: ``beginning`` (the
default: the whole ledger), ``end`` (nothing already there: with ``--follow``,
only what arrives), ``N`` (that offset, or the partition's first or end offset
when N lies outside them) or ``-N`` (the last N records of each partition).

``--format`` takes kcat's tokens: ``%s`` the record, ``%S`` its length in
bytes, ``%k`` the key, ``%K`` its length (-1 without a key), ``%t`` the topic,
``%p`` the partition, ``%o`` the offset, ``%T`` the broker timestamp (ms),
``%h`` the headers (``name=value`` joined by ``,``), ``%%`` a percent sign,
and the escapes ``\\n``, ``\\t``, ``\\r``, ``\\\\``. No newline is added: the
default, ``%s\\n``, writes exactly the bytes of the embedded ledger.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from ...exceptions import SettingsError


@dataclass(frozen=True, slots=True)
class Dumped:
    """One output record as read: its value and where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


Part = Callable[[Dumped], bytes]

_TOKENS: Final[dict[str, Part]] = {
    "s": lambda d: d.value,
    "S": lambda d: b"%d" % len(d.value),
    "k": lambda d: d.key or b"",
    "K": lambda d: b"%d" % (-1 if d.key is None else len(d.key)),
    "t": lambda d: d.topic.encode(),
    "p": lambda d: b"%d" % d.partition,
    "o": lambda d: b"%d" % d.offset,
    "T": lambda d: b"%d" % d.timestamp,
    "h": lambda d: b",".join(name.encode() + b"=" + value for name, value in d.headers),
}
_ESCAPES: Final = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}
DEFAULT_FORMAT: Final = "%s\\n"


def compile_format(text: str) -> Callable[[Dumped], bytes]:
    """The renderer of a format string; a ``SettingsError`` naming the valid tokens for anything else."""
    parts: list[bytes | Part] = []
    literal = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        following = text[index + 1] if index + 1 < len(text) else ""
        if char == "%":
            if following == "%":
                literal += b"%"
            elif following in _TOKENS:
                if literal:
                    parts.append(bytes(literal))
                    literal.clear()
                parts.append(_TOKENS[following])
            else:
                raise SettingsError(
                    f"--format: unknown token %{following} at position {index + 1}: use "
                    f"{', '.join('%' + token for token in _TOKENS)}, %% and the escapes \\n \\t \\r \\\\"
                )
            index += 2
        elif char == "\\" and following in _ESCAPES:
            literal += _ESCAPES[following]
            index += 2
        else:
            literal += char.encode()
            index += 1
    if literal:
        parts.append(bytes(literal))
    fixed = tuple(parts)

    def render(dumped: Dumped) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part(dumped) for part in fixed)

    return render


def value_line(dumped: Dumped) -> bytes:
    """The default format (``%s\\n``) without parsing it: the bytes of the embedded ledger's line."""
    return dumped.value + b"\n"


@dataclass(frozen=True, slots=True)
class StartOffset:
    """Where a partition is read from (``--offset``)."""

    kind: Literal["beginning", "end", "at", "last"]
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> "StartOffset":
        word = text.strip().lower()
        if word in ("beginning", "earliest", "start"):
            return cls("beginning")
        if word in ("end", "latest"):
            return cls("end")
        try:
            number = int(word)
        except ValueError:
            raise SettingsError(
                f"--offset {text!r}: use beginning, end, an offset N, or -N for the last N records of each partition"
            ) from None
        return cls("last", -number) if number < 0 else cls("at", number)

    def resolve(self, first: int, end: int) -> int:
        """The offset to read from in a partition whose records are ``first`` .. ``end - 1``."""
        if self.kind == "beginning":
            return first
        if self.kind == "end":
            return end
        if self.kind == "last":
            return max(first, end - self.value)
        return min(max(first, self.value), end)


BEGINNING: Final = StartOffset("beginning")
