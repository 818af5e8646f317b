"""Journal builders for tests: readable construction of Sources, revisions and candidates.

Each builder returns a journal entry as a dict; ``Journal`` assigns positions
in order per scope and runs entries through a fresh engine.
"""

from dataclasses import dataclass, field
from typing import Any

import orjson

from recurrence_ledger.processor.core.engine import Engine
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.records import Emitted
from recurrence_ledger.processor.core.state import row_cache
from recurrence_ledger.processor.store.base import StateStore, Transaction
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.schemas.canonical import dumps
from recurrence_ledger.schemas.records import OutputRecord

SCOPE = "team-a"
CUE = "Generated sources are in sync"  # failure_block()'s default cue and check_subject
CONDITION = "openapi.yaml was edited"  # failure_block()'s default condition


def source_ref(source_id: str) -> dict[str, str]:
    return {"source_type": "content", "source_id": source_id}


def artifact_ref(artifact_id: str, revision: int = 1, family: str = "experience") -> dict[str, Any]:
    return {"family": family, "artifact_id": artifact_id, "revision": revision}


def cite(source_id: str) -> list[dict[str, Any]]:
    return [{"kind": "source", "source_ref": source_ref(source_id)}]


def failure_block(
    cue: str = CUE,
    condition: str = CONDITION,
    check_subject: str | None = None,
    surface: str = "experience_content",
) -> dict[str, Any]:
    return {
        "signature": {"recall_cue": cue, "symptom": None},
        "repair_surface": surface,
        "verification": {"condition": condition, "check_subject": check_subject or cue},
    }


def experience_content(failure: dict[str, Any] | None = None, outcome: str = "outcome text") -> dict[str, Any]:
    content: dict[str, Any] = {"situation": "situation", "action": "action", "outcome": outcome, "lesson": "lesson"}
    if failure is not None:
        content["failure"] = failure
    return content


def claim(text: str, verified: bool = True, evidence: str = "ev-1") -> dict[str, Any]:
    if verified:
        return {"text": text, "basis": "verified", "evidence": cite(evidence)}
    return {"text": text, "basis": "declared", "evidence": []}


def check(name: str, status: str = "passed", verified: bool = True, evidence: str = "ev-1") -> dict[str, Any]:
    body = {"name": name, "status": status, "details": None}
    if verified:
        return {**body, "basis": "verified", "evidence": cite(evidence)}
    return {**body, "basis": "declared", "evidence": []}


