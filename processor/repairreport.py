"""What ``recurrence history``, ``suggestions`` and ``trends`` print for a person (``--json`` prints the data).

Text only from the data ``repairloop`` answers; journal text (ids, cues) goes through
``printable`` where it is printed, so a control character cannot reach the terminal.
"""

import csv
import io
from collections.abc import Iterable
from typing import Any

from .core.trends import CSV_COLUMNS, csv_rows
from .host.printable import printable


def _ref(ref: dict[str, Any]) -> str:
    return f"{ref['family']}/{ref['artifact_id']}@{ref['revision']}"


def _span(row: dict[str, Any]) -> str:
    if row["head_from"] is None:
        return "never the head"
    until = "" if row["head_until"] is None else str(row["head_until"])
    return f"head at positions {row['head_from']}..{until}"


def history_text(histories: Iterable[dict[str, Any]], state: str) -> str:
    lines = []
    for history in histories:
        lines.append(
            f"{history['family']}/{history['artifact_id']} in scope {history['scope_id']}: "
            f"head revision {history['head_revision']} (review threshold {history['review_threshold']})"
        )
        for row in history["revisions"]:
            review = "  needs review" if row["needs_review"] else ""
            failure = "" if row["signature_key"] is not None else "  (no failure block: no ledger)"
            lines.append(
                f"  @{row['artifact_ref']['revision']}  {_span(row)}: selected {row['selected']}, "
                f"recurred {row['recurred']}, avoided {row['avoided']}, unknown {row['unknown']}, "
                f"streak {row['terminal_recurred_streak']}{review}{failure}"
            )
            if row["proposal_positions"]:
                shown = ", ".join(str(p) for p in row["proposal_positions"])
                lines.append(f"      review proposals at positions {shown}")
            effect = row["repair_effect"]
            if effect is not None:
                lines.append(
                    f"      repair effect (after the proposal at {effect['proposal_position']} on "
                    f"{_ref(effect['before']['artifact_ref'])}): {effect['verdict']}: {effect['text']}"
                )
        head = history["revisions"][-1]["explain"] if history["revisions"] else None
        if head is not None:
            lines.append(f"  explain a revision: recurrence explain {head} --state {state}")
    return "".join(printable(line) + "\n" for line in lines)


def suggestions_text(bodies: Iterable[dict[str, Any]], state: str) -> str:
    lines = []
    for body in bodies:
        suggestions = body["suggestions"]
        count = len(suggestions)
        lines.append(
            f"scope {body['scope_id']}: {count} retirement suggestion{'' if count == 1 else 's'} "
            "(suggestions only: nothing is retired or changed)"
        )
        for suggestion in suggestions:
            lines.append(
                f"  {suggestion['rule']}  {_ref(suggestion['artifact_ref'])}  selected {suggestion['selected']}, "
                f"recurred {suggestion['recurred']}, avoided {suggestion['avoided']}, unknown {suggestion['unknown']}"
            )
            lines.append(f"      {suggestion['text']}")
            lines.append(f"      explain: recurrence explain {suggestion['explain']} --state {state}")
    return "".join(printable(line) + "\n" for line in lines)


def what_if_text(body: dict[str, Any]) -> str:
    """One row per count threshold: the suggestions each rule would make (``suggestions --what-if``)."""
    scopes = body["scopes"]
    lines = [
        f"what if: the suggestions each rule would make over {scopes} scope{'' if scopes == 1 else 's'} with N "
        "as its count threshold (--min-selected, --min-unselected-recurred, --min-unknown; unknown_binding at "
        f"{body['unknown_percent']}% unknown)",
        f"{'N':>8}  {'never_avoids':>12}  {'never_selected':>14}  {'unknown_binding':>15}",
    ]
    for row in body["what_if"]:
        counts = row["suggestions"]
        lines.append(
            f"{row['threshold']:>8}  {counts['never_avoids']:>12}  {counts['never_selected']:>14}  "
            f"{counts['unknown_binding']:>15}"
        )
    return "".join(line + "\n" for line in lines)


def trends_csv(trends: Iterable[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for trend in trends:
        writer.writerows(csv_rows(trend))
    return out.getvalue()
