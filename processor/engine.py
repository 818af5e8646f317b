"""The pure, deterministic engine: (state, next journal entry) -> output records + state changes.

No I/O, no clock, no randomness. The embedded runner and the Faust agent both
drive exactly this class; only the store behind the ``Transaction`` differs.

Idempotence rests on one rule: an entry changes state only when its position is
above the scope's last accepted position, and that position is recorded in the
same transaction as the entry's effects. A re-delivered entry is recognised by
the digest stored for its position and produces nothing.
"""

from dataclasses import dataclass
from typing import TypeVar

import orjson
from pydantic import ValidationError

from recurrence.processor import deadletters
from recurrence.processor.admission import AdmissionGate
from recurrence.processor.ledger import OutcomeLedger, handoff_cites
from recurrence.processor.state import ScopeMeta, State, StoredArtifact, StoredSource, ref_json
from recurrence.processor.statistics import scope_statistics
from recurrence.processor.store import Transaction
from recurrence.schemas.base import ArtifactRef
from recurrence.schemas.canonical import digest
from recurrence.schemas.constants import (
    DEFAULT_TOP_REVISIONS,
    EXPERIENCE_FAMILY,
    HANDOFF_FAMILY,
    HANDOFF_RECEIPT_SOURCE_KIND,
    RECURRENCE_REVIEW_STREAK_THRESHOLD,
    TASK_OUTCOME_SOURCE_KIND,
)
from recurrence.schemas.journal import (
    JOURNAL_ENTRY,
    ArtifactEntry,
    CandidateEntry,
    ExperienceArtifact,
    HandoffArtifact,
    SourceEntry,
    artifact_ref,
)
from recurrence.schemas.normalize import normalize
from recurrence.schemas.powercontext import HandoffReceipt, TaskOutcome
from recurrence.schemas.records import DeadLetterRecord, OutputRecord
from recurrence.schemas.statistics import ScopeStatistics

_Content = TypeVar("_Content", TaskOutcome, HandoffReceipt)

_EXPECTED_SCHEMA = {
    TASK_OUTCOME_SOURCE_KIND: "powercontext.task-outcome.v1",
    HANDOFF_RECEIPT_SOURCE_KIND: "powercontext.handoff-receipt.v1",
}


@dataclass(frozen=True)
class EngineConfig:
    review_threshold: int = RECURRENCE_REVIEW_STREAK_THRESHOLD
    top_revisions: int = DEFAULT_TOP_REVISIONS

    def __post_init__(self) -> None:
        if self.review_threshold < 1:
            raise ValueError("review_threshold must be at least 1")
        if self.top_revisions < 0:
            raise ValueError("top_revisions must be non-negative")


