"""The repair loop's read surface over a state: history, retirement suggestions, trends.

Reads the engine's rows only (``State``): the artifact revisions, the groups and the
yield marks the ledger writes (``core.yieldmarks``); never the journal or the ledger
file. ``recurrence history|suggestions|trends``, ``recurrence serve`` and the Kafka
worker call these same functions over their state (the worker over the partition that
holds the scope), so the answers cannot differ between the runners.

A state whose marks do not account for every counter of its groups (written by a
release before the marks existed) is refused, never answered from part of the
evidence: ``IncompleteMarksError``, exit 2 / HTTP 409.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from .core.history import REPAIR_MIN_SELECTIONS, RevisionFacts, artifact_history
from .core.retirement import MAX_RULE_THRESHOLD, RetirementRules, suggestions, what_if
from .core.state import ArtifactKey, State
from .core.trends import DEFAULT_TREND_WINDOW, MAX_TREND_WINDOW, scope_trends
from .core.yieldmarks import Mark, Yield
from .exceptions import UnusableError
from .explain import NotFoundError
from .host.printable import echoed

EXPERIENCE = "experience"


class IncompleteMarksError(UnusableError):
    """The state's yield marks do not cover its counters."""


def _incomplete(scope_id: str, what: str) -> IncompleteMarksError:
    return IncompleteMarksError(
        f"the state of scope {echoed(scope_id)} has {what} that its yield marks do not cover (it was built by a "
        "release before them); replay the journal into a new --state to answer this"
    )


def _marks(state: State, scope_id: str, ref: ArtifactKey) -> tuple[Mark, ...]:
    found = (Mark.decode(position, flags) for _, position, flags in state.marks(scope_id, *ref))
    return tuple(sorted(found, key=lambda m: m.position))


def _checked(state: State, scope_id: str, facts: RevisionFacts) -> RevisionFacts:
    """``facts`` when its marks add up to its group's counters; refused otherwise."""
    group = None if facts.signature_key is None else state.group(scope_id, facts.ref, facts.signature_key)
    folded = Yield.of(facts.marks)
    counters = (0, 0, 0) if group is None else (group.selected, group.recurred, group.avoided)
    if (folded.selected, folded.recurred, folded.avoided) != counters:
        raise _incomplete(scope_id, f"observations of {facts.ref[0]}/{echoed(facts.ref[1])}@{facts.ref[2]}")
    return facts


def _facts(state: State, scope_id: str, ref: ArtifactKey) -> RevisionFacts | None:
    stored = state.artifact(scope_id, ref)
    if stored is None:
        return None
    facts = RevisionFacts(
        ref, stored.position, stored.signature_key, stored.repair_surface, _marks(state, scope_id, ref)
    )
    return _checked(state, scope_id, facts)


def _known_scope(state: State, scope_id: str) -> int:
    meta = state.scope(scope_id)
    if meta is None or meta.last_position == 0:
        raise NotFoundError(f"no accepted entry for scope {echoed(scope_id)}")
    return meta.last_position


def history(
    state: State,
    scope_id: str,
    family: str,
    artifact_id: str,
    review_threshold: int,
    min_selections: int = REPAIR_MIN_SELECTIONS,
) -> dict[str, Any]:
    """One artifact's history in one scope (``core.history``)."""
    _known_scope(state, scope_id)
    revisions = []
    for ref, _ in state.revisions(scope_id, family, artifact_id):
        facts = _facts(state, scope_id, ref)
        assert facts is not None
        revisions.append(facts)
    if not revisions:
        raise NotFoundError(f"no revision of {echoed(family)}/{echoed(artifact_id)} in scope {echoed(scope_id)}")
    return artifact_history(scope_id, family, artifact_id, revisions, review_threshold, min_selections)


def scopes_with(state: State, family: str, artifact_id: str) -> list[str]:
    """The scopes holding a revision of the artifact, sorted (the CLI's ``history`` without ``--scope``)."""
    found = []
    for scope_id in sorted(state.scope_ids()):
        if next(state.revisions(scope_id, family, artifact_id), None) is not None:
            found.append(scope_id)
    return found


def _heads(state: State, scope_id: str) -> Iterator[RevisionFacts]:
    for ref in state.heads(scope_id, EXPERIENCE):
        facts = _facts(state, scope_id, ref)
        if facts is not None and facts.signature_key is not None:
            yield facts


def scope_suggestions(state: State, scope_id: str, rules: RetirementRules) -> dict[str, Any]:
    _known_scope(state, scope_id)
    return suggestions(scope_id, _heads(state, scope_id), rules)


