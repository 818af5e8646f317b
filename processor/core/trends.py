"""Trends: yield per window of journal positions, per scope and per revision.

Window ``i`` (from 0) of size ``w`` holds the marks whose ``task_outcome_position``
lies in ``i*w+1 .. (i+1)*w``: positions, not wall-clock time, are the RFC's only
ordering, so a replay draws the same trend. The scope's series is dense (every window
from the first position to the scope's last accepted one, zeros included) so a chart
is one series; a revision's lists only the windows it has marks in. The number of
windows is bounded (``MAX_TREND_WINDOWS``): a window too small for the scope is
refused with the smallest one that fits, never cut short.
"""

from collections.abc import Iterable
from typing import Any, Final

from .yieldmarks import Mark, Yield

ArtifactKey = tuple[str, str, int]

#: The most windows one scope's trend holds (decision 129); also the page's and the CSV's bound.
MAX_TREND_WINDOWS: Final = 10_000
#: The window the page and ``recurrence trends`` use when none is asked for.
DEFAULT_TREND_WINDOW: Final = 100
MAX_TREND_WINDOW: Final = 2**63 - 1

CSV_COLUMNS: Final = (
    "scope_id",
    "family",
    "artifact_id",
    "revision",
    "first_position",
    "last_position",
    "selected",
    "recurred",
    "avoided",
    "unknown",
    "review_proposals",
)


class WindowTooSmallError(ValueError):
    """More windows than ``MAX_TREND_WINDOWS`` for the scope's positions."""


def smallest_window(last_position: int) -> int:
    return max(1, -(-last_position // MAX_TREND_WINDOWS))


def _counts(first: int, window: int, folded: Yield) -> dict[str, Any]:
    return {
        "first_position": first,
        "last_position": first + window - 1,
        "selected": folded.selected,
        "recurred": folded.recurred,
        "avoided": folded.avoided,
        "unknown": folded.unknown,
        "review_proposals": folded.review_proposals,
    }


def scope_trends(
    scope_id: str,
    last_position: int,
    window: int,
    marks: Iterable[tuple[ArtifactKey, str | None, Mark]],
) -> dict[str, Any]:
    """One scope's trend from its marks (any order): ``(revision, signature key, mark)``."""
    count = -(-last_position // window) if last_position else 0
    if count > MAX_TREND_WINDOWS:
        raise WindowTooSmallError(
            f"a window of {window} positions makes {count} windows for scope positions 1..{last_position} "
            f"(at most {MAX_TREND_WINDOWS}); use a window of at least {smallest_window(last_position)}"
        )
    scope = [Yield() for _ in range(count)]
    revisions: dict[ArtifactKey, tuple[str | None, dict[int, Yield]]] = {}
    for ref, signature_key, mark in marks:
        index = (mark.position - 1) // window
        scope[index].add(mark)
        per = revisions.setdefault(ref, (signature_key, {}))[1]
        per.setdefault(index, Yield()).add(mark)
    return {
        "scope_id": scope_id,
        "window": window,
        "last_position": last_position,
        "windows": [_counts(i * window + 1, window, folded) for i, folded in enumerate(scope)],
        "revisions": [
            {
                "artifact_ref": {"family": ref[0], "artifact_id": ref[1], "revision": ref[2]},
                "signature_key": signature_key,
                "windows": [_counts(i * window + 1, window, per[i]) for i in sorted(per)],
            }
            for ref, (signature_key, per) in sorted(revisions.items())
        ],
    }


def csv_rows(trend: dict[str, Any]) -> Iterable[list[str | int]]:
    """The trend as CSV rows (``CSV_COLUMNS``): the scope's windows (revision columns empty), then each
    revision's."""
    counts = CSV_COLUMNS[4:]
    for row in trend["windows"]:
        yield [trend["scope_id"], "", "", "", *(row[c] for c in counts)]
    for revision in trend["revisions"]:
        ref = revision["artifact_ref"]
        for row in revision["windows"]:
            yield [trend["scope_id"], ref["family"], ref["artifact_id"], ref["revision"], *(row[c] for c in counts)]
