"""Per-scope statistics kept current from each batch's change set, for the worker's statistics topic.

After every batch the Kafka worker writes the statistics of each scope the
batch changed. Derived from a scan (``statistics.scope_statistics``) that
costs a walk over every Handoff head and every group row of the scope, which
grows with the scope's history. A ``ScopeSummary`` holds what the scan would
aggregate -- the recurring groups in rank order, the groups needing review,
how many current Handoff heads cite each Experience revision, and which of
those are coverage gaps -- and a batch updates it from the rows it changed:
O(rows changed), with the same per-row rules (``statistics``) as the scan, so
the result is the scan's, byte for byte.

A summary is trusted only when it provably describes the state the batch
started from: it records the scope's ``last_position`` it was built at, and
that must equal the scope's committed ``last_position`` before the batch.
Every change to a scope's rows advances that position in the same entry, and
a partition's state only ever holds states of one journal's history, so equal
positions mean equal rows. Anything else -- a worker restart (nothing is
cached), a rebalance or restore that moved the state (behind, ahead or
elsewhere), a batch that failed after its summary was updated -- shows as a
different position, and the summary is rebuilt from a scan instead.

Memory is bounded: ``StatisticsCache`` keeps summaries least recently used
first and holds at most ``capacity`` entries in all (an entry is one tracked
group, one cited revision or one gap: ~225 bytes each measured with
tracemalloc, so the default 100,000 is ~25 MB at most per worker). A scope
whose summary alone is larger is not cached; its statistics are then scanned
every batch, as before. Summaries of partitions the worker no longer owns are
not dropped at once but age out; should the partition come back, each is
used again only if its scope is still at the position it was built at.
"""

import bisect
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ...schemas.constants import EXPERIENCE_FAMILY, HANDOFF_FAMILY
from .state import ArtifactKey, Group, ScopeMeta, State
from .statistics import (
    RankKey,
    citation_gap,
    handoff_citations,
    is_recurring,
    needs_review,
    never_selected,
    rank,
    statistics_document,
    top_revisions,
)

#: Entries (tracked groups, cited revisions, gaps) all cached summaries hold together, at most.
DEFAULT_CAPACITY: Final = 100_000

GroupKey = tuple[ArtifactKey, str]


@dataclass
class ScopeRows:
    """The rows of one scope a batch wrote that its statistics depend on."""

    groups: list[GroupKey] = field(default_factory=list)
    handoff_heads: list[str] = field(default_factory=list)  # artifact ids
    experiences: list[ArtifactKey] = field(default_factory=list)


def changed_rows(state: State, staged: Container[bytes]) -> dict[str, ScopeRows]:
    """Per changed scope (every accepted entry rewrites its scope row), the rows that matter.

    ``staged``: the keys the batch's transaction holds. The state names the rows of these kinds it
    staged (``State.statistics_rows``), so the keys need not be parsed; a row staged only by an
    entry that was then aborted is not among ``staged``.
    """
    if state.statistics_rows is None:
        raise ValueError("the state does not track its statistics rows (Engine(..., track_statistics_rows=True))")
    scopes: dict[str, ScopeRows] = {}
    for row_key, parts in state.statistics_rows.items():
        if row_key not in staged:
            continue
        kind, scope_id = parts[0], parts[1]
        rows = scopes.get(scope_id)
        if rows is None:
            rows = scopes[scope_id] = ScopeRows()
        if kind == "grp":
            _, _, family, artifact_id, revision, signature_key = parts
            rows.groups.append(((family, artifact_id, revision), signature_key))
        elif kind == "head" and parts[2] == HANDOFF_FAMILY:
            rows.handoff_heads.append(parts[3])
        elif kind == "art" and parts[2] == EXPERIENCE_FAMILY:
            rows.experiences.append((parts[2], parts[3], parts[4]))
    return scopes


