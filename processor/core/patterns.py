"""Cross-scope failure patterns (RFC "Future possibilities"): one signature recurring in many scopes.

"A signature that recurs in many scopes is a candidate for promotion from
personal to team assets." The tracker keeps, per normalized signature key, the
distinct scopes and Experience revisions in which a ``recurred`` observation
named it. When a key has recurred in at least ``min_scopes`` scopes it emits
one ``pattern`` suggestion, once. A suggestion is never a counter change and
never an artifact write: it is a hint for a human, like a near-twin warning.

The suggestion's content is the key and the threshold only, so it is the same
whichever scopes happened to arrive first (the Kafka path sees scopes in
partition-interleaved order, the embedded runner in file order); the scopes
and revisions behind it are the tracker's row, listed by ``recurrence
patterns`` and growing as more recurrences arrive.

Rows live under their own namespace (``["pat", key]``), outside every scope:
the embedded runner keeps them in its state, the Kafka path in the patterns
agent's table, partitioned by key.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ...schemas.canonical import digest, dumps
from ..store.base import Transaction
from .engineconfig import MAX_LISTED  # how many scopes and revisions a row lists (counts go on past them)
from .records import Emitted
from .state import compact

#: The namespace of pattern rows (outside every scope).
PATTERNS: Final = "pat"
_PREFIX: Final = b'["pat",'
# An observation line names its event once, as ``"event":"recurred"`` (records are compact JSON).
_RECURRED: Final = b'"event":"recurred"'


def is_recurred(record: Emitted) -> bool:
    """Does the tracker take this output record? (A byte test: observations are the hot path.)"""
    return record.record == "observation" and _RECURRED in record.line


def pattern_key(signature_key: str) -> bytes:
    return compact(orjson.dumps([PATTERNS, signature_key]))


@dataclass(slots=True)
class Pattern:
    scopes: list[str] = field(default_factory=list)  # sorted, distinct, at most MAX_LISTED
    revisions: list[list[Any]] = field(default_factory=list)  # [scope, family, artifact_id, revision], sorted
    recurrences: int = 0
    suggested: bool = False
    more_scopes: bool = False  # a scope beyond the listed ones was seen
    more_revisions: bool = False  # a revision beyond the listed ones was seen

    def encode(self) -> bytes:
        return orjson.dumps(
            [self.scopes, self.revisions, self.recurrences, self.suggested, self.more_scopes, self.more_revisions]
        )

    @classmethod
    def decode(cls, raw: bytes) -> "Pattern":
        fields = orjson.loads(raw)
        if len(fields) == 5:
            # A row written before the two lists overflowed separately: one flag for both. A scope
            # beyond the list is possible only once the list is full; the flag is then read as both
            # (revisions are at least as many as scopes, so that list is full too).
            scopes, revisions, recurrences, suggested, more = fields
            return cls(
                scopes,
                revisions,
                recurrences,
                suggested,
                more and len(scopes) >= MAX_LISTED,
                more and len(revisions) >= MAX_LISTED,
            )
        return cls(*fields)

    def copy(self) -> "Pattern":
        return Pattern(
            list(self.scopes),
            [list(r) for r in self.revisions],
            self.recurrences,
            self.suggested,
            self.more_scopes,
            self.more_revisions,
        )


def suggestion(signature_key: str, min_scopes: int) -> Emitted:
    body = {
        "signature_key": signature_key,
        "min_scopes": min_scopes,
        "reason": (
            f"recurred in at least {min_scopes} scopes: a candidate for promotion from personal to team "
            "assets (a suggestion only; nothing was counted or written)"
        ),
    }
    pattern_id = digest(body)
    line = dumps({"record": "pattern", "pattern_id": pattern_id, **body})
    return Emitted("pattern", None, pattern_id, line)


class PatternTracker:
    def __init__(self, txn: Transaction, min_scopes: int) -> None:
        if not 1 <= min_scopes <= MAX_LISTED:
            raise ValueError(f"min_scopes must be between 1 and {MAX_LISTED}")
        self.txn = txn
        self.min_scopes = min_scopes

    def observe(self, recurred: dict[str, Any]) -> Emitted | None:
        """Fold one ``recurred`` observation (its record dict); the suggestion when the key crosses."""
        signature_key: str = recurred["signature_key"]
        scope_id: str = recurred["scope_id"]
        art = recurred["artifact_ref"]
        row_key = pattern_key(signature_key)
        current: Pattern | None = self.txn.get(row_key, Pattern.decode)
        pattern = Pattern() if current is None else current.copy()
        pattern.recurrences += 1
        if scope_id not in pattern.scopes:
            if len(pattern.scopes) < MAX_LISTED:
                pattern.scopes = sorted([*pattern.scopes, scope_id])
            else:
                pattern.more_scopes = True
        revision = [scope_id, art["family"], art["artifact_id"], art["revision"]]
        if revision not in pattern.revisions:
            if len(pattern.revisions) < MAX_LISTED:
                pattern.revisions = sorted([*pattern.revisions, revision])
            else:
                pattern.more_revisions = True
        emitted = None
        if not pattern.suggested and len(pattern.scopes) >= self.min_scopes:
            pattern.suggested = True
            emitted = suggestion(signature_key, self.min_scopes)
        self.txn.put(row_key, pattern)
        return emitted


def patterns(txn: Transaction) -> Iterator[tuple[str, Pattern]]:
    for raw_key, pattern in txn.iterate_prefix(_PREFIX, Pattern.decode):
        yield orjson.loads(raw_key)[1], pattern


def listing_order(row: dict[str, Any]) -> tuple[int, str]:
    """The order of ``listing``: most scopes first, then by key (also merges partitions' listings)."""
    return -int(row["scope_count"]), str(row["signature_key"])


def listing(txn: Transaction, min_scopes: int, suggested_only: bool = True) -> list[dict[str, Any]]:
    """What ``recurrence patterns`` prints: keys by scope count, then key."""
    found = ((key, p) for key, p in patterns(txn) if p.suggested or not suggested_only)
    rows = [
        {
            "signature_key": key,
            "scope_count": len(p.scopes),
            "more_than_listed": p.more_scopes or p.more_revisions,
            "scopes_more_than_listed": p.more_scopes,
            "revisions_more_than_listed": p.more_revisions,
            "scopes": p.scopes,
            "revisions": [
                {"scope_id": r[0], "artifact_ref": {"family": r[1], "artifact_id": r[2], "revision": r[3]}}
                for r in p.revisions
            ],
            "recurrences": p.recurrences,
            "suggested": p.suggested,
            "min_scopes": min_scopes,
        }
        for key, p in found
    ]
    return sorted(rows, key=listing_order)
