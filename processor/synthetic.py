"""Seeded synthetic journals: realistic mixes of Experiences, Handoffs, Receipts and Outcomes.

Used by the property tests, the Kafka-vs-embedded oracle tests and the
benchmarks, and by ``recurrence generate`` so a user can try the product on
more than the bundled example. Same seed, same journal, byte for byte.
"""

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

_CUES = [
    "Generated sources are in sync with the OpenAPI contract",
    "pytest fails with port already bound in sandbox",
    "Database migration applied before deploy",
    "Lockfile matches the declared dependencies",
    "Integration test is flaky under parallel load",
    "Secrets are not committed to the repository",
    "Docs build without warnings",
    "Schema registry accepts the new version",
]
_CONDITIONS = [
    "openapi/powercontext.yaml was edited",
    "the test suite ran in a sandbox",
    "a migration file was added",
    "pyproject.toml was edited",
    "tests ran with -n auto",
    "a config file was changed",
    "docs were edited",
    "an Avro schema was changed",
]
_RECEIPT_SCHEMA = "powercontext.handoff-receipt.v1"
_OUTCOME_SCHEMA = "powercontext.task-outcome.v1"
_SURFACES = ["experience_content", "experience_content", "working_state", "recall_policy", "acceptance_check"]


@dataclass(frozen=True)
class JournalSpec:
    entries: int = 1000
    scopes: int = 8
    seed: int = 0
    garbage_ratio: float = 0.0
    candidate_ratio: float = 0.03
    # Cap on distinct Experience artifacts per scope (None: keep adding). With a
    # cap, later Experience entries are new revisions, so a scope's working set
    # stops growing while the journal keeps going.
    experiences_per_scope: int | None = None
    # How far back a scope's entries reach when they cite (None: anywhere in its history).
    # With a window, evidence, receipts, Handoffs and Outcomes are cited from the most
    # recent ``recent_window`` of each kind, the way a task cites what it just produced:
    # with ``experiences_per_scope``, the rows a replay keeps touching stay bounded.
    recent_window: int | None = None
    # Share of entries that re-send an earlier entry of the scope: identical (a
    # silent re-delivery), or changed at its old position (position_conflict) or
    # at a new one (immutable_conflict). 0 draws nothing, so the journal is the
    # same as without the field.
    conflict_ratio: float = 0.0


def _ref(family: str, artifact_id: str, revision: int) -> dict[str, Any]:
    return {"family": family, "artifact_id": artifact_id, "revision": revision}


def _cite_source(source_id: str) -> dict[str, Any]:
    return {"kind": "source", "source_ref": {"source_type": "content", "source_id": source_id}}


def _source(
    scope: str, position: int, source_id: str, kind: str, schema: str, content: dict[str, Any]
) -> dict[str, Any]:
    return {
        "scope_id": scope,
        "position": position,
        "type": "source",
        "source_ref": {"source_type": "content", "source_id": source_id},
        "source": {
            "name": "content",
            "materialization": "captured",
            "metadata": {"kind": kind, "schema": schema},
            "content": orjson.dumps(content).decode(),
        },
    }


# Under a recent window a Handoff cites one of an Experience's few latest revisions (current
# guidance), so the cited revisions stay few however many revisions an Experience accumulates.
RECENT_REVISIONS = 3


