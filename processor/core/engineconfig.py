"""The engine's settings, declared once: type, default, bounds, environment variable and help.

Both command lines build their flags from this model: ``recurrence replay``
(``add_flags`` / ``from_flags`` here) and the Kafka worker, whose
``WorkerOptions`` takes each field through ``worker_field``. A value is
checked against its bounds before anything is created or written (a state
stamped with a value the engine then refuses could never be used again), and
a bad one is one line naming the flag and its range.

The settings derived state depends on are *pinned*: written into the state's
header on creation and compared on every later run (``stateheader``).
"""

import argparse
from typing import Any, Final

from annotated_types import Ge, Le
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from ...schemas.constants import DEFAULT_PATTERN_SCOPES, DEFAULT_TOP_REVISIONS, RECURRENCE_REVIEW_STREAK_THRESHOLD
from ..exceptions import SettingsError

#: How many scopes and revisions a pattern row lists; a pattern threshold above it could never be reached.
MAX_LISTED: Final = 64
#: The settings derived state depends on: fixed for the life of a state.
PINNED: Final = ("review_threshold", "pattern_scopes")


def _setting(env: str, metavar: str) -> dict[str, Any]:
    return {"env": env, "metavar": metavar}


class EngineConfig(BaseModel):
    """What the engine and its runners are told; frozen, unknown names refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    review_threshold: int = Field(
        RECURRENCE_REVIEW_STREAK_THRESHOLD,
        ge=1,
        le=1000,
        description="terminal recurrence streak that proposes a review (RECURRENCE_REVIEW_STREAK_THRESHOLD)",
        json_schema_extra=_setting("RECURRENCE_REVIEW_STREAK_THRESHOLD", "N"),
    )
    pattern_scopes: int = Field(
        DEFAULT_PATTERN_SCOPES,
        ge=1,
        le=MAX_LISTED,
        description="suggest a cross-scope pattern when a signature recurs in this many scopes",
        json_schema_extra=_setting("RECURRENCE_PATTERN_SCOPES", "K"),
    )
    top_revisions: int = Field(
        DEFAULT_TOP_REVISIONS,
        ge=0,
        le=10_000,
        description="revisions listed per scope in the statistics (top_revisions)",
        json_schema_extra=_setting("RECURRENCE_TOP_REVISIONS", "N"),
    )

    def pinned(self) -> dict[str, int]:
        """The settings derived state depends on: fixed for the life of a state."""
        return {name: getattr(self, name) for name in PINNED}


def flag_name(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _info(name: str) -> FieldInfo:
    return EngineConfig.model_fields[name]


def _extra(name: str) -> dict[str, Any]:
    extra = _info(name).json_schema_extra
    return extra if isinstance(extra, dict) else {}


def bounds(name: str) -> tuple[int, int]:
    """The inclusive range a setting accepts."""
    low: Any = next(rule.ge for rule in _info(name).metadata if isinstance(rule, Ge))
    high: Any = next(rule.le for rule in _info(name).metadata if isinstance(rule, Le))
    return int(low), int(high)


def describe_range(name: str) -> str:
    low, high = bounds(name)
    return f"{flag_name(name)} must be an integer from {low} to {high}"


def check(name: str, value: object) -> int:
    """``value`` as the setting ``name`` accepts it, or SettingsError naming the flag and its range."""
    low, high = bounds(name)
    try:
        number = int(str(value).strip(), 10) if not isinstance(value, int) else value
    except ValueError:
        raise SettingsError(f"{describe_range(name)} (got {str(value)[:40]!r})") from None
    if isinstance(number, bool) or not low <= number <= high:
        raise SettingsError(f"{describe_range(name)} (got {number})")
    return number


def add_flags(parser: argparse.ArgumentParser, names: tuple[str, ...], note: str = "") -> None:
    """A flag per named setting; values are checked by ``from_flags`` (one line, exit 2), not by argparse."""
    for name in names:
        info = _info(name)
        low, high = bounds(name)
        parser.add_argument(
            flag_name(name),
            dest=name,
            default=None,
            metavar=_extra(name).get("metavar"),
            help=f"{info.description}; {low}..{high}{note} (default {info.default})".replace("%", "%%"),
        )


def from_flags(args: argparse.Namespace, names: tuple[str, ...]) -> EngineConfig:
    """The settings the command line gave (checked one by one, so the error names the flag), defaults else."""
    given = {name: check(name, getattr(args, name)) for name in names if getattr(args, name, None) is not None}
    try:
        return EngineConfig(**given)
    except ValidationError as error:  # pragma: no cover - every field was checked above
        raise SettingsError(f"invalid engine settings: {error.errors()[0]['msg']}") from None


def worker_field(name: str, suffix: str = "") -> Any:
    """The setting as a field of a pydantic-settings model: same default, bounds and help; its env alias."""
    info = _info(name)
    low, high = bounds(name)
    return Field(
        info.default,
        ge=low,
        le=high,
        validation_alias=_extra(name)["env"],
        description=f"{info.description}{suffix}",
        json_schema_extra={"metavar": _extra(name).get("metavar"), "short": None, "cli": True},
    )
