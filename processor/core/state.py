"""The engine's aggregate state, one scope at a time, as typed rows over a ``Transaction``.

Keys are JSON arrays ``[namespace, scope_id, ...]`` so every part is
unambiguous and a (namespace, scope) prefix selects exactly one scope's rows.
Values are compact JSON arrays. Rows are decoded once and then served from
the transaction's row cache; rows that change (a scope's counters, a group)
are copied before the engine touches them, so an entry that fails halfway
cannot leave a half-updated row behind in the cache.

Refs inside the engine are plain tuples, ``(family, artifact_id, revision)``
and ``(source_type, source_id)``: they are validated once at the boundary.

Nothing here grows in RAM with the journal: each entry touches a bounded
number of rows, and the row cache is bounded.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import orjson

from ..store.base import RowCache, Transaction

ArtifactKey = tuple[str, str, int]
SourceKey = tuple[str, str]


def compact(data: bytes) -> bytes:
    """A copy that owns exactly its bytes: orjson returns over-allocated buffers (~4 KiB each), which
    is harmless for a passing value and ruinous for one kept (a cache key, a memoized fragment).
    Formatting is the cheapest exact copy (a quarter of ``bytes(memoryview(data))``'s cost)."""
    return b"%b" % data


def key(*parts: str | int) -> bytes:
    return b"%b" % orjson.dumps(parts)  # ``compact`` inlined: several keys per entry


def prefix(*parts: str | int) -> bytes:
    # '["ns","scope"]' -> '["ns","scope",' : matches every longer key, and only those.
    return orjson.dumps(parts)[:-1] + b","


def artifact_json(ref: ArtifactKey) -> dict[str, Any]:
    return {"family": ref[0], "artifact_id": ref[1], "revision": ref[2]}


def source_json(ref: SourceKey) -> dict[str, str]:
    return {"source_type": ref[0], "source_id": ref[1]}


# Rows written once per entry or per Source and rarely read back stay out of the row cache.
_UNCACHED: Final = (b'["pos",', b'["cand",', b'["rid",', b'["mark",')


def row_cache(capacity: int = 50_000) -> RowCache:
    return RowCache(capacity, _UNCACHED)


@dataclass(slots=True)
class ScopeMeta:
    last_position: int = 0
    selected: int = 0
    recurred: int = 0
    avoided: int = 0
    unknown: int = 0

    def encode(self) -> bytes:
        return orjson.dumps([self.last_position, self.selected, self.recurred, self.avoided, self.unknown])

    @classmethod
    def decode(cls, raw: bytes) -> "ScopeMeta":
        return cls(*orjson.loads(raw))

    def copy(self) -> "ScopeMeta":
        return ScopeMeta(self.last_position, self.selected, self.recurred, self.avoided, self.unknown)


# Stored rows are named tuples, not frozen dataclasses: as immutable (cached rows are shared),
# and built for every Source and revision at a fraction of the cost.
class StoredSource(NamedTuple):
    position: int
    kind: str | None
    digest: str
    # task-outcome: does it carry failure evidence (admission rule 1)?
    failure_evidence: bool = False
    # handoff-receipt: the Handoff revision an accepted, exact receipt selected.
    linkable_handoff: ArtifactKey | None = None

    def encode(self) -> bytes:
        return orjson.dumps([self.position, self.kind, self.digest, self.failure_evidence, self.linkable_handoff])

    @classmethod
    def decode(cls, raw: bytes) -> "StoredSource":
        position, kind, digest, failure_evidence, linkable = orjson.loads(raw)
        return cls(position, kind, digest, failure_evidence, None if linkable is None else tuple(linkable))


class StoredArtifact(NamedTuple):
    position: int
    digest: str
    # experience with a failure block:
    signature_key: str | None = None
    repair_surface: str | None = None
    condition_key: str | None = None
    check_key: str | None = None
    content: dict[str, Any] | None = None
    # handoff: exact Experience revisions cited in state[] and next_action, first-seen order.
    cites: tuple[ArtifactKey, ...] | None = None

    def encode(self) -> bytes:
        return orjson.dumps(
            [
                self.position,
                self.digest,
                self.signature_key,
                self.repair_surface,
                self.condition_key,
                self.check_key,
                self.content,
                self.cites,
            ]
        )

    @classmethod
    def decode(cls, raw: bytes) -> "StoredArtifact":
        position, digest, signature_key, surface, condition_key, check_key, content, cites = orjson.loads(raw)
        return cls(
            position,
            digest,
            signature_key,
            surface,
            condition_key,
            check_key,
            content,
            None if cites is None else tuple(tuple(c) for c in cites),
        )


@dataclass(frozen=True, slots=True)
class FailureHead:
    """A failure-bearing Experience head: what scope-heads matching needs of it."""

    artifact_id: str
    revision: int
    signature_key: str
    repair_surface: str
    condition_key: str
    check_key: str


class FailureHeads:
    """The scope's failure-bearing Experience heads, sorted by (artifact_id, revision): one row.

    Every unlinked Task Outcome with a failure item freezes this set, while it
    changes only when an Experience head does; whatever is derived from it
    (the frozen candidate set, its serialized refs and digest) is memoized on
    the object, so it is built once per heads change.
    """

    __slots__ = ("derived", "heads", "in_key_order")

    def __init__(self, heads: tuple[FailureHead, ...]) -> None:
        self.heads = heads
        self.derived: Any = None
        self.in_key_order: tuple[FailureHead, ...] | None = None

    def encode(self) -> bytes:
        return orjson.dumps(
            [
                [h.artifact_id, h.revision, h.signature_key, h.repair_surface, h.condition_key, h.check_key]
                for h in self.heads
            ]
        )

    @classmethod
    def decode(cls, raw: bytes) -> "FailureHeads":
        return cls(tuple(FailureHead(*row) for row in orjson.loads(raw)))

    def replace(self, artifact_id: str, head: FailureHead | None) -> "FailureHeads":
        heads = [h for h in self.heads if h.artifact_id != artifact_id]
        if head is not None:
            heads.append(head)
        return FailureHeads(tuple(sorted(heads, key=lambda h: (h.artifact_id, h.revision))))


_NO_HEADS: Final = FailureHeads(())


# Bounded histories kept per group for ``recurrence explain`` (the yield card).
GROUP_HISTORY: Final = 64
GROUP_CROSSINGS: Final = 16


@dataclass(slots=True)
class Group:
    """Derived per-(revision, signature key) view: counts, the terminal streak, a short history."""

    selected: int = 0
    recurred: int = 0
    avoided: int = 0
    streak: int = 0
    # Task Outcomes of the current streak's recurrences, newest last (<= 32 kept).
    streak_sources: list[list[str]] = field(default_factory=list)
    # Linked selections that got no terminal verdict (the group's share of ``unknown``).
    unknown: int = 0
    # The latest terminal verdicts as [task_outcome_position, "recurred"|"avoided"], oldest first.
    history: list[list[Any]] = field(default_factory=list)
    # Threshold crossings as [position, outcome]: "proposed", or why no proposal was written.
    crossings: list[list[Any]] = field(default_factory=list)

    def _row(self) -> list[Any]:
        """The fields in row order: what ``encode`` writes and ``decode`` reads back."""
        return [
            self.selected,
            self.recurred,
            self.avoided,
            self.streak,
            self.streak_sources,
            self.unknown,
            self.history,
            self.crossings,
        ]

    def encode(self) -> bytes:
        return orjson.dumps(self._row())

    @classmethod
    def decode(cls, raw: bytes) -> "Group":
        return cls(*orjson.loads(raw))

    def copy(self) -> "Group":
        # The lists are shared, not copied: they are never changed in place (``verdict``, ``crossed``
        # and the ledger replace them), so the cached row they came from cannot see a later change.
        return Group(*self._row())

    def verdict(self, position: int, event: str) -> None:
        self.history = [*self.history, [position, event]][-GROUP_HISTORY:]

    def crossed(self, position: int, outcome: str) -> None:
        self.crossings = [*self.crossings, [position, outcome]][-GROUP_CROSSINGS:]


#: Streak values the shadow counters tell apart: a longer streak is counted as this one, so a scope's
#: row stays bounded however long a group keeps recurring, and every threshold up to it is exact.
SHADOW_STREAKS: Final = 100


def _bump(histogram: list[int], value: int) -> None:
    if len(histogram) <= value:
        histogram.extend([0] * (value + 1 - len(histogram)))
    histogram[value] += 1


@dataclass(slots=True)
class Shadow:
    """A scope's shadow counters: the streak transitions of its groups, as histograms over the streak
    value (index = value, clamped at ``SHADOW_STREAKS``), from which ``whatif`` answers what a replay at
    any review threshold would have counted. Kept by the ledger at the verdicts, in both runners."""

    # Terminal verdicts folded in: equal to the scope row's recurred + avoided exactly when the counters
    # saw the scope's whole history (a state replayed before they existed did not).
    verdicts: int = 0
    # streaks[v]: groups whose terminal streak is v now (v >= 1).
    streaks: list[int] = field(default_factory=list)
    # peaks[v]: streaks an ``avoided`` verdict ended at v.
    peaks: list[int] = field(default_factory=list)
    # eligible[v]: times a streak reached v while a proposal could be written (surface, head).
    eligible: list[int] = field(default_factory=list)

    @classmethod
    def of_streaks(cls, streaks: Iterable[int]) -> "Shadow":
        """Counters for a scope whose earlier verdicts were never folded in (its state was written before
        the counters existed): its groups' current streaks, so the next verdicts move each group from
        where it stands. ``verdicts`` stays 0: ``whatif`` lists the scope as incomplete."""
        shadow = cls()
        for streak in streaks:
            if streak:
                _bump(shadow.streaks, min(streak, SHADOW_STREAKS))
        return shadow

    def encode(self) -> bytes:
        return orjson.dumps([self.verdicts, self.streaks, self.peaks, self.eligible])

    @classmethod
    def decode(cls, raw: bytes) -> "Shadow":
        return cls(*orjson.loads(raw))

    def copy(self) -> "Shadow":
        return Shadow(self.verdicts, self.streaks.copy(), self.peaks.copy(), self.eligible.copy())

    def recurred(self, streak: int, eligible: bool) -> None:
        """A group's streak went up to ``streak``; ``eligible``: a proposal could be written at it."""
        self.verdicts += 1
        if streak > SHADOW_STREAKS:
            return  # the group already sits in the last slot
        if streak > 1:
            self.streaks[streak - 1] -= 1
        _bump(self.streaks, streak)
        if eligible:
            _bump(self.eligible, streak)

    def avoided(self, streak: int) -> None:
        """An ``avoided`` verdict ended a group's streak of ``streak`` (0: there was none)."""
        self.verdicts += 1
        if streak:
            slot = min(streak, SHADOW_STREAKS)
            self.streaks[slot] -= 1
            _bump(self.peaks, slot)


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)