class _RejectedEntryError(Exception):
    """An entry that is readable but must not consume its position."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(code)
        self.code = code
        self.detail = detail


class Engine:
    def __init__(self, txn: Transaction, config: EngineConfig | None = None) -> None:
        self.txn = txn
        self.config = config or EngineConfig()
        self.state = State(txn)
        self.ledger = OutcomeLedger(self.state, self.config.review_threshold)
        self.admission = AdmissionGate(self.state)

    def process(self, raw: bytes) -> list[OutputRecord]:
        """Apply one raw journal entry; changes stay pending in the transaction."""
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return [deadletters.dead_letter(raw, deadletters.INVALID_ENCODING, "entry is not UTF-8; raw is base64")]
        try:
            entry = JOURNAL_ENTRY.validate_json(raw)
        except ValidationError as error:
            return [deadletters.dead_letter(raw, deadletters.classify(error), deadletters.describe(error))]

        scope_id, position = entry.scope_id, entry.position
        meta = self.state.scope(scope_id)
        entry_digest = digest(entry.model_dump(mode="json", by_alias=True))
        if position <= meta.last_position:
            prior = self.state.entry_digest(scope_id, position)
            if prior == entry_digest:
                return []  # re-delivery of an applied entry
            code = deadletters.POSITION_OUT_OF_ORDER if prior is None else deadletters.POSITION_CONFLICT
            detail = (
                f"position {position} was never accepted and the scope is at {meta.last_position}"
                if prior is None
                else f"position {position} was accepted with different content"
            )
            return [deadletters.dead_letter(raw, code, detail, scope_id, position)]

        # Every rejection is raised before the handler writes anything, so a
        # rejected entry leaves the transaction untouched.
        try:
            if isinstance(entry, SourceEntry):
                records = self._source(entry, meta)
            elif isinstance(entry, ArtifactEntry):
                records = self._artifact(entry)
            else:
                records = self._candidate(entry)
        except _RejectedEntryError as rejected:
            return [deadletters.dead_letter(raw, rejected.code, rejected.detail, scope_id, position)]
        meta.last_position = position
        self.state.put_scope(scope_id, meta)
        self.state.put_entry_digest(scope_id, position, entry_digest)
        return records

    # -- Sources -------------------------------------------------------------------
    def _source(self, entry: SourceEntry, meta: ScopeMeta) -> list[OutputRecord]:
        scope_id, ref, body = entry.scope_id, entry.source_ref, entry.source
        body_digest = digest(body.model_dump(mode="json", by_alias=True))
        existing = self.state.source(scope_id, ref)
        if existing is not None:
            if existing.digest == body_digest:
                return []  # the same immutable Source re-sent: no-op
            raise _RejectedEntryError(
                deadletters.IMMUTABLE_CONFLICT,
                f"source {ref.source_type}/{ref.source_id} was accepted at position {existing.position} "
                "with different content",
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
            self.state.put_source(scope_id, ref, StoredSource(entry.position, kind, body_digest, failure_evidence))
            return records
        if kind == HANDOFF_RECEIPT_SOURCE_KIND:
            receipt = self._parse(HandoffReceipt, body.content)
            linkable = (
                ref_json(receipt.selected_revision)
                if receipt.status == "accepted"
                and receipt.selection == "exact"
                and receipt.selected_revision is not None
                and receipt.selected_revision.family == HANDOFF_FAMILY
                else None
            )
            self.state.put_source(scope_id, ref, StoredSource(entry.position, kind, body_digest, False, linkable))
            return []
        self.state.put_source(scope_id, ref, StoredSource(entry.position, kind, body_digest))
        return []

    @staticmethod
    def _parse(model: type[_Content], content: str) -> _Content:
        try:
            return model.model_validate_json(content)
        except ValidationError as error:
            raise _RejectedEntryError(
                deadletters.INVALID_SOURCE_CONTENT, deadletters.describe(error, "source.content.")
            ) from None

    # -- Artifact revisions ----------------------------------------------------------
    def _artifact(self, entry: ArtifactEntry) -> list[OutputRecord]:
        scope_id, body = entry.scope_id, entry.artifact
        ref = artifact_ref(body)
        body_digest = digest(body.model_dump(mode="json", by_alias=True))
        existing = self.state.artifact(scope_id, ref)
        if existing is not None:
            if existing.digest == body_digest:
                return []
            raise _RejectedEntryError(
                deadletters.IMMUTABLE_CONFLICT,
                f"revision {ref.family}/{ref.artifact_id}@{ref.revision} was accepted at position "
                f"{existing.position} with different content",
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
                    content=body.content.model_dump(mode="json", by_alias=True),
                )
        elif isinstance(body, HandoffArtifact):
            stored = StoredArtifact(
                entry.position, body_digest, cites=handoff_cites(body.content.experience_citations())
            )
        self.state.put_artifact(scope_id, ref, stored)
        head = self.state.head(scope_id, ref.family, ref.artifact_id)
        if head is None or ref.revision > head:
            self.state.put_head(scope_id, ref, stored)
            if ref.family == EXPERIENCE_FAMILY:
                self._index_failure_head(scope_id, ref, stored)
        return []

    def _index_failure_head(self, scope_id: str, ref: ArtifactRef, stored: StoredArtifact) -> None:
        rows = [row for row in orjson.loads(self.state.failure_heads(scope_id)) if row[0] != ref.artifact_id]
        if stored.signature_key is not None:
            rows.append(
                [
                    ref.artifact_id,
                    ref.revision,
                    stored.signature_key,
                    stored.repair_surface,
                    stored.condition_key,
                    stored.check_key,
                ]
            )
        self.state.put_failure_heads(scope_id, rows)

    # -- Candidates ------------------------------------------------------------------
    def _candidate(self, entry: CandidateEntry) -> list[OutputRecord]:
        scope_id, candidate = entry.scope_id, entry.candidate
        body_digest = digest(candidate.model_dump(mode="json", by_alias=True))
        existing = self.state.candidate_digest(scope_id, candidate.candidate_id)
        if existing is not None:
            if existing == body_digest:
                return []
            raise _RejectedEntryError(
                deadletters.IMMUTABLE_CONFLICT,
                f"candidate {candidate.candidate_id} was already decided with different content",
            )
        self.state.put_candidate_digest(scope_id, candidate.candidate_id, body_digest)
        return [self.admission.decide(scope_id, candidate)]

    # -- Read surface -------------------------------------------------------------------
    def statistics(self, scope_id: str | None = None, top: int | None = None) -> list[ScopeStatistics]:
        limit = self.config.top_revisions if top is None else top
        scopes = [scope_id] if scope_id is not None else sorted(self.state.scope_ids())
        known = [s for s in scopes if self.state.scope(s).last_position > 0]
        return [scope_statistics(self.state, s, self.config.review_threshold, limit) for s in known]


def is_dead_letter(record: OutputRecord) -> bool:
    return isinstance(record, DeadLetterRecord)
