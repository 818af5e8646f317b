"""``recurrence verify``: do a Kafka deployment's outputs equal an embedded replay's ledger?

The rule is the contract's (docs/kafka.md): for one journal, the output topics,
deduplicated by record id, equal the embedded ledger record for record in
per-scope order. Both sides are deduplicated by id (a crash re-emits a record
with the id it had; the first copy is kept), grouped by ``scope_id`` and
compared scope by scope, each scope's records in order. Order across scopes is
not compared: the topics' partitions interleave scopes freely. A dead letter
is compared without ``origin`` and ``dead_letter_id``: embedded they name a
file line, on Kafka a topic offset (contract section 2); everything else about
it must be equal.

The tests and the benchmarks compare the two runners with this module too, so
there is one rule. Reports name records by id (and dead letters by error code
and position), never by their text.

Both files are regular files (``-``: stdin), read a line of at most
``OUTPUT_MAX_RECORD_BYTES`` at a time (no output topic holds a longer record),
and every line must be an output record the comparison can name: a JSON object
with a string ``record``, its kind's id field a string, ``scope_id`` a string
or absent. Anything else is refused in one line (exit 2) naming the line.
"""

import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from ..schemas.canonical import digest
from ..topics.definitions import OUTPUT_MAX_RECORD_BYTES
from .exceptions import UnusableError
from .host.printable import shown
from .host.regularfile import bounded_lines, open_regular

Grouped = dict[str | None, list[bytes]]

# The patterns agent's suggestions are outputs of the worker but not part of the ledger
# (``recurrence patterns`` reads them from the state).
NOT_IN_THE_LEDGER: Final = frozenset({"pattern"})
REPORTED_SCOPES: Final = 10
#: The field holding a record's own id, by kind (the others are named by their digest).
ID_FIELDS: Final = {"observation": "observation_id", "match": "match_digest", "dead_letter": "dead_letter_id"}


def _is_output_record(record: Any) -> bool:
    """Can the comparison name and group this: a kind, its id field if it has one, a scope (or none)?"""
    if not isinstance(record, dict) or not isinstance(record.get("record"), str):
        return False
    field = ID_FIELDS.get(record["record"])
    if field is not None and not isinstance(record.get(field), str):
        return False
    scope = record.get("scope_id")
    return scope is None or isinstance(scope, str)


def record_id(value: bytes) -> str:
    """``<kind>:<id>``: the record's own id field, or the digest of a record that carries none."""
    record = orjson.loads(value)
    kind = record.get("record") if isinstance(record, dict) else None
    if kind == "observation":
        return f"observation:{record['observation_id']}"
    if kind == "match":
        return f"match:{record['match_digest']}"
    if kind == "dead_letter":
        return f"dead_letter:{record['dead_letter_id']}"
    return f"{kind}:{digest(record)}"


def distinct(records: Iterable[bytes]) -> list[bytes]:
    """The records without later copies of an id, in order."""
    seen: set[str] = set()
    kept = []
    for value in records:
        ident = record_id(value)
        if ident not in seen:
            seen.add(ident)
            kept.append(value)
    return kept


def comparable(value: bytes) -> bytes:
    """A record as both runners must write it: a dead letter without its origin and id."""
    record = orjson.loads(value)
    if record.get("record") != "dead_letter":
        return value
    record.pop("origin", None)
    record.pop("dead_letter_id", None)
    return orjson.dumps(record)


def by_scope(records: Iterable[bytes]) -> Grouped:
    """Deduplicated records grouped by scope, each list in order, dead letters comparable across runners."""
    grouped: Grouped = defaultdict(list)
    for value in distinct(records):
        grouped[orjson.loads(value).get("scope_id")].append(comparable(value))
    return dict(grouped)


@dataclass(frozen=True)
class ScopeDifference:
    scope_id: str | None
    ledger_records: int
    outputs_records: int
    first: int  # index of the first record that differs, or the shorter side's length
    ledger_record: str | None  # what stands there on each side (None: the side ended)
    outputs_record: str | None

    def line(self) -> str:
        return (
            f"scope {self.scope_id!r}: ledger {_records(self.ledger_records)}, outputs {self.outputs_records:,}; "
            f"first difference at #{self.first}: ledger {self.ledger_record or 'ends'}, "
            f"outputs {self.outputs_record or 'ends'}"
        )


def _counted(count: int, noun: str, before: str = "") -> str:
    return f"{count:,} {before}{noun}{'' if count == 1 else 's'}"


def _scopes(count: int, before: str = "") -> str:
    return _counted(count, "scope", before)


def _records(count: int) -> str:
    return _counted(count, "record")


