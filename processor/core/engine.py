"""The pure, deterministic engine: (state, next journal entry) -> output records + state changes.

No I/O, no clock, no randomness. The embedded runner and the Kafka worker both
drive exactly this class; only the store behind the ``Transaction`` differs.

Idempotence rests on one rule: an entry changes state only when its position is
above the scope's last accepted position, and that position is recorded in the
same transaction as the entry's effects. A re-delivered entry is recognised by
the digest stored for its position and produces nothing.

Pydantic is the boundary: an entry (and a Source's content) is validated once;
from there on the engine works on plain values whose invariants it keeps, and
builds its records directly as ledger lines (``records``).

No entry can stop the stream: each runs inside an entry savepoint, and any
exception while applying it discards everything the entry staged and becomes
an ``internal_error`` dead letter naming only the exception's class. A store
that fails (``StateDirError``: a corrupt block, a full disk) is not the entry's
fault: it stops the run, and the entry is never dead-lettered for it.
"""

import hashlib
import logging
import math
from typing import Any

import orjson
from pydantic import ValidationError

from ...schemas.canonical import digest
from ...schemas.constants import (
    EXPERIENCE_FAMILY,
    HANDOFF_FAMILY,
    HANDOFF_RECEIPT_SOURCE_KIND,
    TASK_OUTCOME_SOURCE_KIND,
)
from ...schemas.journal import (
    JOURNAL_ENTRY,
    ArtifactEntry,
    CandidateEntry,
    ExperienceArtifact,
    HandoffArtifact,
    OtherArtifact,
    SourceEntry,
)
from ...schemas.normalize import normalize
from ...schemas.powercontext import HandoffReceipt, TaskOutcome
from ...schemas.statistics import ScopeStatistics
from ..exceptions import StateDirError
from ..store.base import Transaction
from . import deadletters
from .admission import AdmissionGate
from .engineconfig import EngineConfig
from .ledger import OutcomeLedger, handoff_cites
from .records import Emitted, Origin
from .state import (
    FailureHead,
    ScopeMeta,
    State,
    StoredArtifact,
    StoredSource,
)
from .statistics import scope_statistics

log = logging.getLogger("recurrence.engine")

_EXPECTED_SCHEMA = {
    TASK_OUTCOME_SOURCE_KIND: "powercontext.task-outcome.v1",
    HANDOFF_RECEIPT_SOURCE_KIND: "powercontext.handoff-receipt.v1",
}