class _Scope:
    def __init__(
        self, name: str, rng: random.Random, experience_cap: int | None = None, window: int | None = None
    ) -> None:
        self.name = name
        self.rng = rng
        self.experience_cap = experience_cap
        self.window = window
        self.position = 0
        self.evidence: list[str] = []
        self.experiences: dict[str, int] = {}  # artifact_id -> head revision
        self.handoffs: dict[str, int] = {}
        self.receipts: list[str] = []
        self.outcomes: list[str] = []
        self.counter = 0
        self.sent: list[dict[str, Any]] = []  # a bounded sample of earlier entries, for conflicts

    def next_position(self) -> int:
        # Occasional gaps: positions need only increase.
        self.position += 1 if self.rng.random() < 0.9 else self.rng.randint(2, 4)
        return self.position

    def uid(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.name}-{self.counter}"

    def _oldest(self, artifact_id: str) -> int:
        """The oldest revision of an Experience a Handoff may still cite."""
        head = self.experiences[artifact_id]
        return 1 if self.window is None else max(1, head - min(self.window, RECENT_REVISIONS) + 1)

    def _keep(self, pool: list[str], item: str) -> None:
        pool.append(item)
        if self.window is not None and len(pool) > self.window:
            del pool[0]

    def entry(self) -> dict[str, Any]:
        rng = self.rng
        if len(self.evidence) < 2 or rng.random() < 0.08:
            return self._evidence()
        if not self.experiences or rng.random() < 0.06:
            return self._experience()
        if not self.handoffs or rng.random() < 0.08:
            return self._handoff()
        if not self.receipts or rng.random() < 0.12:
            return self._receipt()
        return self._outcome()

    def _evidence(self) -> dict[str, Any]:
        source_id = self.uid("ev")
        self._keep(self.evidence, source_id)
        return _source(self.name, self.next_position(), source_id, "git-change", "x.v1", {"note": "evidence"})

    def _experience(self) -> dict[str, Any]:
        rng = self.rng
        full = self.experience_cap is not None and len(self.experiences) >= self.experience_cap
        if self.experiences and (full or rng.random() < 0.3):
            artifact_id = rng.choice(sorted(self.experiences))
            revision = self.experiences[artifact_id] + 1
        else:
            artifact_id, revision = self.uid("E"), 1
        self.experiences[artifact_id] = revision
        index = rng.randrange(len(_CUES))
        content: dict[str, Any] = {
            "situation": f"situation {artifact_id}",
            "action": "action",
            "outcome": "outcome",
            "lesson": "lesson",
        }
        if rng.random() < 0.85:
            content["failure"] = {
                "signature": {"recall_cue": _CUES[index], "symptom": None},
                "repair_surface": rng.choice(_SURFACES),
                "verification": {"condition": _CONDITIONS[index], "check_subject": _CUES[index]},
            }
        return {
            "scope_id": self.name,
            "position": self.next_position(),
            "type": "artifact",
            "artifact": {
                "family": "experience",
                "artifact_id": artifact_id,
                "revision": revision,
                "content": content,
                "lineage": {"sources": [], "artifacts": []},
            },
        }

    def _handoff(self) -> dict[str, Any]:
        rng = self.rng
        artifact_id = self.uid("H")
        self.handoffs[artifact_id] = 1
        if self.window is not None and len(self.handoffs) > self.window:
            del self.handoffs[next(iter(self.handoffs))]
        cited = rng.sample(sorted(self.experiences), k=min(len(self.experiences), rng.randint(1, 3)))
        citations = [
            {
                "kind": "artifact",
                "artifact_ref": _ref("experience", e, rng.randint(self._oldest(e), self.experiences[e])),
            }
            for e in cited
        ]
        return {
            "scope_id": self.name,
            "position": self.next_position(),
            "type": "artifact",
            "artifact": {
                "family": "handoff",
                "artifact_id": artifact_id,
                "revision": 1,
                "content": {
                    "objective": "continue",
                    "state": [{"text": "state", "citations": citations}],
                    "disposition": "continuable",
                    "next_action": None,
                    "omissions": [],
                },
                "lineage": {"sources": [], "artifacts": []},
            },
        }

    def _receipt(self) -> dict[str, Any]:
        rng = self.rng
        source_id = self.uid("R")
        self._keep(self.receipts, source_id)
        handoff = rng.choice(sorted(self.handoffs))
        status = "accepted" if rng.random() < 0.85 else "declined"
        content: dict[str, Any] = {
            "schema": "powercontext.handoff-receipt.v1",
            "trust": "untrusted_observation",
            "receiver": "agent",
            "status": status,
            "selection": "exact",
            "selected_revision": _ref("handoff", handoff, 1),
            "prepared_digest": None,
            "receiver_checks": None,
            "evidence_status": "available",
            "unavailable_evidence": [],
            "message": None if status == "accepted" else "declined",
        }
        return _source(self.name, self.next_position(), source_id, "handoff-receipt", _RECEIPT_SCHEMA, content)

    def _claim(self, text: str) -> dict[str, Any]:
        rng = self.rng
        if rng.random() < 0.75:
            evidence = [_cite_source(rng.choice(self.evidence))]
            if rng.random() < 0.05:
                evidence = [_cite_source("missing-evidence")]
            return {"text": text, "basis": "verified", "evidence": evidence}
        return {"text": text, "basis": "declared", "evidence": []}

    def _outcome(self) -> dict[str, Any]:
        rng = self.rng
        source_id = self.uid("O")
        self._keep(self.outcomes, source_id)
        index = rng.randrange(len(_CUES))
        status = rng.choice(["succeeded", "failed", "failed", "blocked", "partial"])
        check_status = rng.choice(["passed", "passed", "failed", "timed_out", "skipped", "unavailable"])
        name = _CUES[index] if rng.random() < 0.9 else _CUES[index].upper() + " "
        checks = [{"name": name, "status": check_status, "details": None, **self._claim(name)}]
        checks[0].pop("text")
        if rng.random() < 0.1:
            checks.append({**checks[0]})  # a duplicated check makes verdicts ambiguous
        observations = [self._claim(_CONDITIONS[index] if rng.random() < 0.8 else "unrelated observation")]
        receipt = {"source_type": "content", "source_id": rng.choice(self.receipts)} if rng.random() < 0.7 else None
        content: dict[str, Any] = {
            "schema": "powercontext.task-outcome.v1",
            "trust": "untrusted_observation",
            "objective": "do the task",
            "status": status,
            "summary": "summary",
            "handoff_receipt_ref": receipt,
            "observations": observations,
            "checks": checks,
            "produced_artifacts": [],
            "remaining_work": [],
        }
        return _source(self.name, self.next_position(), source_id, "task-outcome", _OUTCOME_SCHEMA, content)

    def remember(self, entry: dict[str, Any]) -> None:
        if len(self.sent) < 64:
            self.sent.append(entry)
        else:
            self.sent[self.rng.randrange(64)] = entry

    def conflict(self) -> dict[str, Any]:
        """An earlier entry again: identical, changed at its position, or changed at a new position."""
        rng = self.rng
        earlier: dict[str, Any] = orjson.loads(orjson.dumps(rng.choice(self.sent)))
        how = rng.random()
        if how < 0.4:
            return earlier  # a re-delivery: a silent no-op
        body = earlier.get("source") or earlier.get("candidate") or earlier["artifact"]
        if "content" in body and isinstance(body["content"], str):
            body["content"] = body["content"][:-1] + " }"  # same JSON, other text: different content
        else:
            body["reason" if "candidate_id" in body else "lineage"] = (
                "changed" if "candidate_id" in body else {"sources": [], "artifacts": [_ref("skill", "x", 1)]}
            )
        if how >= 0.7:
            earlier["position"] = self.next_position()  # immutable_conflict at a new position
        return earlier

    def candidate(self) -> dict[str, Any]:
        rng = self.rng
        index = rng.randrange(len(_CUES))
        sources = [{"source_type": "content", "source_id": rng.choice(self.outcomes or self.evidence)}]
        return {
            "scope_id": self.name,
            "position": self.next_position(),
            "type": "candidate",
            "candidate": {
                "candidate_id": self.uid("c"),
                "family": "experience",
                "proposal": {
                    "situation": "s",
                    "action": "a",
                    "outcome": "o",
                    "lesson": "l",
                    "failure": {
                        "signature": {"recall_cue": _CUES[index] + (" again" if rng.random() < 0.5 else "")},
                        "repair_surface": rng.choice(_SURFACES),
                        "verification": {"condition": _CONDITIONS[index], "check_subject": _CUES[index]},
                    },
                },
                "sources": sources,
                "artifacts": [],
                "target": None,
                "reason": "recurring failure",
            },
        }