class State:
    """Typed access to one transaction's view of the store."""

    def __init__(self, txn: Transaction, track_statistics_rows: bool = False) -> None:
        self.txn = txn
        # Scope row keys of this transaction's scopes: every entry reads and writes its scope's row.
        self._scope_keys: dict[str, bytes] = {}
        # With ``track_statistics_rows`` (the worker): the rows a scope's statistics depend on, as
        # staged (key -> its parts, the key's JSON array decoded), so the statistics step reads them
        # here instead of parsing every key the batch staged (``scopesummary.changed_rows``). A row of
        # an entry that was then aborted stays here; the transaction's staged keys tell. The embedded
        # runner writes no statistics records and pays nothing for it.
        self.statistics_rows: dict[bytes, tuple[Any, ...]] | None = {} if track_statistics_rows else None

    # -- per-scope bookkeeping ----------------------------------------------------
    def scope(self, scope_id: str) -> ScopeMeta | None:
        meta: ScopeMeta | None = self.txn.get(self._scope_key(scope_id), ScopeMeta.decode)
        return meta

    def _scope_key(self, scope_id: str) -> bytes:
        row_key = self._scope_keys.get(scope_id)
        if row_key is None:
            row_key = self._scope_keys[scope_id] = key("scope", scope_id)
        return row_key

    def scope_row(self, scope_id: str) -> tuple[bytes, ScopeMeta | None]:
        """The scope's row key and committed row, to read before deciding to update it."""
        row_key = self._scope_key(scope_id)
        meta: ScopeMeta | None = self.txn.get(row_key, ScopeMeta.decode)
        return row_key, meta

    def stage_scope(self, row_key: bytes, current: ScopeMeta | None) -> ScopeMeta:
        """A private copy of the scope's row (from ``scope_row``), staged in the current entry."""
        meta = ScopeMeta() if current is None else current.copy()
        self.txn.put(row_key, meta)
        rows = self.statistics_rows
        if rows is not None and row_key not in rows:
            rows[row_key] = ("scope", orjson.loads(row_key)[1])
        return meta

    def committed_scope(self, scope_id: str) -> ScopeMeta | None:
        """The scope's row as committed before the current batch (see ``Transaction.committed``)."""
        meta: ScopeMeta | None = self.txn.committed(self._scope_key(scope_id), ScopeMeta.decode)
        return meta

    def scope_ids(self) -> Iterator[str]:
        for raw_key, _ in self.txn.iterate_prefix(b'["scope",'):
            yield orjson.loads(raw_key)[1]

    # A position's row: the accepted entry's 32-byte digest, then where it came from (its origin).
    def entry_digest(self, scope_id: str, position: int) -> bytes | None:
        row: bytes | None = self.txn.get(key("pos", scope_id, position))
        return None if row is None else row[:32]

    def entry_origin(self, scope_id: str, position: int) -> dict[str, Any] | None:
        row: bytes | None = self.txn.get(key("pos", scope_id, position))
        if row is None:
            return None
        origin: dict[str, Any] = orjson.loads(row[32:])
        return origin

    def put_entry(self, scope_id: str, position: int, entry_digest: bytes, origin: Mapping[str, str | int]) -> None:
        where = origin if type(origin) is dict else dict(origin)
        self.txn.put(key("pos", scope_id, position), entry_digest + orjson.dumps(where))

    # -- Sources ----------------------------------------------------------------
    def source(self, scope_id: str, ref: SourceKey) -> StoredSource | None:
        stored: StoredSource | None = self.txn.get(key("src", scope_id, *ref), StoredSource.decode)
        return stored

    def source_row(self, scope_id: str, ref: SourceKey) -> tuple[bytes, StoredSource | None]:
        """The Source's row key and row, to read before writing it (``put_source_row``)."""
        row_key = key("src", scope_id, *ref)
        stored: StoredSource | None = self.txn.get(row_key, StoredSource.decode)
        return row_key, stored

    def put_source_row(self, row_key: bytes, stored: StoredSource) -> None:
        self.txn.put(row_key, stored)

    # -- Artifact revisions and heads ----------------------------------------------
    def artifact(self, scope_id: str, ref: ArtifactKey) -> StoredArtifact | None:
        stored: StoredArtifact | None = self.txn.get(key("art", scope_id, *ref), StoredArtifact.decode)
        return stored

    def put_artifact(self, scope_id: str, ref: ArtifactKey, stored: StoredArtifact) -> None:
        row_key = key("art", scope_id, *ref)
        self.txn.put(row_key, stored)
        if self.statistics_rows is not None:
            self.statistics_rows[row_key] = ("art", scope_id, *ref)

    def head(self, scope_id: str, family: str, artifact_id: str) -> int | None:
        return _int(self.txn.get(key("head", scope_id, family, artifact_id)))

    def committed_head(self, scope_id: str, family: str, artifact_id: str) -> int | None:
        """The artifact's head revision as committed before the current batch."""
        return _int(self.txn.committed(key("head", scope_id, family, artifact_id)))

    def put_head(self, scope_id: str, ref: ArtifactKey) -> None:
        row_key = key("head", scope_id, ref[0], ref[1])
        self.txn.put(row_key, str(ref[2]).encode())
        if self.statistics_rows is not None:
            self.statistics_rows[row_key] = ("head", scope_id, ref[0], ref[1])

    def heads(self, scope_id: str, family: str) -> Iterator[ArtifactKey]:
        for raw_key, raw_value in self.txn.iterate_prefix(prefix("head", scope_id, family)):
            yield family, orjson.loads(raw_key)[3], int(raw_value)

    def failure_heads(self, scope_id: str) -> FailureHeads:
        heads: FailureHeads | None = self.txn.get(key("xheads", scope_id), FailureHeads.decode)
        return _NO_HEADS if heads is None else heads

    def put_failure_heads(self, scope_id: str, heads: FailureHeads) -> None:
        self.txn.put(key("xheads", scope_id), heads)

    # -- Candidates -----------------------------------------------------------------
    def candidate_digest(self, scope_id: str, candidate_id: str) -> bytes | None:
        digest: bytes | None = self.txn.get(key("cand", scope_id, candidate_id))
        return digest

    def put_candidate_digest(self, scope_id: str, candidate_id: str, value: bytes) -> None:
        self.txn.put(key("cand", scope_id, candidate_id), value)

    # -- Derived groups -----------------------------------------------------------------
    def group(self, scope_id: str, ref: ArtifactKey, signature_key: str) -> Group | None:
        group: Group | None = self.txn.get(key("grp", scope_id, *ref, signature_key), Group.decode)
        return group

    def group_for_update(self, scope_id: str, ref: ArtifactKey, signature_key: str) -> Group:
        row_key = key("grp", scope_id, *ref, signature_key)
        current: Group | None = self.txn.get(row_key, Group.decode)
        group = Group() if current is None else current.copy()
        self.txn.put(row_key, group)
        if self.statistics_rows is not None:
            self.statistics_rows[row_key] = ("grp", scope_id, *ref, signature_key)
        return group

    # -- Shadow counters (whatif) ------------------------------------------------------------
    def shadow(self, scope_id: str) -> Shadow | None:
        shadow: Shadow | None = self.txn.get(key("tune", scope_id), Shadow.decode)
        return shadow

    def shadow_for_update(self, scope_id: str, earlier_verdicts: int) -> Shadow:
        """A private copy of the scope's shadow counters, staged in the current entry; ``earlier_verdicts``:
        the scope's terminal verdicts so far (counters missing after some were written by a release before
        them, and start from the groups' streaks)."""
        row_key = key("tune", scope_id)
        current: Shadow | None = self.txn.get(row_key, Shadow.decode)
        if current is not None:
            shadow = current.copy()
        elif earlier_verdicts:
            shadow = Shadow.of_streaks(group.streak for _, _, group in self.groups(scope_id))
        else:
            shadow = Shadow()
        self.txn.put(row_key, shadow)
        return shadow

    # -- Yield marks (history, trends, retirement) ----------------------------------------------
    def put_mark(self, scope_id: str, ref: ArtifactKey, position: int, flags: bytes) -> None:
        """What one Task Outcome did to one revision's group (``yieldmarks``): written once, never changed."""
        self.txn.put(key("mark", scope_id, *ref, position), flags)

    def marks(self, scope_id: str, *artifact: str | int) -> Iterator[tuple[ArtifactKey, int, bytes]]:
        """The marks of a scope, or of one artifact (``family, artifact_id``) or revision: (ref, position, flags),
        in key order (not position order: a key holds the position as JSON text)."""
        for raw_key, raw_value in self.txn.iterate_prefix(prefix("mark", scope_id, *artifact)):
            _, _, family, artifact_id, revision, position = orjson.loads(raw_key)
            yield (family, artifact_id, revision), position, bytes(raw_value)

    def revisions(self, scope_id: str, family: str, artifact_id: str) -> Iterator[tuple[ArtifactKey, StoredArtifact]]:
        """Every accepted revision of one artifact, in key order."""
        for raw_key, stored in self.txn.iterate_prefix(
            prefix("art", scope_id, family, artifact_id), StoredArtifact.decode
        ):
            _, _, fam, art_id, revision = orjson.loads(raw_key)
            yield (fam, art_id, revision), stored

    def groups(self, scope_id: str) -> Iterator[tuple[ArtifactKey, str, Group]]:
        for raw_key, group in self.txn.iterate_prefix(prefix("grp", scope_id), Group.decode):
            _, _, family, artifact_id, revision, signature_key = orjson.loads(raw_key)
            yield (family, artifact_id, revision), signature_key, group
