"""Every constant the RFC names, under the RFC's own names, in one place.

Values the RFC marks as "proposed" are defaults; the engine takes them from
``EngineConfig`` so a deployment can tune them without forking the logic.
"""

from typing import Final

# RFC "Data model": a match key should not be 8000 characters.
MAX_FAILURE_CUE_LENGTH: Final = 512
MAX_EXPERIENCE_FIELD_LENGTH: Final = 8_000

# RFC "Degradation and the Review interaction": consecutive terminal recurred
# verdicts with no intervening avoided before a revision needs review.
RECURRENCE_REVIEW_STREAK_THRESHOLD: Final = 3

# RFC "Admission rules" (5) / "Matching policy": token-bigram overlap at or
# above which a cue is only *suggested* as a near-twin; it never links.
NEAR_DUPLICATE_BIGRAM_OVERLAP: Final = 0.8

# Contract section 3: deployment-bounded N for top_revisions.
DEFAULT_TOP_REVISIONS: Final = 20

# RFC "Future possibilities": a signature recurring in this many scopes is
# suggested for promotion from personal to team assets (a setting; never a counter).
DEFAULT_PATTERN_SCOPES: Final = 3

# PowerContext work-continuity limits mirrored by the wire contract.
MAX_WORK_TEXT_LENGTH: Final = 8_192
MAX_WORK_ITEMS: Final = 64
MAX_WORK_EVIDENCE: Final = 32
MAX_HANDOFF_CITATIONS: Final = 32
MAX_WORK_CLAIM_EVIDENCE: Final = MAX_HANDOFF_CITATIONS - 1
MAX_HANDOFF_STATE_STATEMENTS: Final = 64
MAX_HANDOFF_OMISSIONS: Final = 64
MAX_HANDOFF_TEXT_LENGTH: Final = 8_192
MAX_HANDOFF_RECEIPT_EVIDENCE: Final = (MAX_HANDOFF_STATE_STATEMENTS + 1) * MAX_HANDOFF_CITATIONS

# Review candidates cite 1..32 Sources (contract: review_proposal.sources).
MAX_CANDIDATE_EVIDENCE: Final = 32

MAX_SCOPE_ID_LENGTH: Final = 256
MAX_SOURCE_TYPE_LENGTH: Final = 128
MAX_SOURCE_ID_LENGTH: Final = 256
MAX_ARTIFACT_FIELD_LENGTH: Final = 128

# Positions are JSON integers; canonical JSON (orjson) is exact up to 64 bits.
MAX_POSITION: Final = 2**63 - 1

FAILURE_OUTCOME_STATUSES: Final = frozenset({"failed", "blocked"})
FAILURE_CHECK_STATUSES: Final = frozenset({"failed", "timed_out", "unavailable"})

TASK_OUTCOME_SOURCE_KIND: Final = "task-outcome"
HANDOFF_RECEIPT_SOURCE_KIND: Final = "handoff-receipt"
EXPERIENCE_FAMILY: Final = "experience"
HANDOFF_FAMILY: Final = "handoff"