_GARBAGE = [
    b"{not json",
    b'{"scope_id": "s", "position": 1, "type": "mystery"}',
    b"[1, 2, 3]",
    b'{"scope_id": "s", "position": "seven", "type": "source"}',
    b"\xff\xfe\x00binary",
]


def generate(spec: JournalSpec) -> Iterator[bytes]:
    """Yield journal lines (without newline); per-scope order is preserved."""
    rng = random.Random(spec.seed)
    scopes = [
        _Scope(f"scope-{i:03d}", random.Random(rng.random()), spec.experiences_per_scope, spec.recent_window)
        for i in range(spec.scopes)
    ]
    for _ in range(spec.entries):
        if spec.garbage_ratio and rng.random() < spec.garbage_ratio:
            yield rng.choice(_GARBAGE)
            continue
        scope = rng.choice(scopes)
        if spec.conflict_ratio and scope.sent and rng.random() < spec.conflict_ratio:
            yield orjson.dumps(scope.conflict())
            continue
        entry = scope.candidate() if scope.outcomes and rng.random() < spec.candidate_ratio else scope.entry()
        if spec.conflict_ratio:
            scope.remember(entry)
        yield orjson.dumps(entry)


def write(spec: JournalSpec, path: str) -> int:
    count = 0
    with open(path, "wb") as handle:
        for line in generate(spec):
            handle.write(line + b"\n")
            count += 1
    return count
