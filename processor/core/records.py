"""Output records as the engine emits them: the exact ledger line, its id and what a runner routes by.

The pydantic models in ``recurrence_ledger.schemas.records`` define every record and
enforce the RFC's validation matrix on records read from outside (a topic, a
file). Inside the engine the invariants hold by construction, so records are
built here as plain dicts in the models' field order and serialized once:
the line is byte for byte what ``model_dump(mode="json")`` would serialize,
and each id is the canonical digest the contract defines. The test suite
validates every record the engine builds against the models
(``Emitted.model``).
"""

import hashlib
from collections.abc import Mapping
from typing import Any, Final, NamedTuple, Protocol

import orjson
from pydantic import TypeAdapter

from ...schemas.canonical import canonical_json, digest, digest_bytes, dumps
from ...schemas.records import OutputRecord, is_digest

Origin = Mapping[str, str | int]

_SORTED: Final = orjson.OPT_SORT_KEYS
_OUTPUT: TypeAdapter[OutputRecord] = TypeAdapter(OutputRecord)
#: The field holding a record's id; a review proposal's or an admission's id is its canonical digest.
ID_FIELDS: Final = {"match": "match_digest", "observation": "observation_id", "dead_letter": "dead_letter_id"}


def is_record_id(text: str) -> bool:
    """Can ``text`` be a record's id at all? Every id is a digest (``sha256:`` and 64 hex digits)."""
    return is_digest(text)


def identity_of(line: bytes) -> str | None:
    """The id of the record on a ledger line, derived from its content; None when the line is not a valid
    record (its model refuses it: a field out of the matrix, an id that is not its content's digest)."""
    try:
        _OUTPUT.validate_json(line)
    except ValueError:  # pydantic's ValidationError, and malformed JSON
        return None
    data: dict[str, Any] = orjson.loads(line)
    field = ID_FIELDS.get(data["record"])
    return str(data[field]) if field is not None else digest(data)


class Emitted(NamedTuple):
    """One output record: ``line`` is the JSON ledger line without its newline.

    A named tuple rather than a frozen dataclass: as immutable, and built for every record at a
    fraction of the cost (a frozen dataclass sets each field through ``object.__setattr__``).
    """

    record: str
    scope_id: str | None
    record_id: str
    line: bytes
    error: str | None = None  # dead letters: the stable code

    def data(self) -> dict[str, Any]:
        value: dict[str, Any] = orjson.loads(self.line)
        return value

    def model(self) -> OutputRecord:
        """The record validated against its pydantic model (matrix and own id re-checked)."""
        return _OUTPUT.validate_json(self.line)


class OutcomeAt(NamedTuple):
    """The Task Outcome a record answers: its scope, its ``task_outcome_ref`` (line form) and position."""

    scope_id: str
    task_outcome_ref: dict[str, str]
    task_outcome_position: int


class MatchTarget(Protocol):
    """The candidate a match names (``matching.Candidate``)."""

    @property
    def ref_json(self) -> dict[str, Any]: ...

    @property
    def signature_key(self) -> str: ...


class FrozenCandidates(Protocol):
    """The frozen candidate set a match cites (``matching.CandidateSet``)."""

    @property
    def mode(self) -> str: ...

    @property
    def refs_line(self) -> orjson.Fragment: ...

    @property
    def digest(self) -> str: ...


def match(
    at: OutcomeAt,
    *,
    failure_ref: dict[str, Any],
    candidates: FrozenCandidates,
    result: str,
    target: MatchTarget | None,
    prefix: "hashlib._Hash",
) -> Emitted:
    """A MatchRecord for one failure item of the Outcome ``at``, against the frozen set ``candidates``.

    ``prefix`` is sha256 already fed with the canonical JSON's first two keys,
    ``artifact_ref`` and ``candidate_refs`` (``CandidateSet.match_prefix``);
    every other key sorts after them, so their canonical JSON continues it.
    """
    scope_id, task_outcome_ref, task_outcome_position = at
    signature_key = None if target is None else target.signature_key
    rest = {
        "candidate_set_digest": candidates.digest,
        "candidate_set_mode": candidates.mode,
        "failure_ref": failure_ref,
        "result": result,
        "scope_id": scope_id,
        "signature_key": signature_key,
        "task_outcome_position": task_outcome_position,
        "task_outcome_ref": task_outcome_ref,
    }
    prefix.update(memoryview(orjson.dumps(rest, option=_SORTED))[1:])  # without its "{"
    match_digest = "sha256:" + prefix.hexdigest()
    line = orjson.dumps(
        {
            "record": "match",
            "scope_id": scope_id,
            "task_outcome_ref": task_outcome_ref,
            "task_outcome_position": task_outcome_position,
            "failure_ref": failure_ref,
            "candidate_set_mode": candidates.mode,
            "candidate_refs": candidates.refs_line,
            "candidate_set_digest": candidates.digest,
            "result": result,
            "artifact_ref": None if target is None else target.ref_json,
            "signature_key": signature_key,
            "match_digest": match_digest,
        }
    )
    return Emitted("match", scope_id, match_digest, line)


def observation(fields: dict[str, Any]) -> Emitted:
    """``fields`` in ObservationRecord order without ``record`` and ``observation_id``."""
    observation_id = digest_bytes(orjson.dumps(fields, option=_SORTED))
    line = orjson.dumps({"record": "observation", "observation_id": observation_id, **fields})
    return Emitted("observation", fields["scope_id"], observation_id, line)


def _plain(kind: str, body: dict[str, Any]) -> Emitted:
    # Review proposals and admissions carry no id field; their id is their canonical digest.
    data = {"record": kind, **body}
    return Emitted(kind, body["scope_id"], digest(data), dumps(data))


def review_proposal(
    scope_id: str,
    target: dict[str, Any],
    proposal: dict[str, Any],
    sources: list[dict[str, str]],
    reason: str,
    streak: int,
) -> Emitted:
    return _plain(
        "review_proposal",
        {
            "scope_id": scope_id,
            "target": target,
            "proposal": proposal,
            "sources": sources,
            "reason": reason,
            "streak": streak,
        },
    )


def admission(
    scope_id: str,
    candidate_id: str,
    violations: list[dict[str, str]],
    warnings: list[dict[str, Any]],
    target: dict[str, Any] | None,
    recall_cue: str | None,
) -> Emitted:
    return _plain(
        "admission",
        {
            "scope_id": scope_id,
            "candidate_id": candidate_id,
            "decision": "dropped" if violations else "admitted",
            "violations": violations,
            "warnings": warnings,
            "target": target,
            "recall_cue": recall_cue,
        },
    )


def dead_letter(
    origin: Origin,
    scope_id: str | None,
    position: int | None,
    error: str,
    detail: str,
    raw: str,
) -> Emitted:
    """Contract: ``dead_letter_id`` is the digest of the record without ``record`` and itself."""
    fields = {
        "origin": dict(origin),
        "scope_id": scope_id,
        "position": position,
        "error": error,
        "detail": detail,
        "raw": raw,
    }
    dead_letter_id = digest_bytes(canonical_json(fields))
    line = dumps({"record": "dead_letter", "dead_letter_id": dead_letter_id, **fields})
    return Emitted("dead_letter", scope_id, dead_letter_id, line, error)
