"""RFC "Admission rules" 1-6 for Experience candidates that carry a failure block.

Each rule is a named check with a stable id. Rules 1-4 and 6 are the
confidence floor: any violation drops the candidate (it is not stored, only
its decision is). Rule 5 only ever warns. Candidates without a failure block
pass the gate unchanged.
"""

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import orjson
from pydantic import ValidationError

from ...schemas.base import ArtifactRef
from ...schemas.constants import (
    EXPERIENCE_FAMILY,
    MAX_CANDIDATE_EVIDENCE,
    NEAR_DUPLICATE_BIGRAM_OVERLAP,
    TASK_OUTCOME_SOURCE_KIND,
)
from ...schemas.journal import CandidateBody
from ...schemas.normalize import bigram_overlap, normalize
from ...schemas.powercontext import ExperienceContent
from . import records
from .records import Emitted
from .state import State, artifact_json

Violation = dict[str, str]

# Stable rule ids (docs/admission.md lists them with their meaning).
RULE_WELL_FORMED = "well_formed_proposal"
RULE_FAILING_OBSERVATION = "cited_failing_observation"
RULE_CUE = "self_contained_cue"
RULE_REPAIR_SURFACE = "repair_surface"
RULE_VERIFICATION = "runnable_verification"
RULE_NEAR_TWIN = "no_silent_near_twin"
RULE_PROVENANCE = "provenance"

_NEAR_TWIN = Fraction(str(NEAR_DUPLICATE_BIGRAM_OVERLAP))


def _rule_for(location: tuple[int | str, ...]) -> str:
    """Route a schema error inside the proposal to the admission rule it breaks."""
    if location[:1] != ("failure",):
        return RULE_WELL_FORMED
    if location[1:2] == ("signature",):
        return RULE_CUE
    if location[1:2] == ("repair_surface",):
        return RULE_REPAIR_SURFACE
    if location[1:2] == ("verification",):
        return RULE_VERIFICATION
    return RULE_WELL_FORMED


def violation(rule: str, message: str) -> Violation:
    return {"rule": rule, "message": message}


def _schema_violations(error: ValidationError) -> list[Violation]:
    violations: dict[tuple[str, str], Violation] = {}
    for detail in error.errors(include_input=False, include_url=False):
        location = tuple(detail["loc"])
        rule = _rule_for(location)
        message = f"{'.'.join(str(p) for p in location) or 'proposal'}: {detail['msg']}"
        violations.setdefault((rule, message), violation(rule, message))
    return list(violations.values())


def _raw_cue(proposal: dict[str, Any]) -> str | None:
    """The proposal's recall_cue when it is at least a string, even if the rest is malformed."""
    failure = proposal.get("failure")
    signature = failure.get("signature") if isinstance(failure, dict) else None
    cue = signature.get("recall_cue") if isinstance(signature, dict) else None
    return cue if isinstance(cue, str) else None


class AdmissionGate:
    def __init__(self, state: State) -> None:
        self.state = state

    def decide(self, scope_id: str, candidate: CandidateBody) -> Emitted:
        violations: list[Violation] = []
        warnings: list[dict[str, Any]] = []
        proposal = candidate.proposal
        has_failure = proposal.get("failure") is not None
        try:
            ExperienceContent.model_validate(proposal)
        except ValidationError as error:
            violations.extend(_schema_violations(error))

        if has_failure:
            violations.extend(self._failing_observation(scope_id, candidate))
            # Rules 2 and 5 read the raw cue so one broken field elsewhere does not
            # hide another violation (or a near-twin) from the audit record.
            cue = _raw_cue(proposal)
            cue_key = normalize(cue) if cue is not None else ""
            outcome = proposal.get("outcome")
            if cue_key and isinstance(outcome, str) and cue_key == normalize(outcome):
                violations.append(violation(RULE_CUE, "recall_cue restates the outcome field; name the situation"))
            violations.extend(self._provenance(scope_id, candidate))
            if cue_key:
                warnings.extend(self._near_twins(scope_id, cue_key, candidate.target))
        target = candidate.target
        return records.admission(
            scope_id,
            candidate.candidate_id,
            violations,
            warnings,
            None if target is None else artifact_json((target.family, target.artifact_id, target.revision)),
            _raw_cue(proposal),
        )

    # Rule 1: a cited failing observation.
    def _failing_observation(self, scope_id: str, candidate: CandidateBody) -> list[Violation]:
        for ref in candidate.sources:
            stored = self.state.source(scope_id, (ref.source_type, ref.source_id))
            if stored is not None and stored.kind == TASK_OUTCOME_SOURCE_KIND and stored.failure_evidence:
                return []
        return [
            violation(
                RULE_FAILING_OBSERVATION,
                "no cited Source is a Task Outcome in this scope with verified failure evidence "
                "(a failed/blocked outcome with a verified observation, or a verified "
                "failed/timed_out/unavailable check)",
            )
        ]

    # Rule 5: no silent near-twin. Warns, never drops, never links.
    def _near_twins(self, scope_id: str, cue: str, target: ArtifactRef | None) -> Iterator[dict[str, Any]]:
        # The failure heads are exactly the heads with a signature key; warnings name them
        # in the order of their head rows (by encoded artifact id).
        index = self.state.failure_heads(scope_id)
        if index.in_key_order is None:
            index.in_key_order = tuple(sorted(index.heads, key=lambda h: orjson.dumps(h.artifact_id)))
        for head in index.in_key_order:
            signature_key = head.signature_key
            if target is not None and (target.family, target.artifact_id) == (EXPERIENCE_FAMILY, head.artifact_id):
                continue  # revising that very record is what the warning would suggest
            overlap = bigram_overlap(cue, signature_key)
            if Fraction(overlap) >= _NEAR_TWIN or cue == signature_key:
                yield {
                    "rule": RULE_NEAR_TWIN,
                    "artifact_ref": artifact_json((EXPERIENCE_FAMILY, head.artifact_id, head.revision)),
                    "signature_key": signature_key,
                    "overlap": overlap,
                    "message": (
                        f"recall_cue overlaps {EXPERIENCE_FAMILY}/{head.artifact_id} revision {head.revision} "
                        f"at {overlap:.2f}; consider revising that record instead"
                    ),
                }

    # Rule 6: provenance through the existing evidence model.
    def _provenance(self, scope_id: str, candidate: CandidateBody) -> list[Violation]:
        out = []
        if not 1 <= len(candidate.sources) <= MAX_CANDIDATE_EVIDENCE:
            out.append(
                violation(
                    RULE_PROVENANCE,
                    f"a candidate cites 1..{MAX_CANDIDATE_EVIDENCE} exact Sources, got {len(candidate.sources)}",
                )
            )
        state = self.state
        missing = [ref for ref in candidate.sources if state.source(scope_id, (ref.source_type, ref.source_id)) is None]
        cited = [*candidate.artifacts, *([candidate.target] if candidate.target is not None else [])]
        missing_artifacts = [
            ref for ref in cited if state.artifact(scope_id, (ref.family, ref.artifact_id, ref.revision)) is None
        ]
        if missing or missing_artifacts:
            names = [f"{r.source_type}/{r.source_id}" for r in missing] + [
                f"{r.family}/{r.artifact_id}@{r.revision}" for r in missing_artifacts
            ]
            out.append(violation(RULE_PROVENANCE, f"citations not resolvable in this scope: {', '.join(names)}"))
        return out