@dataclass
class Journal:
    """An in-order journal for one or more scopes, with positions assigned per scope."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)

    def _add(self, body: dict[str, Any], scope: str, position: int | None) -> dict[str, Any]:
        if position is None:
            position = self.positions.get(scope, 0) + 1
        self.positions[scope] = max(position, self.positions.get(scope, 0))
        entry = {"scope_id": scope, "position": position, **body}
        self.entries.append(entry)
        return entry

    def evidence(self, source_id: str = "ev-1", scope: str = SCOPE, position: int | None = None) -> dict[str, Any]:
        return self.source(source_id, "git-change", {"note": "evidence"}, scope=scope, position=position)

    def source(
        self,
        source_id: str,
        kind: str,
        content: Any,
        scope: str = SCOPE,
        position: int | None = None,
        schema: str | None = None,
    ) -> dict[str, Any]:
        metadata = {"kind": kind} if schema is None else {"kind": kind, "schema": schema}
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        body = {
            "type": "source",
            "source_ref": source_ref(source_id),
            "source": {"name": "content", "materialization": "captured", "metadata": metadata, "content": text},
        }
        return self._add(body, scope, position)

    def experience(
        self,
        artifact_id: str = "E7",
        revision: int = 1,
        failure: dict[str, Any] | None = None,
        scope: str = SCOPE,
        position: int | None = None,
        outcome: str = "outcome text",
    ) -> dict[str, Any]:
        return self.artifact("experience", artifact_id, revision, experience_content(failure, outcome), scope, position)

    def artifact(
        self,
        family: str,
        artifact_id: str,
        revision: int,
        content: Any,
        scope: str = SCOPE,
        position: int | None = None,
    ) -> dict[str, Any]:
        body = {
            "type": "artifact",
            "artifact": {
                "family": family,
                "artifact_id": artifact_id,
                "revision": revision,
                "content": content,
                "lineage": {"sources": [], "artifacts": []},
            },
        }
        return self._add(body, scope, position)

    def handoff(
        self,
        artifact_id: str = "H12",
        cites: list[tuple[str, int]] | None = None,
        revision: int = 1,
        next_action_cites: list[tuple[str, int]] | None = None,
        scope: str = SCOPE,
        position: int | None = None,
    ) -> dict[str, Any]:
        def statement(refs: list[tuple[str, int]]) -> dict[str, Any]:
            citations = [{"kind": "artifact", "artifact_ref": artifact_ref(a, r)} for a, r in refs]
            return {"text": "state", "citations": citations or cite("ev-1")}

        content = {
            "objective": "finish the task",
            "state": [statement(cites if cites is not None else [("E7", 1)])],
            "disposition": "continuable",
            "next_action": statement(next_action_cites) if next_action_cites else None,
            "omissions": [],
        }
        return self.artifact("handoff", artifact_id, revision, content, scope, position)

    def receipt(
        self,
        source_id: str = "R12",
        handoff: tuple[str, int] = ("H12", 1),
        status: str = "accepted",
        selection: str = "exact",
        scope: str = SCOPE,
        position: int | None = None,
    ) -> dict[str, Any]:
        content: dict[str, Any] = {
            "schema": "powercontext.handoff-receipt.v1",
            "trust": "untrusted_observation",
            "receiver": "agent-b",
            "status": status,
            "selection": selection,
            "selected_revision": None if selection == "prepared" else artifact_ref(handoff[0], handoff[1], "handoff"),
            "prepared_digest": "sha256:" + "0" * 64 if selection == "prepared" else None,
            "receiver_checks": None,
            "evidence_status": "available",
            "unavailable_evidence": [],
            "message": None if status == "accepted" else "not accepted",
        }
        return self.source(source_id, "handoff-receipt", content, scope, position, "powercontext.handoff-receipt.v1")

    def outcome(
        self,
        source_id: str,
        status: str = "succeeded",
        receipt: str | None = "R12",
        observations: list[dict[str, Any]] | None = None,
        checks: list[dict[str, Any]] | None = None,
        scope: str = SCOPE,
        position: int | None = None,
    ) -> dict[str, Any]:
        content = {
            "schema": "powercontext.task-outcome.v1",
            "trust": "untrusted_observation",
            "objective": "do the task",
            "status": status,
            "summary": "summary",
            "handoff_receipt_ref": None if receipt is None else source_ref(receipt),
            "observations": observations or [claim("unrelated observation", verified=False)],
            "checks": checks or [],
            "produced_artifacts": [],
            "remaining_work": [],
        }
        return self.source(source_id, "task-outcome", content, scope, position, "powercontext.task-outcome.v1")

    def candidate(
        self,
        candidate_id: str,
        proposal: dict[str, Any],
        sources: list[str] | None = None,
        scope: str = SCOPE,
        position: int | None = None,
    ) -> dict[str, Any]:
        body = {
            "type": "candidate",
            "candidate": {
                "candidate_id": candidate_id,
                "family": "experience",
                "proposal": proposal,
                "sources": [source_ref(s) for s in (sources if sources is not None else ["O1"])],
                "artifacts": [],
                "target": None,
                "reason": "recurring failure",
            },
        }
        return self._add(body, scope, position)

    def lines(self) -> list[bytes]:
        return [dumps(entry) for entry in self.entries]


def linked_setup(
    journal: Journal | None = None, failure: dict[str, Any] | None = None, surface: str = "experience_content"
) -> Journal:
    """Evidence, E7 r1 with a failure block, H12 citing it, an accepted exact receipt R12."""
    journal = journal or Journal()
    journal.evidence("ev-1")
    journal.experience("E7", 1, failure or failure_block(surface=surface))
    journal.handoff("H12", [("E7", 1)])
    journal.receipt("R12")
    return journal


def recurrence(journal: Journal, source_id: str, linked: bool = False, cue: str = CUE) -> None:
    """One Task Outcome whose verified failed check is named exactly ``cue``: one ``recurred`` (through the
    receipt R12 of ``linked_setup`` when ``linked``)."""
    journal.outcome(source_id, status="failed", receipt="R12" if linked else None, checks=[check(cue, "failed")])


def avoided(journal: Journal, source_id: str) -> None:
    """A linked Outcome with the verified condition and the bound check passing: one ``avoided``."""
    journal.outcome(
        source_id, status="succeeded", receipt="R12", observations=[claim(CONDITION)], checks=[check(CUE, "passed")]
    )


class Runner:
    """A fresh engine over a store; feeds raw lines and commits after each.

    Every record the engine emits is validated against its pydantic model on
    the way out (matrix and own id re-checked), so every test that feeds
    entries also checks that the engine builds only valid records.
    """

    def __init__(self, store: StateStore | None = None, config: EngineConfig | None = None) -> None:
        self.store = store or MemoryStore()
        self.config = config or EngineConfig()
        self.cache = row_cache()
        self.lines_fed = 0
        self._begin()

    def _begin(self) -> None:
        self.txn = Transaction(self.store, self.cache)
        self.engine = Engine(self.txn, self.config)

    def emit(self, lines: list[bytes]) -> list[Emitted]:
        out: list[Emitted] = []
        for line in lines:
            self.lines_fed += 1
            out.extend(self.engine.process(line, {"line": self.lines_fed}))
            self.txn.commit()
            self._begin()
        return out

    def feed(self, lines: list[bytes]) -> list[OutputRecord]:
        return [emitted.model() for emitted in self.emit(lines)]

    def last_position(self, scope: str = SCOPE) -> int:
        meta = self.engine.state.scope(scope)
        return 0 if meta is None else meta.last_position

    def stats(self, scope: str = SCOPE, top: int | None = None) -> dict[str, Any]:
        result = self.engine.statistics(scope, top)
        assert len(result) == 1
        return result[0].recurrence.model_dump(mode="json")


def run(journal: Journal, config: EngineConfig | None = None) -> tuple[list[OutputRecord], Runner]:
    runner = Runner(config=config)
    return runner.feed(journal.lines()), runner


def kinds(records: list[OutputRecord]) -> list[str]:
    """Compact view: 'match:matched', 'observation:selected', 'dead_letter:code', ..."""
    out = []
    for record in records:
        data = record.model_dump()
        detail = data.get("event") or data.get("result") or data.get("error") or data.get("decision") or ""
        out.append(f"{record.record}:{detail}" if detail else record.record)
    return out
