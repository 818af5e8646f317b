"""Response bodies of the HTTP read surface beyond the RFC's statistics (docs/web.md).

The OpenAPI document (``/openapi.json``) takes its response schemas from these
models and from ``ScopeStatistics``; the tests validate what the servers and
``recurrence explain --json`` produce against them, so the document cannot
drift from the answers. Explanations are open for additions (a link kind may
carry more fields than listed), every field listed is checked.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import ArtifactRef, Value

NonNegative = Annotated[int, Field(ge=0)]


class ErrorBody(Value):
    error: str


class ProbeBody(BaseModel):
    """``/livez`` carries ``status`` only; ``/readyz`` also the reasons, partitions and lag."""

    model_config = ConfigDict(extra="allow")
    status: str
    reasons: list[str] | None = None


class ExplainLink(BaseModel):
    """One link of an evidence chain; ``text`` is the human line, the other fields its parts."""

    model_config = ConfigDict(extra="allow")
    link: str
    text: str
    position: int | None = None


class Verdict(Value):
    verdict: Literal["recurred", "avoided", "unknown"]
    why: list[str]


class YieldCard(Value):
    """A revision in one scope: its counts, its terminal verdicts by position, its threshold crossings."""

    scope_id: str
    position: int
    head: bool
    head_revision: int | None
    failure_record: bool
    text: str | None = None
    signature_key: str | None = None
    repair_surface: str | None = None
    selected: NonNegative | None = None
    recurred: NonNegative | None = None
    avoided: NonNegative | None = None
    unknown: NonNegative | None = None
    streak: NonNegative | None = None
    history: list[tuple[int, Literal["recurred", "avoided"]]] | None = None
    crossings: list[tuple[int, str]] | None = None


class Explanation(Value):
    """``recurrence explain --json`` and ``GET /explain/{id}?format=json``."""

    kind: str
    id: str
    scope_id: str | None = None
    event: str | None = None
    result: str | None = None
    chain: list[ExplainLink] | None = None
    verdict: Verdict | None = None
    cards: list[YieldCard] | None = None
    record: dict[str, Any] | None = None


class DeadLetterCounts(Value):
    """Distinct dead letters (one per ``dead_letter_id``) by their stable code."""

    total: NonNegative
    by_code: dict[str, NonNegative]


class ListedDeadLetter(Value):
    """One dead letter as ``/dead-letters/{code}`` lists it: the record, its raw entry cut to ``RAW_SHOWN``."""

    dead_letter_id: str
    origin: dict[str, Any]
    scope_id: str | None = None
    position: int | None = None
    error: str
    detail: str
    raw: str
    #: the raw entry was longer than shown (``recurrence explain`` and the ledger have it whole)
    raw_cut: bool


class DeadLetterListing(Value):
    """The dead letters of one code, in journal order: the first ``limit`` of ``total``."""

    code: str
    total: NonNegative
    dead_letters: list[ListedDeadLetter]
    #: how many more than listed there are
    more: NonNegative


class PatternRevision(Value):
    scope_id: str
    artifact_ref: ArtifactRef


class PatternRow(Value):
    signature_key: str
    scope_count: NonNegative
    #: either list below has more than it shows (kept for the published shape; the next two say which)
    more_than_listed: bool
    #: more than ``scope_count`` scopes: a scope beyond the listed ones was seen
    scopes_more_than_listed: bool
    #: a revision beyond the listed ones was seen
    revisions_more_than_listed: bool
    scopes: list[str]
    revisions: list[PatternRevision]
    recurrences: NonNegative
    suggested: bool
    min_scopes: NonNegative


class PatternSuggestions(Value):
    """Every pattern row, as ``recurrence patterns --all --json`` lists them (suggested and below the threshold).

    Both runners have a source now (the embedded state's rows; a worker's patterns table, fanned out), so
    ``available`` is always true and ``note`` empty; both stay so the body keeps the shape it was published with.
    """

    available: bool
    note: str | None = None
    min_scopes: NonNegative | None = None
    patterns: list[PatternRow]


class JournalPoint(Value):
    """How much of the journal a state applied: lines and bytes (the embedded runner's checkpoint)."""

    line: NonNegative
    offset: NonNegative


class PartitionProgress(Value):
    """One journal partition a worker owns: its recorded position, its lag, whether it is served."""

    partition: NonNegative
    position: NonNegative | None  # the next journal offset the partition's state recorded; None: nothing yet
    lag: NonNegative | None  # high watermark - position; None: the high watermark is not known yet
    ready: bool


class Progress(Value):
    """``/progress``: how far the served state is, from the state (never the server's or the browser's clock).

    ``serve``: the journal checkpoint of the view it serves, the ledger's length and when that batch was
    committed (the writer's clock), whether it follows the state, and the readiness verdict of ``/readyz``
    (not ready while the state folder is gone or replaced). A worker: its journal partitions with their
    positions, lag and readiness, and the readiness verdict of ``/readyz``.
    """

    runner: Literal["embedded", "worker"]
    following: bool | None = None
    journal: JournalPoint | None = None
    ledger_bytes: NonNegative | None = None
    written_at: str | None = None
    status: str | None = None
    reasons: list[str] | None = None
    partitions: list[PartitionProgress] | None = None
    url: str | None = None
    entries_processed: NonNegative | None = None


class ScopeThresholdCounts(Value):
    """One scope's what-if at one threshold (contract section 5, ``by_scope``)."""

    scope_id: str
    review_proposals: NonNegative
    needing_review: NonNegative
    flags: NonNegative
    flags_then_avoided: NonNegative


class ThresholdCounts(Value):
    """What a replay at ``threshold`` would have produced (contract section 5): the totals, then per scope."""

    threshold: Annotated[int, Field(ge=1)]
    review_proposals: NonNegative
    needing_review: NonNegative
    flags: NonNegative
    flags_then_avoided: NonNegative
    by_scope: list[ScopeThresholdCounts]


class ThresholdWhatIf(Value):
    """``GET /tune``: ``recurrence tune --json``'s body for the state served, from the shadow counters the
    replay kept, with the threshold the state runs with and the scopes whose counters missed part of their
    history (replayed by a version that kept none: their counts are short until the state is rebuilt)."""

    review_threshold: Annotated[int, Field(ge=1)]
    incomplete_scopes: list[str]
    thresholds: list[ThresholdCounts]


class RepairSide(Value):
    """One side of a repair: a revision's whole-life counts and its recurrences per selection."""

    artifact_ref: ArtifactRef
    selected: NonNegative
    recurred_selected: NonNegative
    recurred: NonNegative
    avoided: NonNegative
    recurrences_per_selection: Annotated[float, Field(ge=0)] | None


class RepairEffect(Value):
    """Did the repair work? The revision before the Review proposal against the one that followed it."""

    proposal_position: Annotated[int, Field(ge=1)]
    before: RepairSide
    after: RepairSide
    minimum_selections: Annotated[int, Field(ge=1)]
    verdict: Literal["stopped", "fewer", "not_better", "too_little_evidence"]
    text: str


class RevisionHistory(Value):
    """One revision of an artifact: where it was accepted and head, its yield, its proposals, its repair effect."""

    artifact_ref: ArtifactRef
    explain: str
    position: Annotated[int, Field(ge=1)]
    signature_key: str | None
    repair_surface: str | None
    head_from: Annotated[int, Field(ge=1)] | None
    head_until: Annotated[int, Field(ge=1)] | None
    selected: NonNegative
    recurred: NonNegative
    recurred_selected: NonNegative  # the recurrences on Task Outcomes that selected this revision
    avoided: NonNegative
    unknown: NonNegative
    review_proposals: NonNegative
    terminal_recurred_streak: NonNegative
    needs_review: bool
    proposal_positions: list[Annotated[int, Field(ge=1)]]
    crossings_without_proposal: NonNegative
    repair_effect: RepairEffect | None


class ArtifactHistory(Value):
    """``recurrence history --json`` (one per scope) and ``GET /scopes/{scope_id}/history/{family}/{artifact_id}``."""

    scope_id: str
    family: str
    artifact_id: str
    head_revision: Annotated[int, Field(ge=1)] | None
    review_threshold: Annotated[int, Field(ge=1)]
    revisions: list[RevisionHistory]


class RetirementRulesBody(Value):
    min_selected: Annotated[int, Field(ge=1)]
    min_unselected_recurred: Annotated[int, Field(ge=1)]
    min_unknown: Annotated[int, Field(ge=1)]
    unknown_percent: Annotated[int, Field(ge=1, le=100)]


class RetirementSuggestion(Value):
    """A suggestion only: the rule, the head revision's counts, what to ``explain``."""

    rule: Literal["never_avoids", "never_selected", "unknown_binding"]
    artifact_ref: ArtifactRef
    signature_key: str
    repair_surface: str | None
    explain: str
    selected: NonNegative
    recurred: NonNegative
    recurred_selected: NonNegative
    avoided: NonNegative
    unknown: NonNegative
    review_proposals: NonNegative
    text: str


class RetirementSuggestions(Value):
    """``recurrence suggestions --json`` (one per scope) and ``GET /scopes/{scope_id}/suggestions``."""

    scope_id: str
    rules: RetirementRulesBody
    suggestions: list[RetirementSuggestion]


class TrendWindow(Value):
    first_position: Annotated[int, Field(ge=1)]
    last_position: Annotated[int, Field(ge=1)]
    selected: NonNegative
    recurred: NonNegative
    avoided: NonNegative
    unknown: NonNegative
    review_proposals: NonNegative


class RevisionTrend(Value):
    artifact_ref: ArtifactRef
    signature_key: str | None
    windows: list[TrendWindow]


class Trends(Value):
    """``recurrence trends`` (one per scope) and ``GET /scopes/{scope_id}/trends``: the scope's windows dense,
    each revision's only where it has marks."""

    scope_id: str
    window: Annotated[int, Field(ge=1)]
    last_position: NonNegative
    windows: list[TrendWindow]
    revisions: list[RevisionTrend]