class _RejectedEntryError(Exception):
    """An entry that is readable but must not consume its position."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(code)
        self.code = code
        self.detail = detail
        self.scope_id: str | None = None
        self.position: int | None = None


def _require_strict_json(raw: bytes) -> None:
    """NaN, Infinity and numbers that overflow a double are not JSON (contract, "Numbers")."""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise _RejectedEntryError(deadletters.INVALID_JSON, deadletters.not_json(error)) from None


def _non_finite(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return not math.isfinite(value)
    if kind is dict:
        items = value.values()
    elif kind is list:
        items = value
    else:
        return False
    # A loop, not ``any`` over a generator, and no call for a plain leaf: the metadata of every
    # Source goes through here.
    for item in items:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if _non_finite(item):
            return True
    return False


def _free_form_has_non_finite(entry: SourceEntry | ArtifactEntry | CandidateEntry) -> bool:
    """The validating parser reads NaN and Infinity into the only untyped places."""
    if isinstance(entry, SourceEntry):
        return _non_finite(entry.source.metadata)
    if isinstance(entry, CandidateEntry):
        return _non_finite(entry.candidate.proposal)
    artifact = entry.artifact
    return isinstance(artifact, OtherArtifact) and _non_finite(artifact.content)


def _entry_digest(kind: str, identity: object, body_digest: str) -> bytes:
    """Internal identity of the entry accepted at a (scope, position): equal exactly when the validated
    entries are equal (the scope and position are the row's key; identity is a str or a tuple of str/int)."""
    return hashlib.sha256(orjson.dumps([kind, identity, body_digest])).digest()


class Engine:
    def __init__(
        self, txn: Transaction, config: EngineConfig | None = None, track_statistics_rows: bool = False
    ) -> None:
        self.txn = txn
        self.config = config or EngineConfig()
        self.state = State(txn, track_statistics_rows)  # the worker's statistics step reads them
        self.ledger = OutcomeLedger(self.state, self.config.review_threshold)
        self.admission = AdmissionGate(self.state)

    def process(self, raw: bytes, origin: Origin) -> list[Emitted]:
        """Apply one raw journal entry; its changes join the transaction only if it is applied whole."""
        txn = self.txn
        txn.begin_entry()
        try:
            records = self._apply(raw, origin)
        except _RejectedEntryError as rejected:
            txn.abort_entry()
            return [self._rejected(raw, origin, rejected)]
        except StateDirError:
            # The store failed, not the entry: a valid entry is never dead-lettered for it (the run stops).
            txn.abort_entry()
            raise
        except Exception as error:
            txn.abort_entry()
            # The class only: an exception's text may quote the entry.
            log.error("internal error %s applying the entry from %s; dead-lettered", type(error).__name__, origin)
            return [
                deadletters.rejected(
                    raw,
                    origin,
                    deadletters.INTERNAL_ERROR,
                    f"{type(error).__name__} while applying the entry; none of its effects were kept",
                )
            ]
        txn.end_entry()
        return records

    @staticmethod
    def _rejected(raw: bytes, origin: Origin, rejected: _RejectedEntryError) -> Emitted:
        return deadletters.rejected(raw, origin, rejected.code, rejected.detail, rejected.scope_id, rejected.position)

    def _apply(self, raw: bytes, origin: Origin) -> list[Emitted]:
        if not raw.isascii():  # an ASCII line is UTF-8: a scan instead of decoding a copy
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _RejectedEntryError(deadletters.INVALID_ENCODING, "entry is not UTF-8; raw is base64") from None
        try:
            entry = JOURNAL_ENTRY.validate_json(raw)
        except ValidationError as error:
            code = deadletters.classify(error)
            if code != deadletters.INVALID_JSON:
                _require_strict_json(raw)  # a NaN in a typed field is still not JSON
            raise _RejectedEntryError(code, deadletters.describe(error)) from None
        if _free_form_has_non_finite(entry):
            _require_strict_json(raw)
        scope_id, position = entry.scope_id, entry.position
        try:
            return self._accept(entry, scope_id, position, origin)
        except _RejectedEntryError as rejected:
            rejected.scope_id, rejected.position = scope_id, position
            raise

    def _accept(
        self, entry: SourceEntry | ArtifactEntry | CandidateEntry, scope_id: str, position: int, origin: Origin
    ) -> list[Emitted]:
        state = self.state
        scope_key, current = state.scope_row(scope_id)
        last = 0 if current is None else current.last_position
        if isinstance(entry, SourceEntry):
            body = entry.source
            ref = (entry.source_ref.source_type, entry.source_ref.source_id)
            body_digest = digest(
                {
                    "name": body.name,
                    "materialization": body.materialization,
                    "metadata": body.metadata,
                    "content": body.content,
                }
            )
            identity: object = ref
        elif isinstance(entry, ArtifactEntry):
            art = entry.artifact
            body_dump = art.model_dump(mode="json", by_alias=True)
            body_digest = digest(body_dump)
            identity = (art.family, art.artifact_id, art.revision)
        else:
            cand = entry.candidate
            body_digest = digest(cand.model_dump(mode="json", by_alias=True))
            identity = cand.candidate_id
        entry_digest = _entry_digest(entry.type, identity, body_digest)

        if position <= last:
            prior = state.entry_digest(scope_id, position)
            if prior == entry_digest:
                return []  # re-delivery of an applied entry
            if prior is None:
                raise _RejectedEntryError(
                    deadletters.POSITION_OUT_OF_ORDER,
                    f"position {position} was never accepted and the scope is at {last}",
                )
            raise _RejectedEntryError(
                deadletters.POSITION_CONFLICT, f"position {position} was accepted with different content"
            )

        meta = state.stage_scope(scope_key, current)
        if isinstance(entry, SourceEntry):
            records = self._source(entry, meta, body_digest)
        elif isinstance(entry, ArtifactEntry):
            records = self._artifact(entry, body_digest, body_dump)
        else:
            records = self._candidate(entry, body_digest)
        meta.last_position = position
        state.put_entry(scope_id, position, entry_digest, origin)
        return records

    # -- Sources -------------------------------------------------------------------
    def _source(self, entry: SourceEntry, meta: ScopeMeta, body_digest: str) -> list[Emitted]:
        scope_id, body = entry.scope_id, entry.source
        ref = (entry.source_ref.source_type, entry.source_ref.source_id)
        state = self.state
        row_key, existing = state.source_row(scope_id, ref)
        if existing is not None:
            if existing.digest == body_digest:
                return []  # the same immutable Source re-sent: no-op
            raise _RejectedEntryError(
                deadletters.IMMUTABLE_CONFLICT,
                f"this source_ref was accepted at position {existing.position} with different content",
            )
        kind = body.kind()
        expected = _EXPECTED_SCHEMA.get(kind or "")
        declared = body.metadata.get("schema")
        if expected is not None and declared is not None and declared != expected:
            raise _RejectedEntryError(
                deadletters.INVALID_SOURCE_CONTENT, f"metadata.schema must be {expected} for kind {kind}"
            )

        if kind == TASK_OUTCOME_SOURCE_KIND:
            outcome = self._parse(TaskOutcome, body.content)
            records, failure_evidence = self.ledger.process(scope_id, meta, ref, entry.position, outcome)
            state.put_source_row(row_key, StoredSource(entry.position, kind, body_digest, failure_evidence))
            return records
        if kind == HANDOFF_RECEIPT_SOURCE_KIND:
            receipt = self._parse(HandoffReceipt, body.content)
            selected = receipt.selected_revision
            linkable = (
                (selected.family, selected.artifact_id, selected.revision)
                if receipt.status == "accepted"
                and receipt.selection == "exact"
                and selected is not None
                and selected.family == HANDOFF_FAMILY
                else None
            )
            state.put_source_row(row_key, StoredSource(entry.position, kind, body_digest, False, linkable))
            return []
        state.put_source_row(row_key, StoredSource(entry.position, kind, body_digest))
        return []

    @staticmethod
    def _parse(model: type[TaskOutcome] | type[HandoffReceipt], content: str) -> Any:
        try:
            return model.model_validate_json(content)
        except ValidationError as error:
            raise _RejectedEntryError(
                deadletters.INVALID_SOURCE_CONTENT, deadletters.describe(error, "source.content.")
            ) from None

    # -- Artifact revisions ----------------------------------------------------------
    def _artifact(self, entry: ArtifactEntry, body_digest: str, body_dump: dict[str, Any]) -> list[Emitted]:
        scope_id, body = entry.scope_id, entry.artifact
        ref = (body.family, body.artifact_id, body.revision)
        existing = self.state.artifact(scope_id, ref)
        if existing is not None:
            if existing.digest == body_digest:
                return []
            raise _RejectedEntryError(
                deadletters.IMMUTABLE_CONFLICT,
                f"this revision was accepted at position {existing.position} with different content",
            )
        stored = StoredArtifact(entry.position, body_digest)
        if isinstance(body, ExperienceArtifact):
            failure = body.content.failure
            if failure is not None:
                stored = StoredArtifact(
                    entry.position,
                    body_digest,
                    signature_key=normalize(failure.signature.recall_cue),
                    repair_surface=failure.repair_surface,
                    condition_key=normalize(failure.verification.condition),
                    check_key=normalize(failure.verification.check_subject),
                    content=body_dump["content"],
                )
        elif isinstance(body, HandoffArtifact):
            stored = StoredArtifact(
                entry.position, body_digest, cites=handoff_cites(body.content.experience_citations())
            )
        state = self.state
        state.put_artifact(scope_id, ref, stored)
        head = state.head(scope_id, ref[0], ref[1])
        if head is None or ref[2] > head:
            state.put_head(scope_id, ref)
            if ref[0] == EXPERIENCE_FAMILY:
                self._index_failure_head(scope_id, ref[1], ref[2], stored)
        return []

    def _index_failure_head(self, scope_id: str, artifact_id: str, revision: int, stored: StoredArtifact) -> None:
        head = None
        if stored.signature_key is not None:
            assert stored.repair_surface and stored.condition_key and stored.check_key
            head = FailureHead(
                artifact_id,
                revision,
                stored.signature_key,
                stored.repair_surface,
                stored.condition_key,
                stored.check_key,
            )
        current = self.state.failure_heads(scope_id)
        if head is None and all(h.artifact_id != artifact_id for h in current.heads):
            return  # a failure-free head replacing a failure-free head: the index is unchanged
        self.state.put_failure_heads(scope_id, current.replace(artifact_id, head))

    # -- Candidates ------------------------------------------------------------------
    def _candidate(self, entry: CandidateEntry, body_digest: str) -> list[Emitted]:
        scope_id, candidate = entry.scope_id, entry.candidate
        existing = self.state.candidate_digest(scope_id, candidate.candidate_id)
        encoded = body_digest.encode()
        if existing is not None:
            if existing == encoded:
                return []
            raise _RejectedEntryError(
                deadletters.IMMUTABLE_CONFLICT, "this candidate_id was already decided with different content"
            )
        self.state.put_candidate_digest(scope_id, candidate.candidate_id, encoded)
        return [self.admission.decide(scope_id, candidate)]

    # -- Read surface -------------------------------------------------------------------
    def statistics(self, scope_id: str | None = None, top: int | None = None) -> list[ScopeStatistics]:
        limit = self.config.top_revisions if top is None else top
        scopes = [scope_id] if scope_id is not None else sorted(self.state.scope_ids())
        known = [s for s in scopes if (meta := self.state.scope(s)) is not None and meta.last_position > 0]
        return [scope_statistics(self.state, s, self.config.review_threshold, limit) for s in known]
