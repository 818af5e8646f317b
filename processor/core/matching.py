"""RFC "Matching policy": failure items, frozen candidate sets, exact eligibility.

Everything here is a pure function of a Task Outcome and a candidate snapshot;
the same inputs always give the same decision, which is what lets a replay
resolve a match instead of choosing again.
"""

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ...schemas.canonical import digest, digest_bytes
from ...schemas.constants import EXPERIENCE_FAMILY, FAILURE_CHECK_STATUSES, FAILURE_OUTCOME_STATUSES
from ...schemas.normalize import normalize
from ...schemas.powercontext import (
    HandoffArtifactCitation,
    HandoffCitation,
    HandoffSourceCitation,
    TaskCheck,
    TaskOutcome,
    WorkClaim,
)
from .state import ArtifactKey, FailureHeads, artifact_json, compact

# Resolves a citation to "accepted in this scope at an earlier position".
CitationResolver = Callable[[HandoffCitation], bool]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A failure-bearing Experience revision in a frozen candidate set."""

    ref: ArtifactKey
    ref_json: dict[str, Any]
    signature_key: str
    repair_surface: str
    condition_key: str
    check_key: str


@dataclass(frozen=True, slots=True)
class CandidateSet:
    """A frozen, sorted snapshot, serialized once: every match record that freezes it splices these bytes.

    ``refs_line`` is ``candidate_refs`` as the ledger line writes it (model field
    order), ``refs_canonical`` as canonical JSON (sorted keys). The match digest
    hashes canonical JSON whose first two keys are ``artifact_ref`` (null or one
    of these candidates) and ``candidate_refs``, so the sha256 state after that
    prefix is kept per artifact_ref and copied for each match
    (``match_prefix``): a match record costs the same whether the set holds one
    revision or two hundred.
    """

    mode: str
    candidates: tuple[Candidate, ...]
    refs_line: orjson.Fragment
    refs_canonical: bytes
    digest: str
    by_key: dict[str, tuple[Candidate, ...]]
    prefixes: dict[ArtifactKey | None, "hashlib._Hash"]

    def match_prefix(self, target: Candidate | None) -> "hashlib._Hash":
        """sha256 fed with ``{"artifact_ref":…,"candidate_refs":[…],`` of a match naming ``target``."""
        ref = None if target is None else target.ref
        prefix = self.prefixes.get(ref)
        if prefix is None:
            art = b"null" if target is None else orjson.dumps(target.ref_json, option=orjson.OPT_SORT_KEYS)
            prefix = hashlib.sha256(b'{"artifact_ref":%b,"candidate_refs":%b,' % (art, self.refs_canonical))
            self.prefixes[ref] = prefix
        return prefix.copy()


def freeze(mode: str, candidates: Iterable[Candidate]) -> CandidateSet:
    ordered = tuple(sorted(candidates, key=lambda c: c.ref))
    refs_json = [c.ref_json for c in ordered]
    canonical = compact(orjson.dumps(refs_json, option=orjson.OPT_SORT_KEYS))
    by_key: dict[str, tuple[Candidate, ...]] = {}
    for c in ordered:
        by_key[c.signature_key] = (*by_key.get(c.signature_key, ()), c)
    return CandidateSet(
        mode,
        ordered,
        orjson.Fragment(compact(orjson.dumps(refs_json))),
        canonical,
        digest_bytes(canonical),
        by_key,
        {},
    )


# A cited, failure-bearing Experience revision as a hashable tuple:
# (ref, signature_key, repair_surface, condition_key, check_key).
Binding = tuple[ArtifactKey, str, str, str, str]


@functools.lru_cache(maxsize=4096)
def handoff_citations(bindings: tuple[Binding, ...]) -> CandidateSet:
    """The handoff-citations candidate set; the same cited revisions freeze to one shared object."""
    return freeze("handoff_citations", (Candidate(ref, artifact_json(ref), *rest) for ref, *rest in bindings))


def scope_heads(heads: FailureHeads) -> CandidateSet:
    """The scope-heads candidate set, built once per heads row (memoized on it)."""
    frozen: CandidateSet | None = heads.derived
    if frozen is None:
        frozen = freeze(
            "scope_heads",
            (
                Candidate(
                    (EXPERIENCE_FAMILY, h.artifact_id, h.revision),
                    artifact_json((EXPERIENCE_FAMILY, h.artifact_id, h.revision)),
                    h.signature_key,
                    h.repair_surface,
                    h.condition_key,
                    h.check_key,
                )
                for h in heads.heads
            ),
        )
        heads.derived = frozen
    return frozen


class Item:
    """One verified Task Outcome item: its comparison key, and its locator once a record needs it.

    The locator (TaskOutcomeItemRef) carries the digest of the item's canonical
    JSON; most verified items end up in no record, so it is computed on demand.
    """

    __slots__ = ("_content", "_index", "_kind", "_outcome_ref", "_ref_json", "key", "status")

    def __init__(
        self,
        outcome_ref: dict[str, str],
        kind: str,
        index: int,
        content: "TaskCheck | WorkClaim",
        key: str,
        status: str,
    ) -> None:
        self._outcome_ref = outcome_ref
        self._kind = kind
        self._index = index
        self._content = content
        self._ref_json: dict[str, Any] | None = None
        self.key = key
        self.status = status  # TaskCheck.status; "" for observations

    @property
    def ref_json(self) -> dict[str, Any]:
        if self._ref_json is None:
            content = self._content
            item = check_json(content) if isinstance(content, TaskCheck) else claim_json(content)
            self._ref_json = {
                "task_outcome_ref": self._outcome_ref,
                "item_kind": self._kind,
                "item_index": self._index,
                "item_digest": digest(item),
            }
        return self._ref_json


def citation_json(citation: HandoffCitation) -> dict[str, Any]:
    if isinstance(citation, HandoffSourceCitation):
        ref = citation.source_ref
        return {"kind": "source", "source_ref": {"source_type": ref.source_type, "source_id": ref.source_id}}
    if isinstance(citation, HandoffArtifactCitation):
        art = citation.artifact_ref
        return {
            "kind": "artifact",
            "artifact_ref": {"family": art.family, "artifact_id": art.artifact_id, "revision": art.revision},
        }
    memory = citation.memory_citation
    mref = memory.memory_ref
    return {
        "kind": "memory",
        "memory_citation": {
            "memory_ref": {"family": mref.family, "artifact_id": mref.artifact_id, "revision": mref.revision},
            "entry_id": memory.entry_id,
            "entry_version_id": memory.entry_version_id,
        },
    }


def check_json(check: TaskCheck) -> dict[str, Any]:
    """The validated TaskCheck as ``model_dump(mode="json")`` gives it (the item digest's input)."""
    return {
        "name": check.name,
        "status": check.status,
        "details": check.details,
        "basis": check.basis,
        "evidence": [citation_json(c) for c in check.evidence],
    }


def claim_json(claim: WorkClaim) -> dict[str, Any]:
    return {"text": claim.text, "basis": claim.basis, "evidence": [citation_json(c) for c in claim.evidence]}


def is_verified(item: WorkClaim | TaskCheck, resolves: CitationResolver) -> bool:
    """Contract: basis verified, non-empty evidence, every source/artifact citation resolving."""
    if item.basis != "verified":
        return False
    evidence = item.evidence
    if not evidence:
        return False
    # A loop, not ``all`` over a generator: this runs for every item of every Outcome.
    for citation in evidence:  # noqa: SIM110
        if not resolves(citation):
            return False
    return True


def verified_checks(
    outcome: TaskOutcome,
    outcome_ref: dict[str, str],
    resolves: CitationResolver,
    statuses: frozenset[str] | None = None,
) -> list[Item]:
    """The verified checks; with ``statuses``, only those whose status is one of them."""
    return [
        Item(outcome_ref, "check", i, check, normalize(check.name), check.status)
        for i, check in enumerate(outcome.checks)
        if (statuses is None or check.status in statuses) and is_verified(check, resolves)
    ]


def verified_observations(outcome: TaskOutcome, outcome_ref: dict[str, str], resolves: CitationResolver) -> list[Item]:
    return [
        Item(outcome_ref, "observation", i, claim, normalize(claim.text), "")
        for i, claim in enumerate(outcome.observations)
        if is_verified(claim, resolves)
    ]


def failure_items(checks: Sequence[Item], observations: Sequence[Item], outcome_status: str) -> list[Item]:
    """Checks first, then observations, each in index order (contract, fixed decision).

    A check is failure evidence when verified and failed/timed_out/unavailable;
    an observation when verified under a failed or blocked parent Outcome.
    """
    failing_checks = [item for item in checks if item.status in FAILURE_CHECK_STATUSES]
    failing_observations = list(observations) if outcome_status in FAILURE_OUTCOME_STATUSES else []
    return failing_checks + failing_observations


def decide(item: Item, frozen: CandidateSet) -> tuple[str, Candidate | None]:
    """Deterministic eligibility: zero is unmatched, one matched, more ambiguous."""
    eligible = frozen.by_key.get(item.key, ())
    if len(eligible) == 1:
        return "matched", eligible[0]
    return ("ambiguous" if eligible else "unmatched"), None


def avoided_evidence(
    candidate: Candidate, checks: Sequence[Item], observations: Sequence[Item]
) -> tuple[Item, Item] | None:
    """Gates 2 and 3: exactly one bound verified condition, exactly one bound verified check, passed.

    More than one binding item is ambiguity, never a choice; ``None`` is unknown.
    """
    conditions = [item for item in observations if item.key == candidate.condition_key]
    bound_checks = [item for item in checks if item.key == candidate.check_key]
    if len(conditions) != 1 or len(bound_checks) != 1 or bound_checks[0].status != "passed":
        return None
    return conditions[0], bound_checks[0]
