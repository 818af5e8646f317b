"""``recurrence stats --table``: the statistics for people, and the rule that flags a large unknown share.

The JSON that ``stats`` prints by default is the contract's (section 4: acceptance suites call the command
as it is); this is the same numbers as a table, one row per scope with a total, and for one scope
(``--scope``) its top revisions. The page (``processor/web/ui/app.js``) flags by the same rule.
"""

import difflib
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any, Final

from .exceptions import UnusableError

#: The counts of a scope's statistics, in the model's order, with the words a person reads.
COLUMNS: Final = (
    ("selected", "selected"),
    ("recurred", "recurred"),
    ("avoided", "avoided"),
    ("unknown", "unknown"),
    ("unlinked_handoff_citations", "unlinked citations"),
    ("needing_review", "needing review"),
)
#: An unknown share is flagged from this share of the selections (decision 86)...
UNKNOWN_FLAG_SHARE: Final = 0.5
#: ...once there are this many selections: 1 unknown of 2 says nothing yet.
UNKNOWN_FLAG_MIN_SELECTED: Final = 20


def unknown_share(counts: dict[str, Any]) -> float | None:
    """The share of the selections that ended ``unknown`` (None: nothing was selected)."""
    selected = int(counts["selected"])
    return int(counts["unknown"]) / selected if selected else None


def unknown_flagged(counts: dict[str, Any]) -> bool:
    """Is the unknown share large enough to say so? (Enough selections, and at least half of them.)"""
    share = unknown_share(counts)
    return share is not None and counts["selected"] >= UNKNOWN_FLAG_MIN_SELECTED and share >= UNKNOWN_FLAG_SHARE


def _aligned(rows: Sequence[Sequence[str]], left: frozenset[int] = frozenset({0})) -> list[str]:
    """Columns padded to their widest cell: those in ``left`` (names) to the left, numbers to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if i in left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _share(counts: dict[str, Any]) -> str:
    """``94% !`` when flagged, ``93%  `` when not: the marks in a column of their own, the numbers aligned."""
    share = unknown_share(counts)
    if share is None:
        return "-  "
    return f"{share:.0%}" + (" !" if unknown_flagged(counts) else "  ")


def _totals(statistics: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {field: sum(int(s["recurrence"][field]) for s in statistics) for field, _ in COLUMNS}


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def table(statistics: Sequence[dict[str, Any]]) -> str:
    """The statistics as ``stats`` prints them with ``--table``: a row per scope, then the total over them."""
    header = ("scope", *(label for _, label in COLUMNS), "unknown share")
    rows = [header]
    for scope in statistics:
        counts = scope["recurrence"]
        rows.append((scope["scope_id"], *(f"{counts[field]:,}" for field, _ in COLUMNS), _share(counts)))
    totals = _totals(statistics)
    if len(statistics) > 1:
        rows.append(
            (f"all {len(statistics):,} scopes", *(f"{totals[field]:,}" for field, _ in COLUMNS), _share(totals))
        )
    lines = _aligned(rows)
    notes = [_plural(len(statistics), "scope") + "."]
    flagged = [s for s in statistics if unknown_flagged(s["recurrence"])]
    if flagged or unknown_flagged(totals):
        where = (
            f" ({len(flagged):,} of {_plural(len(statistics), 'scope')}; "
            f"{_share(totals).strip(' !')} of all selections)"
            if len(statistics) > 1
            else ""
        )
        notes.append(
            f"! marks a large unknown share: {UNKNOWN_FLAG_SHARE:.0%} or more of {UNKNOWN_FLAG_MIN_SELECTED} or "
            f"more selections reached no verdict{where}. Their Task Outcomes show neither the check bound to the "
            "lesson passing under its condition nor the failure again: whether those lessons help is not being "
            "measured."
        )
    notes.append(
        "unknown: selected into context, no terminal verdict; unlinked citations: Handoff citations no Task "
        "Outcome joins (a provenance gap, not a failed recall)."
    )
    if len(statistics) == 1:
        lines += ["", *_top_revisions(statistics[0])]
    else:
        notes.append("--scope ID --table lists a scope's top revisions; without --table, stats prints JSON.")
    return "\n".join([*lines, "", *(textwrap.fill(note, 100, break_on_hyphens=False) for note in notes)]) + "\n"


def _top_revisions(scope: dict[str, Any]) -> list[str]:
    revisions = scope["recurrence"]["top_revisions"]
    if not revisions:
        return [f"no revision of {scope['scope_id']} has recurred"]
    rows = [("streak", "revision", "signature key")]
    for item in revisions:
        ref = item["artifact_ref"]
        rows.append(
            (
                f"{item['terminal_recurred_streak']:,}",
                f"{ref['family']}/{ref['artifact_id']}@{ref['revision']}",
                item["signature_key"],
            )
        )
    return [
        f"top revisions of {scope['scope_id']} by terminal recurrence streak (at most --top):",
        *_aligned(rows, left=frozenset({1, 2})),
    ]


def no_such_scope(scope_id: str, known: Iterable[str], state: str) -> UnusableError:
    """``--scope`` names no scope of the state: what to do, with the nearest names when there are some."""
    names = sorted(known)
    close = difflib.get_close_matches(scope_id, names, n=3, cutoff=0.6)
    quoted = [repr(name) for name in close]
    either = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else "".join(quoted)
    hint = f"did you mean {either}? " if close else ""
    listing = f"recurrence stats --state {state} --table lists them" if names else "it has none yet"
    return UnusableError(
        f"no scope {scope_id!r} in this state (no entry of it was accepted); {hint}"
        f"{_plural(len(names), 'scope')}: {listing}"
    )
