"""The RFC's read surface: per-scope RecurrenceStatistics (contract section 3)."""

from typing import Annotated

from pydantic import Field

from .base import ArtifactRef, ScopeId, Value

NonNegative = Annotated[int, Field(ge=0)]


class RecurrenceStreak(Value):
    artifact_ref: ArtifactRef
    signature_key: str
    terminal_recurred_streak: NonNegative


class RecurrenceStatistics(Value):
    selected: NonNegative
    recurred: NonNegative
    avoided: NonNegative
    unknown: NonNegative
    unlinked_handoff_citations: NonNegative
    needing_review: NonNegative
    top_revisions: tuple[RecurrenceStreak, ...]


class ScopeStatistics(Value):
    scope_id: ScopeId
    recurrence: RecurrenceStatistics
