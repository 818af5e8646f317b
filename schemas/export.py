"""Generate ``schemas/json/*.schema.json`` from the models (``make schemas``).

Downstream services read these files, so a test fails when they drift from
the models: regenerate and commit them together with a model change.
"""

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from .journal import JournalEntry
from .powercontext import ExperienceContent, HandoffContent, HandoffReceipt, TaskOutcome
from .readsurface import ArtifactHistory, RetirementSuggestions, Trends
from .records import (
    AdmissionRecord,
    DeadLetterRecord,
    MatchRecord,
    ObservationRecord,
    ReviewProposalRecord,
)
from .statistics import ScopeStatistics

OUT_DIR = Path(__file__).parent / "json"

SCHEMAS: dict[str, Any] = {
    "journal-entry": JournalEntry,
    "task-outcome": TaskOutcome,
    "handoff-receipt": HandoffReceipt,
    "experience-content": ExperienceContent,
    "handoff-content": HandoffContent,
    "record-match": MatchRecord,
    "record-observation": ObservationRecord,
    "record-review-proposal": ReviewProposalRecord,
    "record-admission": AdmissionRecord,
    "record-dead-letter": DeadLetterRecord,
    "scope-statistics": ScopeStatistics,
    "artifact-history": ArtifactHistory,
    "retirement-suggestions": RetirementSuggestions,
    "trends": Trends,
}


def render(name: str) -> str:
    schema = TypeAdapter(SCHEMAS[name]).json_schema(by_alias=True, mode="validation")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"recurrence/{name}", **schema}
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    for name in SCHEMAS:
        (OUT_DIR / f"{name}.schema.json").write_text(render(name), encoding="utf-8")
    print(f"wrote {len(SCHEMAS)} schemas to {OUT_DIR}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