def suggestions_what_if(
    state: State, scopes: Iterable[str], thresholds: Sequence[int], unknown_percent: int
) -> dict[str, Any]:
    """How many suggestions each rule would make at each count threshold, over ``scopes`` together."""
    listed = list(scopes)
    for scope_id in listed:
        _known_scope(state, scope_id)
    heads = (facts for scope_id in listed for facts in _heads(state, scope_id))
    return {
        "scopes": len(listed),
        "unknown_percent": unknown_percent,
        "what_if": what_if(heads, thresholds, unknown_percent),
    }


def trends(state: State, scope_id: str, window: int) -> dict[str, Any]:
    """One scope's trend (``core.trends``), streamed from its marks: memory holds the windows, not the marks."""
    last_position = _known_scope(state, scope_id)
    signature_keys: dict[ArtifactKey, str | None] = {}
    folded = Yield()

    def marks() -> Iterator[tuple[ArtifactKey, str | None, Mark]]:
        for ref, position, flags in state.marks(scope_id):
            if ref not in signature_keys:
                stored = state.artifact(scope_id, ref)
                signature_keys[ref] = None if stored is None else stored.signature_key
            mark = Mark.decode(position, flags)
            folded.add(mark)
            yield ref, signature_keys[ref], mark

    trend = scope_trends(scope_id, last_position, window, marks())
    meta = state.scope(scope_id)
    assert meta is not None
    if (folded.selected, folded.recurred, folded.avoided) != (meta.selected, meta.recurred, meta.avoided):
        raise _incomplete(scope_id, "observations")
    return trend


@dataclass(frozen=True)
class RepairQuery:
    """One question of the HTTP read surface about one scope (``/scopes/{scope_id}/history|suggestions|trends``),
    parsed once: ``answer`` runs it over a state, a worker forwards it to the scope's owner as ``path`` and
    ``params``."""

    kind: Literal["history", "suggestions", "trends"]
    family: str = EXPERIENCE
    artifact_id: str = ""
    min_selections: int = REPAIR_MIN_SELECTIONS
    rules: RetirementRules = field(default_factory=RetirementRules)
    window: int = DEFAULT_TREND_WINDOW
    csv: bool = False

    @classmethod
    def of(cls, kind: str, tail: str | None, query: Mapping[str, str]) -> "RepairQuery":
        """From a request's path tail (``family/artifact_id`` for history) and query; ValueError when bad."""

        def number(name: str, default: int, top: int = MAX_RULE_THRESHOLD) -> int:
            raw = query.get(name)
            if raw is None:
                return default
            if not raw.isdigit() or not 1 <= int(raw) <= top:
                raise ValueError(f"{name} must be an integer 1..{top}")
            return int(raw)

        if kind == "history":
            family, slash, artifact_id = (tail or "").partition("/")
            if not slash or not family or not artifact_id:
                raise ValueError("the path must name family/artifact_id, for example experience/E7")
            return cls("history", family, artifact_id, min_selections=number("min_selections", REPAIR_MIN_SELECTIONS))
        if kind == "suggestions":
            defaults = RetirementRules()
            values = {
                name: number(name, getattr(defaults, name), 100 if name == "unknown_percent" else MAX_RULE_THRESHOLD)
                for name in RetirementRules.names()
            }
            return cls("suggestions", rules=RetirementRules(**values))
        fmt = query.get("format", "json")
        if fmt not in ("json", "csv"):
            raise ValueError("format must be json or csv")
        return cls("trends", window=number("window", DEFAULT_TREND_WINDOW, MAX_TREND_WINDOW), csv=fmt == "csv")

    def path(self, scope_id: str) -> str:
        scope = quote(scope_id, safe="")
        if self.kind == "history":
            return f"/scopes/{scope}/history/{quote(self.family, safe='')}/{quote(self.artifact_id, safe='')}"
        return f"/scopes/{scope}/{self.kind}"

    def params(self) -> dict[str, str]:
        """The query a forwarded request carries (always JSON: the asking worker renders the format)."""
        if self.kind == "history":
            return {"min_selections": str(self.min_selections)}
        if self.kind == "suggestions":
            return {name: str(value) for name, value in self.rules.as_json().items()}
        return {"window": str(self.window)}


def answer(state: State, scope_id: str, query: RepairQuery, review_threshold: int) -> dict[str, Any]:
    """The JSON body of ``query`` over one scope of ``state`` (NotFoundError, IncompleteMarksError,
    WindowTooSmallError)."""
    if query.kind == "history":
        return history(state, scope_id, query.family, query.artifact_id, review_threshold, query.min_selections)
    if query.kind == "suggestions":
        return scope_suggestions(state, scope_id, query.rules)
    return trends(state, scope_id, query.window)
