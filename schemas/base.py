"""Shared value configuration, references and text types."""

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from .constants import (
    MAX_ARTIFACT_FIELD_LENGTH,
    MAX_EXPERIENCE_FIELD_LENGTH,
    MAX_FAILURE_CUE_LENGTH,
    MAX_HANDOFF_TEXT_LENGTH,
    MAX_POSITION,
    MAX_SCOPE_ID_LENGTH,
    MAX_SOURCE_ID_LENGTH,
    MAX_SOURCE_TYPE_LENGTH,
    MAX_WORK_TEXT_LENGTH,
)
from .normalize import is_blank


class Value(BaseModel):
    """Immutable, closed wire value. Strict: JSON integers only, no coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _require_text(value: str) -> str:
    # PowerContext rejects whitespace-only text everywhere it stores prose.
    if not value.strip():
        raise ValueError("must contain non-whitespace content")
    return value


def _require_key(value: str) -> str:
    # Contract: a cue, condition or check subject that normalizes to "" is blank.
    if is_blank(value):
        raise ValueError("must not be blank after normalization")
    return value


ExperienceText = Annotated[
    str, Field(min_length=1, max_length=MAX_EXPERIENCE_FIELD_LENGTH), AfterValidator(_require_text)
]
# A condition is prose-sized but must still normalize to a usable binding.
ConditionText = Annotated[
    str, Field(min_length=1, max_length=MAX_EXPERIENCE_FIELD_LENGTH), AfterValidator(_require_key)
]
FailureCueText = Annotated[str, Field(min_length=1, max_length=MAX_FAILURE_CUE_LENGTH), AfterValidator(_require_key)]
WorkText = Annotated[str, Field(min_length=1, max_length=MAX_WORK_TEXT_LENGTH), AfterValidator(_require_text)]
HandoffText = Annotated[str, Field(min_length=1, max_length=MAX_HANDOFF_TEXT_LENGTH), AfterValidator(_require_text)]


ScopeId = Annotated[str, Field(min_length=1, max_length=MAX_SCOPE_ID_LENGTH)]
Position = Annotated[int, Field(ge=1, le=MAX_POSITION)]


class SourceRef(Value):
    source_type: Annotated[str, Field(min_length=1, max_length=MAX_SOURCE_TYPE_LENGTH)]
    source_id: Annotated[str, Field(min_length=1, max_length=MAX_SOURCE_ID_LENGTH)]

    def identity(self) -> tuple[str, str]:
        return (self.source_type, self.source_id)


class ArtifactRef(Value):
    family: Annotated[str, Field(min_length=1, max_length=MAX_ARTIFACT_FIELD_LENGTH)]
    artifact_id: Annotated[str, Field(min_length=1, max_length=MAX_ARTIFACT_FIELD_LENGTH)]
    revision: Annotated[int, Field(ge=1, le=MAX_POSITION)]

    def identity(self) -> tuple[str, str, int]:
        return (self.family, self.artifact_id, self.revision)