@dataclass(frozen=True)
class Comparison:
    ledger_records: int
    ledger_distinct: int
    outputs_records: int
    outputs_distinct: int
    scopes: int
    differing: tuple[ScopeDifference, ...]

    @property
    def equal(self) -> bool:
        return not self.differing

    def summary(self) -> str:
        verdict = "equal" if self.equal else f"differ in {len(self.differing):,} of {_scopes(self.scopes)}"
        return (
            f"{verdict}: ledger {_records(self.ledger_records)} ({self.ledger_distinct:,} distinct), "
            f"outputs {_records(self.outputs_records)} ({self.outputs_distinct:,} distinct), {_scopes(self.scopes)}"
        )

    def lines(self, limit: int = REPORTED_SCOPES) -> list[str]:
        shown_here = [d.line() for d in self.differing[:limit]]
        more = len(self.differing) - len(shown_here)
        tail = [f"... and {_scopes(more, 'more ')} (--json lists all)"] if more else []
        return [self.summary(), *shown_here, *tail]

    def as_json(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "ledger": {"records": self.ledger_records, "distinct": self.ledger_distinct},
            "outputs": {"records": self.outputs_records, "distinct": self.outputs_distinct},
            "scopes": self.scopes,
            "differing": [
                {
                    "scope_id": d.scope_id,
                    "ledger_records": d.ledger_records,
                    "outputs_records": d.outputs_records,
                    "first_difference": d.first,
                    "ledger_record": d.ledger_record,
                    "outputs_record": d.outputs_record,
                }
                for d in self.differing
            ],
        }


def _named(value: bytes) -> str:
    """A record for a report: its id, and a dead letter's code and position (never its text)."""
    name = record_id(value)
    record = orjson.loads(value)
    if record.get("record") == "dead_letter":
        name += f" ({record.get('error')}, position {record.get('position')})"
    return name


def _originals(records: Iterable[bytes]) -> dict[str | None, list[bytes]]:
    grouped: dict[str | None, list[bytes]] = defaultdict(list)
    for value in distinct(records):
        grouped[orjson.loads(value).get("scope_id")].append(value)
    return grouped


def compare(*, ledger: list[bytes], outputs: list[bytes]) -> Comparison:
    """The embedded ``ledger`` against what a deployment's output topics hold (``outputs``)."""
    want, got = _originals(ledger), _originals(outputs)
    differing = []
    for scope in sorted(set(want) | set(got), key=lambda s: (s is not None, s or "")):
        w, g = want.get(scope, []), got.get(scope, [])
        first = next(
            (i for i, (a, b) in enumerate(zip(w, g, strict=False)) if comparable(a) != comparable(b)),
            None if len(w) == len(g) else min(len(w), len(g)),
        )
        if first is not None:
            differing.append(
                ScopeDifference(
                    scope,
                    len(w),
                    len(g),
                    first,
                    _named(w[first]) if first < len(w) else None,
                    _named(g[first]) if first < len(g) else None,
                )
            )
    return Comparison(
        ledger_records=len(ledger),
        ledger_distinct=sum(map(len, want.values())),
        outputs_records=len(outputs),
        outputs_distinct=sum(map(len, got.values())),
        scopes=len(set(want) | set(got)),
        differing=tuple(differing),
    )


def _lines(handle: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(handle, 1):
        line = raw.rstrip(b"\r\n")
        if line.strip():
            yield number, line


_WHAT_TO_GIVE: Final = "give the ledger `recurrence replay --out` wrote and the dump of `recurrence ledger-dump --out`"


def read_records(path: str, what: str) -> list[bytes]:
    """Every output record in a ``.jsonl`` file (``-``: stdin); UnusableError naming the first line that is not one."""
    where = f"{what} {shown(path)}"
    advice = f"no output record is that long: {_WHAT_TO_GIVE}"
    try:
        if path == "-":
            numbered = list(_lines(bounded_lines(sys.stdin.buffer, OUTPUT_MAX_RECORD_BYTES, where, advice)))
        else:
            with open_regular(path, what) as handle:
                numbered = list(_lines(bounded_lines(handle, OUTPUT_MAX_RECORD_BYTES, where, advice)))
    except OSError as error:
        raise UnusableError(f"cannot read {where}: {error.strerror or error}") from error
    records, left_out = [], 0
    for number, line in numbered:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if not _is_output_record(record):
            raise UnusableError(
                f'{where} line {number} is not an output record (a JSON object with "record", its id and '
                f"scope_id strings): {_WHAT_TO_GIVE}"
            )
        if record["record"] in NOT_IN_THE_LEDGER:
            left_out += 1
            continue
        records.append(line)
    if left_out:
        raise UnusableError(
            f"{where} holds {left_out} pattern records, which no ledger holds: dump the default "
            "kinds (`recurrence ledger-dump` without --kinds patterns)"
        )
    return records