class ScopeSummary:
    """What ``scope_statistics`` aggregates over a scope, as of ``position``; see the module docstring."""

    __slots__ = ("_top", "_top_ranked", "cited", "gaps", "needing_review", "position", "ranked", "tracked")

    def __init__(self, position: int) -> None:
        self.position = position
        # Groups that count towards a figure: (streak, recurring, needs review) as last seen.
        self.tracked: dict[GroupKey, tuple[int, bool, bool]] = {}
        self.ranked: list[RankKey] = []  # the recurring groups, sorted: top_revisions is a prefix
        self.needing_review = 0
        self.cited: dict[ArtifactKey, int] = {}  # Experience revision -> current Handoff heads citing it
        self.gaps: set[ArtifactKey] = set()  # cited revisions that are unlinked citations
        # ``top_revisions`` as last built, and the ranked prefix it was built from: most batches
        # change no scope's leading streaks, and the list is shared by the documents (read-only).
        self._top_ranked: list[RankKey] | None = None
        self._top: list[dict[str, Any]] = []

    @property
    def weight(self) -> int:
        return 1 + len(self.tracked) + len(self.cited) + len(self.gaps)

    @classmethod
    def scan(cls, state: State, scope_id: str, review_threshold: int, position: int) -> "ScopeSummary":
        """Built from every Handoff head and group row of the scope (the transaction's view)."""
        summary = cls(position)
        for handoff_ref in state.heads(scope_id, HANDOFF_FAMILY):
            summary._cite(handoff_citations(state.artifact(scope_id, handoff_ref)), 1)
        for ref, signature_key, group in state.groups(scope_id):
            summary._group((ref, signature_key), group, review_threshold)
        summary._recheck(state, scope_id, list(summary.cited))
        return summary

    def apply(self, state: State, scope_id: str, rows: ScopeRows, review_threshold: int) -> None:
        """Bring the summary from the committed state to the batch's, given the rows the batch wrote."""
        affected: set[ArtifactKey] = set(rows.experiences)
        for artifact_id in rows.handoff_heads:
            before = state.committed_head(scope_id, HANDOFF_FAMILY, artifact_id)
            after = state.head(scope_id, HANDOFF_FAMILY, artifact_id)
            if before == after:
                continue
            for revision, delta in ((before, -1), (after, 1)):
                if revision is not None:
                    cites = handoff_citations(state.artifact(scope_id, (HANDOFF_FAMILY, artifact_id, revision)))
                    self._cite(cites, delta)
                    affected.update(cites)
        # A group row exists only for a failure-bearing revision, under the revision's own signature
        # key (revisions are immutable), so the row just read is the one ``citation_gap`` would read.
        unselected: dict[ArtifactKey, bool] = {}
        for group_key in rows.groups:
            ref, signature_key = group_key
            group = state.group(scope_id, ref, signature_key)
            self._group(group_key, group, review_threshold)
            unselected[ref] = never_selected(group)
        for ref, gap in unselected.items():
            if gap and ref in self.cited:
                self.gaps.add(ref)
            else:
                self.gaps.discard(ref)
        affected.difference_update(unselected)
        self._recheck(state, scope_id, affected)

    def statistics(self, scope_id: str, meta: ScopeMeta, top: int) -> dict[str, Any]:
        """The scope's statistics as JSON-ready data (``ScopeStatistics``' shape)."""
        leading = self.ranked[:top]
        if leading != self._top_ranked:
            self._top_ranked, self._top = leading, top_revisions(leading, top)
        return statistics_document(scope_id, meta, len(self.gaps), self.needing_review, self._top)

    def _group(self, group_key: GroupKey, group: Group | None, review_threshold: int) -> None:
        ref, signature_key = group_key
        previous = self.tracked.pop(group_key, None)
        if previous is not None:
            streak, recurring, review = previous
            if recurring:
                ranked = self.ranked
                del ranked[bisect.bisect_left(ranked, rank(ref, signature_key, streak))]
            self.needing_review -= review
        if group is None:
            return
        recurring, review = is_recurring(group), needs_review(group, review_threshold)
        if recurring or review:
            self.tracked[group_key] = (group.streak, recurring, review)
            if recurring:
                bisect.insort(self.ranked, rank(ref, signature_key, group.streak))
            self.needing_review += review

    def _cite(self, cites: Iterable[ArtifactKey], delta: int) -> None:
        cited = self.cited
        for ref in cites:
            count = cited.get(ref, 0) + delta
            if count > 0:
                cited[ref] = count
            else:
                cited.pop(ref, None)

    def _recheck(self, state: State, scope_id: str, refs: Iterable[ArtifactKey]) -> None:
        for ref in refs:
            if ref in self.cited and citation_gap(state, scope_id, ref) is not None:
                self.gaps.add(ref)
            else:
                self.gaps.discard(ref)


class StatisticsCache:
    """Summaries per (partition, scope), least recently used first, ``capacity`` entries in all."""

    def __init__(self, review_threshold: int, top: int, capacity: int = DEFAULT_CAPACITY) -> None:
        self.review_threshold = review_threshold
        self.top = top
        self.capacity = capacity
        self.weight = 0
        self._summaries: dict[tuple[int, str], ScopeSummary] = {}  # insertion order: least recent first
        self.updated = 0  # statistics from a summary brought forward by a batch's rows
        self.rebuilt = 0  # statistics from a summary rebuilt by a scan (none cached, or not provably current)

    def __len__(self) -> int:
        return len(self._summaries)

    def cached(self, partition: int, scope_id: str) -> ScopeSummary | None:
        """The summary held for the scope, if any (for inspection: not a use, so no recency)."""
        return self._summaries.get((partition, scope_id))

    def summaries(self) -> list[ScopeSummary]:
        return list(self._summaries.values())

    def statistics(self, state: State, partition: int, scope_id: str, rows: ScopeRows) -> dict[str, Any] | None:
        """The scope's statistics after the batch in ``state`` (staged, not yet flushed), as JSON-ready
        data; None for a scope with no accepted entry."""
        meta = state.scope(scope_id)
        cache_key = (partition, scope_id)
        # Out of the cache while it changes: an exception halfway leaves no half-updated summary.
        summary = self._summaries.pop(cache_key, None)
        if summary is not None:
            self.weight -= summary.weight
        if meta is None or meta.last_position <= 0:
            return None
        before = state.committed_scope(scope_id)
        if summary is not None and before is not None and summary.position == before.last_position:
            summary.apply(state, scope_id, rows, self.review_threshold)
            self.updated += 1
        else:
            summary = ScopeSummary.scan(state, scope_id, self.review_threshold, meta.last_position)
            self.rebuilt += 1
        summary.position = meta.last_position
        self._keep(cache_key, summary)
        return summary.statistics(scope_id, meta, self.top)

    def _keep(self, cache_key: tuple[int, str], summary: ScopeSummary) -> None:
        weight = summary.weight
        if weight > self.capacity:
            return
        summaries = self._summaries
        summaries[cache_key] = summary
        self.weight += weight
        while self.weight > self.capacity:
            oldest = next(iter(summaries))
            self.weight -= summaries.pop(oldest).weight
