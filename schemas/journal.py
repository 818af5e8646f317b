"""Journal entries (contract section 1): one per Kafka record or ``.jsonl`` line."""

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, TypeAdapter

from .base import ArtifactRef, Position, ScopeId, SourceRef, Value
from .powercontext import ExperienceContent, HandoffContent


class SourceBody(Value):
    name: str
    materialization: str
    # Free-form by contract: only ``kind`` and ``schema`` are read.
    metadata: dict[str, Any] = Field(default_factory=dict)
    # JSON text exactly as PowerContext's ContentSource stores it.
    content: str

    def kind(self) -> str | None:
        kind = self.metadata.get("kind")
        return kind if isinstance(kind, str) else None


class Lineage(Value):
    sources: tuple[SourceRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()


class _ArtifactBodyBase(Value):
    artifact_id: Annotated[str, Field(min_length=1, max_length=128)]
    revision: Annotated[int, Field(ge=1, le=2**63 - 1)]
    lineage: Lineage = Field(default_factory=Lineage)


class ExperienceArtifact(_ArtifactBodyBase):
    family: Literal["experience"]
    content: ExperienceContent


class HandoffArtifact(_ArtifactBodyBase):
    family: Literal["handoff"]
    content: HandoffContent


class OtherArtifact(_ArtifactBodyBase):
    """A revision of another family (a Skill, say): citable evidence, content unread."""

    family: Annotated[str, Field(min_length=1, max_length=128)]
    content: Any


def _artifact_tag(value: Any) -> str:
    family = value.get("family") if isinstance(value, dict) else getattr(value, "family", None)
    return family if family in ("experience", "handoff") else "other"


ArtifactBody = Annotated[
    Annotated[ExperienceArtifact, Tag("experience")]
    | Annotated[HandoffArtifact, Tag("handoff")]
    | Annotated[OtherArtifact, Tag("other")],
    Discriminator(_artifact_tag),
]


def artifact_ref(body: ExperienceArtifact | HandoffArtifact | OtherArtifact) -> ArtifactRef:
    return ArtifactRef(family=body.family, artifact_id=body.artifact_id, revision=body.revision)


class CandidateBody(Value):
    candidate_id: Annotated[str, Field(min_length=1, max_length=256)]
    family: Literal["experience"]
    # Read by the admission gate, not here: a malformed failure block is an
    # admission decision ("dropped"), not an unreadable entry.
    proposal: dict[str, Any]
    sources: tuple[SourceRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    target: ArtifactRef | None = None
    reason: str | None = None


class SourceEntry(Value):
    scope_id: ScopeId
    position: Position
    type: Literal["source"]
    source_ref: SourceRef
    source: SourceBody


class ArtifactEntry(Value):
    scope_id: ScopeId
    position: Position
    type: Literal["artifact"]
    artifact: ArtifactBody


class CandidateEntry(Value):
    scope_id: ScopeId
    position: Position
    type: Literal["candidate"]
    candidate: CandidateBody


JournalEntry = Annotated[SourceEntry | ArtifactEntry | CandidateEntry, Field(discriminator="type")]
JOURNAL_ENTRY: TypeAdapter[SourceEntry | ArtifactEntry | CandidateEntry] = TypeAdapter(JournalEntry)
