"""The engine's aggregate state, one scope at a time, as typed records over a store.

Keys are JSON arrays ``[namespace, scope_id, ...]`` so every part is
unambiguous and a (namespace, scope) prefix selects exactly one scope's rows.
Values are small JSON objects. Nothing here grows in RAM with the journal: each
entry touches a bounded number of keys.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from recurrence.processor.store import Transaction
from recurrence.schemas.base import ArtifactRef, SourceRef


def key(*parts: str | int) -> bytes:
    return orjson.dumps(parts)


def prefix(*parts: str | int) -> bytes:
    # '["ns","scope"]' -> '["ns","scope",' : matches every longer key, and only those.
    return orjson.dumps(parts)[:-1] + b","


def _load(raw: bytes | None) -> Any:
    return None if raw is None else orjson.loads(raw)


def ref_json(ref: ArtifactRef) -> list[Any]:
    return [ref.family, ref.artifact_id, ref.revision]


def ref_from_json(value: list[Any]) -> ArtifactRef:
    return ArtifactRef.model_construct(family=value[0], artifact_id=value[1], revision=value[2])


@dataclass
class ScopeMeta:
    last_position: int = 0
    selected: int = 0
    recurred: int = 0
    avoided: int = 0
    unknown: int = 0


@dataclass(frozen=True)
class StoredSource:
    position: int
    kind: str | None
    digest: str
    # task-outcome: does it carry failure evidence (admission rule 1)?
    failure_evidence: bool = False
    # handoff-receipt: the Handoff revision an accepted, exact receipt selected.
    linkable_handoff: list[Any] | None = None


@dataclass(frozen=True)
class StoredArtifact:
    position: int
    digest: str
    # experience with a failure block:
    signature_key: str | None = None
    repair_surface: str | None = None
    condition_key: str | None = None
    check_key: str | None = None
    content: dict[str, Any] | None = None
    # handoff: exact Experience revisions cited in state[] and next_action.
    cites: list[list[Any]] | None = None


@dataclass(frozen=True)
class HeadRow:
    revision: int
    signature_key: str | None = None
    repair_surface: str | None = None
    condition_key: str | None = None
    check_key: str | None = None


@dataclass
class Group:
    """Derived per-(revision, signature key) view: counts and the terminal streak."""

    selected: int = 0
    recurred: int = 0
    avoided: int = 0
    streak: int = 0
    # Task Outcomes of the current streak's recurrences, newest last (<= 32 kept).
    streak_sources: list[list[str]] = field(default_factory=list)


class State:
    """Typed access to one transaction's view of the store."""

    def __init__(self, txn: Transaction) -> None:
        self.txn = txn

    # -- per-scope bookkeeping ----------------------------------------------------
    def scope(self, scope_id: str) -> ScopeMeta:
        raw = _load(self.txn.get(key("scope", scope_id)))
        return ScopeMeta(**raw) if raw else ScopeMeta()

    def put_scope(self, scope_id: str, meta: ScopeMeta) -> None:
        self.txn.put(key("scope", scope_id), orjson.dumps(meta.__dict__))

    def scope_ids(self) -> Iterator[str]:
        for raw_key, _ in self.txn.iterate_prefix(b'["scope",'):
            yield orjson.loads(raw_key)[1]

    def entry_digest(self, scope_id: str, position: int) -> str | None:
        raw = self.txn.get(key("pos", scope_id, position))
        return None if raw is None else raw.decode()

    def put_entry_digest(self, scope_id: str, position: int, entry_digest: str) -> None:
        self.txn.put(key("pos", scope_id, position), entry_digest.encode())

    # -- Sources ----------------------------------------------------------------
    def source(self, scope_id: str, ref: SourceRef) -> StoredSource | None:
        raw = _load(self.txn.get(key("src", scope_id, ref.source_type, ref.source_id)))
        return None if raw is None else StoredSource(**raw)

    def put_source(self, scope_id: str, ref: SourceRef, stored: StoredSource) -> None:
        self.txn.put(key("src", scope_id, ref.source_type, ref.source_id), orjson.dumps(stored.__dict__))

    # -- Artifact revisions and heads ----------------------------------------------
    def artifact(self, scope_id: str, ref: ArtifactRef) -> StoredArtifact | None:
        raw = _load(self.txn.get(key("art", scope_id, ref.family, ref.artifact_id, ref.revision)))
        return None if raw is None else StoredArtifact(**raw)

    def put_artifact(self, scope_id: str, ref: ArtifactRef, stored: StoredArtifact) -> None:
        self.txn.put(key("art", scope_id, ref.family, ref.artifact_id, ref.revision), orjson.dumps(stored.__dict__))

    def head(self, scope_id: str, family: str, artifact_id: str) -> int | None:
        raw = _load(self.txn.get(key("head", scope_id, family, artifact_id)))
        return None if raw is None else int(raw["revision"])

    def put_head(self, scope_id: str, ref: ArtifactRef, stored: StoredArtifact) -> None:
        # The head row carries the failure bindings so scope-heads matching is one scan.
        value = {
            "revision": ref.revision,
            "signature_key": stored.signature_key,
            "repair_surface": stored.repair_surface,
            "condition_key": stored.condition_key,
            "check_key": stored.check_key,
        }
        self.txn.put(key("head", scope_id, ref.family, ref.artifact_id), orjson.dumps(value))

    def heads(self, scope_id: str, family: str) -> Iterator[tuple[ArtifactRef, HeadRow]]:
        for raw_key, raw_value in self.txn.iterate_prefix(prefix("head", scope_id, family)):
            artifact_id = orjson.loads(raw_key)[3]
            row = HeadRow(**orjson.loads(raw_value))
            # Rows were validated on the way in; rebuilding refs unvalidated keeps scans cheap.
            yield ArtifactRef.model_construct(family=family, artifact_id=artifact_id, revision=row.revision), row

    # -- Failure-bearing Experience heads, one sorted index row per scope -----------------
    def failure_heads(self, scope_id: str) -> bytes:
        """``[[artifact_id, revision, key, surface, condition_key, check_key], ...]`` sorted.

        One row instead of a scan: every unlinked Task Outcome with a failure item
        freezes this set, while it changes only when an Experience head does.
        """
        return self.txn.get(key("xheads", scope_id)) or b"[]"

    def put_failure_heads(self, scope_id: str, rows: list[list[Any]]) -> None:
        self.txn.put(key("xheads", scope_id), orjson.dumps(sorted(rows, key=lambda row: (row[0], row[1]))))

    # -- Candidates -----------------------------------------------------------------
    def candidate_digest(self, scope_id: str, candidate_id: str) -> str | None:
        raw = self.txn.get(key("cand", scope_id, candidate_id))
        return None if raw is None else raw.decode()

    def put_candidate_digest(self, scope_id: str, candidate_id: str, value: str) -> None:
        self.txn.put(key("cand", scope_id, candidate_id), value.encode())

    # -- Derived groups -----------------------------------------------------------------
    def group(self, scope_id: str, ref: ArtifactRef, signature_key: str) -> Group:
        raw = _load(self.txn.get(key("grp", scope_id, *ref_json(ref), signature_key)))
        return Group(**raw) if raw else Group()

    def put_group(self, scope_id: str, ref: ArtifactRef, signature_key: str, group: Group) -> None:
        self.txn.put(key("grp", scope_id, *ref_json(ref), signature_key), orjson.dumps(group.__dict__))

    def groups(self, scope_id: str) -> Iterator[tuple[ArtifactRef, str, Group]]:
        for raw_key, raw_value in self.txn.iterate_prefix(prefix("grp", scope_id)):
            _, _, family, artifact_id, revision, signature_key = orjson.loads(raw_key)
            yield (
                ArtifactRef(family=family, artifact_id=artifact_id, revision=revision),
                signature_key,
                Group(**orjson.loads(raw_value)),
            )
