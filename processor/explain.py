"""``recurrence explain``: why was this counted? The evidence chain behind any record or revision.

Given an ``observation_id``, a ``match_digest`` or a ``dead_letter_id`` (or any
record id a runner indexed), or a revision ``family/artifact_id@revision``,
this module assembles the chain from three places, each link with its
journal position:

* the record itself, read back from where the runner wrote it (the ledger
  file, the output topics) through its id index;
* the state's immutable rows: Sources (receipts), artifact revisions (the
  Handoff's citations, the Experience's failure record), the group's counts,
  streak history and threshold crossings;
* the journal entries at those positions (the Task Outcome's items, the
  Handoff's statements), re-read through the position's recorded origin, so
  item texts are shown without the state keeping them.

For a ``selected`` observation the terminal verdict is re-derived with the
ledger's own rules as of the Outcome's position (evidence accepted later does
not count), which is how ``unknown`` gets a reason. Nothing here writes; a
missing journal or ledger degrades to what the state alone can say.

What is read back must be what the state indexed: a record whose id,
re-derived from its content, is not the id asked for, or a journal line that
is not the entry the state applied at that position, stops the explanation
(``ArchiveMismatchError``: exit 2, HTTP 409) instead of explaining another
record. An id that cannot exist (not a digest, a revision outside
1..2^63-1, fields longer than the contract allows) is not looked up at all.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson
from pydantic import ValidationError

from ..schemas.canonical import digest
from ..schemas.constants import MAX_ARTIFACT_FIELD_LENGTH, MAX_POSITION
from ..schemas.journal import JOURNAL_ENTRY, ArtifactEntry, HandoffArtifact, SourceEntry
from ..schemas.powercontext import (
    HandoffArtifactCitation,
    HandoffCitation,
    HandoffContent,
    HandoffSourceCitation,
    TaskOutcome,
)
from .core.ledger import candidate
from .core.matching import (
    Candidate,
    Item,
    avoided_evidence,
    failure_items,
    verified_checks,
    verified_observations,
)
from .core.records import identity_of, is_record_id
from .core.state import ArtifactKey, SourceKey, State
from .exceptions import REBUILD, LedgerMismatchError
from .host.printable import echoed, printable

TEXT_PREVIEW = 240


class Archive(Protocol):
    """Where a runner keeps what the state does not: the records it wrote and the journal it read."""

    def record(self, record_id: str) -> bytes | None:
        """The output record (its JSON line) with this id, or None if it is not indexed or readable."""
        ...

    def entry(self, origin: dict[str, Any]) -> bytes | None:
        """The raw journal entry at this origin, or None if the journal is not readable."""
        ...


class NotFoundError(LookupError):
    """No record or revision with that identity."""


class ArchiveMismatchError(LedgerMismatchError):
    """What was read back is not what the state indexed: the ledger, topic or journal is not the state's."""


IDS_ARE: Final = "ids are observation_id, match_digest, dead_letter_id (sha256:<64 hex>) or family/artifact_id@revision"
# Longer than MAX_POSITION's 19 digits: out of range without converting (int() refuses 4,300+ digits).
_MAX_REVISION_DIGITS: Final = len(str(MAX_POSITION))


@dataclass(frozen=True)
class RevisionRef:
    family: str
    artifact_id: str
    revision: int

    @classmethod
    def parse(cls, text: str) -> "RevisionRef | None":
        """``family/artifact_id@revision`` (ASCII digits), or None when ``text`` is not shaped like one.

        A shape whose parts cannot exist (a revision outside 1..2^63-1, a field longer than the contract's
        limit) is a RevisionRef that ``possible`` says no to."""
        head, at, revision = text.rpartition("@")
        family, slash, artifact_id = head.partition("/")
        if not (at and slash and family and artifact_id and revision.isascii() and revision.isdigit()):
            return None
        number = int(revision) if len(revision) <= _MAX_REVISION_DIGITS else MAX_POSITION + 1
        return cls(family, artifact_id, number)

    @property
    def possible(self) -> bool:
        return (
            1 <= self.revision <= MAX_POSITION
            and len(self.family) <= MAX_ARTIFACT_FIELD_LENGTH
            and len(self.artifact_id) <= MAX_ARTIFACT_FIELD_LENGTH
        )

    @property
    def key(self) -> ArtifactKey:
        return (self.family, self.artifact_id, self.revision)


def _impossible(identity: str) -> str:
    return (
        f"no revision {echoed(identity)} can exist (revision 1..{MAX_POSITION}, family and artifact_id up "
        f"to {MAX_ARTIFACT_FIELD_LENGTH} characters)"
    )


def identity_kind(identity: str) -> RevisionRef | None:
    """The revision ``identity`` names, or None for a record id; NotFoundError for an id that cannot exist."""
    revision = RevisionRef.parse(identity)
    if revision is not None:
        if not revision.possible:
            raise NotFoundError(_impossible(identity))
        return revision
    if not is_record_id(identity):
        raise NotFoundError(f"{echoed(identity)} is not an id; {IDS_ARE}")
    return None


def _ref_text(ref: dict[str, Any] | list[Any] | tuple[Any, ...] | None) -> str:
    if ref is None:
        return "none"
    if isinstance(ref, dict):
        if "family" in ref:
            return f"{ref['family']}/{ref['artifact_id']}@{ref['revision']}"
        return f"{ref['source_type']}/{ref['source_id']}"
    return f"{ref[0]}/{ref[1]}@{ref[2]}" if len(ref) == 3 else f"{ref[0]}/{ref[1]}"


def _preview(text: str) -> str:
    return text if len(text) <= TEXT_PREVIEW else text[: TEXT_PREVIEW - 1] + "…"


class Explainer:
    def __init__(self, state: State, archive: Archive) -> None:
        self.state = state
        self.archive = archive

    # -- entry points ------------------------------------------------------------------------
    def explain(self, identity: str) -> dict[str, Any]:
        revision = identity_kind(identity)
        if revision is not None:
            return self.revision(revision)
        record = self._record(identity)
        if record is None:
            raise NotFoundError(f"no record with id {echoed(identity)} in this state's index")
        kind = record.get("record")
        if kind == "observation":
            return self.observation(record)
        if kind == "match":
            return self.match(record)
        if kind == "dead_letter":
            return self.dead_letter(record)
        return {"kind": kind, "id": identity, "record": record, "chain": []}

    def _record(self, record_id: str) -> dict[str, Any] | None:
        """The indexed record with this id, read back; refused when what was read is another record."""
        line = self.archive.record(record_id)
        if line is None:
            return None
        found = identity_of(line)
        if found != record_id:
            what = "a line that is not a valid record" if found is None else f"record {found}"
            raise ArchiveMismatchError(
                f"where the state indexed record {echoed(record_id)} the ledger holds {what}: the ledger (or "
                "output topic) is not the one the state wrote (edited, cut, replaced); pass the state's ledger "
                f"(--out), or rebuild: {REBUILD}"
            )
        return orjson.loads(line)  # type: ignore[no-any-return]

    # -- observations and matches -----------------------------------------------------------------
    def observation(self, record: dict[str, Any]) -> dict[str, Any]:
        scope_id = record["scope_id"]
        position = record["task_outcome_position"]
        outcome_ref = (record["task_outcome_ref"]["source_type"], record["task_outcome_ref"]["source_id"])
        art = record["artifact_ref"]
        ref: ArtifactKey = (art["family"], art["artifact_id"], art["revision"])
        chain = [self._outcome_link(scope_id, outcome_ref, position)]
        outcome = self._outcome(scope_id, position)
        link = self._link(scope_id, position, record, outcome)
        if link is not None:
            chain.extend(self._handoff_links(scope_id, link, ref))
        chain.append(self._experience_link(scope_id, ref))
        event = record["event"]
        verdict: dict[str, Any] | None = None
        if event == "recurred":
            match = self._record(record["recurrence_match_digest"])
            chain.append(self._item_link("failure item", record["failure_ref"], outcome))
            chain.append(self._match_link(match, record["recurrence_match_digest"]))
        elif event == "avoided":
            chain.append(self._item_link("condition observation", record["condition_ref"], outcome))
            chain.append(self._item_link("bound check (passed)", record["check_ref"], outcome))
        else:
            verdict = self._rederive(scope_id, position, ref, outcome, record)
        chain.append(
            {
                "link": "observation",
                "position": position,
                "text": f"{event} for {_ref_text(art)} under key {record['signature_key']!r}",
                "observation_id": record["observation_id"],
            }
        )
        result: dict[str, Any] = {
            "kind": "observation",
            "id": record["observation_id"],
            "event": event,
            "scope_id": scope_id,
            "chain": chain,
        }
        if verdict is not None:
            result["verdict"] = verdict
        return result

    def match(self, record: dict[str, Any]) -> dict[str, Any]:
        scope_id = record["scope_id"]
        position = record["task_outcome_position"]
        outcome_ref = (record["task_outcome_ref"]["source_type"], record["task_outcome_ref"]["source_id"])
        outcome = self._outcome(scope_id, position)
        chain = [
            self._outcome_link(scope_id, outcome_ref, position),
            self._item_link("failure item", record["failure_ref"], outcome),
            self._match_link(record, record["match_digest"]),
        ]
        if record["artifact_ref"] is not None:
            art = record["artifact_ref"]
            chain.append(self._experience_link(scope_id, (art["family"], art["artifact_id"], art["revision"])))
        return {
            "kind": "match",
            "id": record["match_digest"],
            "result": record["result"],
            "scope_id": scope_id,
            "chain": chain,
        }

    # -- dead letters -------------------------------------------------------------------------------
    def dead_letter(self, record: dict[str, Any]) -> dict[str, Any]:
        chain: list[dict[str, Any]] = [
            {
                "link": "origin",
                "text": f"journal entry at {self._origin_text(record['origin'])}",
                "origin": record["origin"],
            },
            {"link": "rejection", "text": f"{record['error']}: {record['detail']}", "error": record["error"]},
        ]
        scope_id, position = record.get("scope_id"), record.get("position")
        if isinstance(scope_id, str) and isinstance(position, int):
            accepted = self.state.entry_origin(scope_id, position)
            meta = self.state.scope(scope_id)
            last = 0 if meta is None else meta.last_position
            if accepted is not None:
                chain.append(
                    {
                        "link": "accepted entry",
                        "position": position,
                        "text": f"position {position} of scope {scope_id} holds the entry from "
                        f"{self._origin_text(accepted)}",
                        "origin": accepted,
                    }
                )
            else:
                chain.append(
                    {
                        "link": "scope",
                        "position": position,
                        "text": f"scope {scope_id} never accepted position {position}; it is at {last}",
                    }
                )
        chain.append(
            {"link": "consequence", "text": "nothing of this entry was applied; it did not consume its position"}
        )
        return {"kind": "dead_letter", "id": record["dead_letter_id"], "scope_id": scope_id, "chain": chain}

    # -- revisions: the yield card ---------------------------------------------------------------------
    def revision(self, ref: RevisionRef) -> dict[str, Any]:
        if not ref.possible:
            raise NotFoundError(_impossible(f"{ref.family}/{ref.artifact_id}@{ref.revision}"))
        cards = [self._card(scope_id, ref.key) for scope_id in self._scopes_with(ref.key)]
        if not cards:
            raise NotFoundError(
                f"no scope holds revision {printable(ref.family)}/{printable(ref.artifact_id)}@{ref.revision}"
            )
        return {"kind": "revision", "id": f"{ref.family}/{ref.artifact_id}@{ref.revision}", "cards": cards}

    def _scopes_with(self, ref: ArtifactKey) -> Iterator[str]:
        for scope_id in self.state.scope_ids():
            if self.state.artifact(scope_id, ref) is not None:
                yield scope_id

    def _card(self, scope_id: str, ref: ArtifactKey) -> dict[str, Any]:
        stored = self.state.artifact(scope_id, ref)
        assert stored is not None
        head = self.state.head(scope_id, ref[0], ref[1])
        card: dict[str, Any] = {
            "scope_id": scope_id,
            "position": stored.position,
            "head": head == ref[2],
            "head_revision": head,
            "failure_record": stored.signature_key is not None,
        }
        if stored.signature_key is None:
            card["text"] = "carries no failure record: the ledger never counts it"
            return card
        group = self.state.group(scope_id, ref, stored.signature_key)
        card.update(
            signature_key=stored.signature_key,
            repair_surface=stored.repair_surface,
            selected=0 if group is None else group.selected,
            recurred=0 if group is None else group.recurred,
            avoided=0 if group is None else group.avoided,
            unknown=0 if group is None else group.unknown,
            streak=0 if group is None else group.streak,
            history=[] if group is None else [list(h) for h in group.history],
            crossings=[] if group is None else [list(c) for c in group.crossings],
        )
        return card

    # -- links ------------------------------------------------------------------------------------------
    def _origin_text(self, origin: dict[str, Any]) -> str:
        if "line" in origin:
            return f"journal line {origin['line']}"
        return f"{origin.get('topic')}[{origin.get('partition')}]@{origin.get('offset')}"

    def _entry_at(self, scope_id: str, position: int) -> tuple[dict[str, Any] | None, Any]:
        origin = self.state.entry_origin(scope_id, position)
        if origin is None:
            return None, None
        raw = self.archive.entry(origin)
        if raw is None:
            return origin, None
        try:
            entry = JOURNAL_ENTRY.validate_json(raw)
        except ValidationError:
            entry = None
        if entry is None or (entry.scope_id, entry.position) != (scope_id, position):
            raise ArchiveMismatchError(
                f"the journal at {self._origin_text(origin)} is not the entry the state applied at position "
                f"{position} of scope {echoed(scope_id)}: the journal is not the one the state read; pass it "
                "with --journal"
            )
        return origin, entry

    def _outcome(self, scope_id: str, position: int) -> TaskOutcome | None:
        _, entry = self._entry_at(scope_id, position)
        if not isinstance(entry, SourceEntry):
            return None
        try:
            return TaskOutcome.model_validate_json(entry.source.content)
        except ValidationError:
            return None

    def _outcome_link(self, scope_id: str, ref: SourceKey, position: int) -> dict[str, Any]:
        origin = self.state.entry_origin(scope_id, position)
        outcome = self._outcome(scope_id, position)
        status = f", status {outcome.status}" if outcome is not None else " (journal not readable here)"
        where = f" ({self._origin_text(origin)})" if origin else ""
        return {
            "link": "task_outcome",
            "position": position,
            "ref": _ref_text(ref),
            "origin": origin,
            "text": f"Task Outcome {_ref_text(ref)} at position {position}{where}{status}",
        }

    def _link(
        self, scope_id: str, position: int, record: dict[str, Any], outcome: TaskOutcome | None
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The Receipt and Handoff an observation rests on: on the record, or (``recurred`` carries
        none, decision 9) the Outcome's own receipt when it was linkable at the Outcome's position."""
        if record["handoff_receipt_ref"] is not None:
            return record["handoff_receipt_ref"], record["handoff_ref"]
        receipt_ref = None if outcome is None else outcome.handoff_receipt_ref
        if receipt_ref is None:
            return None
        receipt = self.state.source(scope_id, (receipt_ref.source_type, receipt_ref.source_id))
        if receipt is None or receipt.position >= position or receipt.linkable_handoff is None:
            return None
        handoff = self.state.artifact(scope_id, receipt.linkable_handoff)
        if handoff is None or handoff.position >= position:
            return None
        family, artifact_id, revision = receipt.linkable_handoff
        return (
            {"source_type": receipt_ref.source_type, "source_id": receipt_ref.source_id},
            {"family": family, "artifact_id": artifact_id, "revision": revision},
        )

    def _handoff_links(
        self, scope_id: str, link: tuple[dict[str, Any], dict[str, Any]], ref: ArtifactKey
    ) -> list[dict[str, Any]]:
        receipt_ref, handoff = link
        receipt = self.state.source(scope_id, (receipt_ref["source_type"], receipt_ref["source_id"]))
        handoff_key: ArtifactKey = (handoff["family"], handoff["artifact_id"], handoff["revision"])
        stored = self.state.artifact(scope_id, handoff_key)
        links = [
            {
                "link": "handoff_receipt",
                "position": None if receipt is None else receipt.position,
                "ref": _ref_text(receipt_ref),
                "text": f"Handoff Receipt {_ref_text(receipt_ref)} at position "
                f"{'?' if receipt is None else receipt.position}: accepted, exact, selected {_ref_text(handoff)}",
            },
            {
                "link": "handoff",
                "position": None if stored is None else stored.position,
                "ref": _ref_text(handoff),
                "text": f"Handoff {_ref_text(handoff)} at position {'?' if stored is None else stored.position}",
            },
        ]
        links.append(self._citation_link(scope_id, handoff_key, ref))
        return links

    def _citation_link(self, scope_id: str, handoff: ArtifactKey, ref: ArtifactKey) -> dict[str, Any]:
        stored = self.state.artifact(scope_id, handoff)
        where = "its cited Experience revisions"
        if stored is not None:
            _, entry = self._entry_at(scope_id, stored.position)
            if isinstance(entry, ArtifactEntry) and isinstance(entry.artifact, HandoffArtifact):
                where = _citation_place(entry.artifact.content, ref) or where
        return {"link": "citation", "ref": _ref_text(ref), "text": f"the Handoff cites {_ref_text(ref)} in {where}"}

    def _experience_link(self, scope_id: str, ref: ArtifactKey) -> dict[str, Any]:
        stored = self.state.artifact(scope_id, ref)
        if stored is None or stored.content is None:
            return {"link": "experience", "ref": _ref_text(ref), "text": f"Experience {_ref_text(ref)} (not in state)"}
        failure = stored.content.get("failure") or {}
        signature = failure.get("signature", {})
        verification = failure.get("verification", {})
        return {
            "link": "experience",
            "position": stored.position,
            "ref": _ref_text(ref),
            "failure_record": {
                "recall_cue": signature.get("recall_cue"),
                "signature_key": stored.signature_key,
                "repair_surface": stored.repair_surface,
                "condition": verification.get("condition"),
                "check_subject": verification.get("check_subject"),
            },
            "text": f"Experience {_ref_text(ref)} at position {stored.position}: cue "
            f"{_preview(str(signature.get('recall_cue')))!r} (key {stored.signature_key!r}), repair_surface "
            f"{stored.repair_surface}, verification condition {_preview(str(verification.get('condition')))!r}, "
            f"check {_preview(str(verification.get('check_subject')))!r}",
        }

    def _item_link(self, label: str, item_ref: dict[str, Any], outcome: TaskOutcome | None) -> dict[str, Any]:
        kind, index = item_ref["item_kind"], item_ref["item_index"]
        link: dict[str, Any] = {
            "link": label,
            "item_kind": kind,
            "item_index": index,
            "item_digest": item_ref["item_digest"],
        }
        items = None if outcome is None else (outcome.checks if kind == "check" else outcome.observations)
        if items is None or index >= len(items):
            link["text"] = f"{label}: {kind} #{index}, digest {item_ref['item_digest']} (text not readable here)"
            return link
        item = items[index]
        text = item.name if kind == "check" else item.text
        status = f" {item.status}," if kind == "check" else ""
        dump = item.model_dump(mode="json", by_alias=True)
        link.update(
            text=f"{label}: {kind} #{index}{status} {item.basis}, {_preview(text)!r}",
            item_text=text,
            digest_matches=digest(dump) == item_ref["item_digest"],
        )
        return link

    def _match_link(self, match: dict[str, Any] | None, match_digest: str) -> dict[str, Any]:
        if match is None:
            return {"link": "match", "match_digest": match_digest, "text": f"match {match_digest} (not indexed)"}
        refs = [_ref_text(r) for r in match["candidate_refs"]]
        target = _ref_text(match["artifact_ref"]) if match["artifact_ref"] else None
        shown = ", ".join(refs[:12]) + (f", … ({len(refs)} in all)" if len(refs) > 12 else "")
        return {
            "link": "match",
            "match_digest": match_digest,
            "candidate_set_mode": match["candidate_set_mode"],
            "candidate_refs": refs,
            "result": match["result"],
            "target": target,
            "text": f"frozen candidate set ({match['candidate_set_mode']}, {len(refs)}): [{shown}] -> "
            f"{match['result']}" + (f" {target} under key {match['signature_key']!r}" if target else ""),
        }

    # -- re-deriving a verdict --------------------------------------------------------------------------
    def _rederive(
        self, scope_id: str, position: int, ref: ArtifactKey, outcome: TaskOutcome | None, record: dict[str, Any]
    ) -> dict[str, Any]:
        stored = self.state.artifact(scope_id, ref)
        cand = candidate(ref, stored)
        if outcome is None or cand is None:
            return {"verdict": "unknown", "why": ["the Task Outcome is not readable here: the verdict cannot be shown"]}
        outcome_ref = record["task_outcome_ref"]

        def resolves(citation: HandoffCitation) -> bool:
            # Evidence counts only when accepted before the Outcome (contract).
            if isinstance(citation, HandoffSourceCitation):
                src = self.state.source(scope_id, (citation.source_ref.source_type, citation.source_ref.source_id))
                return src is not None and src.position < position
            if isinstance(citation, HandoffArtifactCitation):
                a = citation.artifact_ref
                art = self.state.artifact(scope_id, (a.family, a.artifact_id, a.revision))
                return art is not None and art.position < position
            return True

        checks = verified_checks(outcome, outcome_ref, resolves)
        observations = verified_observations(outcome, outcome_ref, resolves)
        failures = failure_items(checks, observations, outcome.status)
        eligible = [item for item in failures if item.key == cand.signature_key]
        if len(eligible) == 1:
            return {"verdict": "recurred", "why": ["one failure item matches the key"]}
        if len(eligible) > 1:
            return {
                "verdict": "unknown",
                "why": [f"{len(eligible)} failure items match the key: ambiguous, no recurred (contract)"],
            }
        evidence = avoided_evidence(cand, checks, observations)
        if evidence is not None:
            return {"verdict": "avoided", "why": ["the bound condition and the bound check both verified; passed"]}
        return {"verdict": "unknown", "why": _missing(cand, outcome, checks, observations)}


def _citation_place(content: HandoffContent, ref: ArtifactKey) -> str | None:
    statements = [(f"state[{i}]", s) for i, s in enumerate(content.state)]
    if content.next_action is not None:
        statements.append(("next_action", content.next_action))
    for place, statement in statements:
        for j, citation in enumerate(statement.citations):
            if isinstance(citation, HandoffArtifactCitation):
                a = citation.artifact_ref
                if (a.family, a.artifact_id, a.revision) == ref:
                    return f"{place}.citations[{j}]"
    return None


def _missing(cand: Candidate, outcome: TaskOutcome, checks: list[Item], observations: list[Item]) -> list[str]:
    """Why no terminal verdict: each gate that did not hold, in the RFC's words."""
    why = []
    conditions = [o for o in observations if o.key == cand.condition_key]
    bound = [c for c in checks if c.key == cand.check_key]
    declared_conditions = [o for o in outcome.observations if o.basis == "declared"]
    if not conditions:
        hint = (
            " (a matching claim may be only declared, or cite evidence not yet accepted)" if declared_conditions else ""
        )
        why.append(f"no verified observation whose normalized text equals the condition{hint}")
    elif len(conditions) > 1:
        why.append(f"{len(conditions)} verified observations match the condition: ambiguous")
    if not bound:
        why.append("the bound check did not run, or is not verified with accepted evidence")
    elif len(bound) > 1:
        why.append(f"{len(bound)} verified checks match the check subject: ambiguous")
    elif bound[0].status != "passed":
        why.append(f"the bound check did not pass (status {bound[0].status})")
    return why or ["no terminal evidence for this revision in the Outcome"]


# -- human text ------------------------------------------------------------------------------------------
def render(explanation: dict[str, Any]) -> str:
    kind = explanation["kind"]
    if kind == "revision":
        return "\n\n".join(_render_card(explanation["id"], card) for card in explanation["cards"]) + "\n"
    head = f"{kind} {explanation['id']}"
    if "event" in explanation:
        head += f" ({explanation['event']})"
    if "result" in explanation:
        head += f" ({explanation['result']})"
    if explanation.get("scope_id"):
        head += f" in scope {explanation['scope_id']}"
    lines = [head]
    for number, link in enumerate(explanation["chain"], start=1):
        lines.append(f"  {number}. {link['text']}")
    verdict = explanation.get("verdict")
    if verdict is not None:
        lines.append(f"  verdict: {verdict['verdict']}")
        lines.extend(f"    - {reason}" for reason in verdict["why"])
    return "\n".join(printable(line) for line in lines) + "\n"


def sparkline(history: list[list[Any]]) -> str:
    """One character per terminal verdict, oldest first: R recurred, a avoided."""
    return "".join("R" if event == "recurred" else "a" for _, event in history)


def _render_card(identity: str, card: dict[str, Any]) -> str:
    head = f"revision {identity} in scope {card['scope_id']} (position {card['position']}, " + (
        "the head)" if card["head"] else f"superseded by revision {card['head_revision']})"
    )
    if not card["failure_record"]:
        return f"{printable(head)}\n  {printable(card['text'])}"
    lines = [
        head,
        f"  key {card['signature_key']!r}, repair_surface {card['repair_surface']}",
        f"  selected {card['selected']}  recurred {card['recurred']}  avoided {card['avoided']}  "
        f"unknown {card['unknown']}  terminal streak {card['streak']}",
    ]
    if card["history"]:
        positions = f"positions {card['history'][0][0]}..{card['history'][-1][0]}"
        lines.append(f"  verdicts ({positions}, R recurred, a avoided): {sparkline(card['history'])}")
    for position, outcome in card["crossings"]:
        lines.append(f"  reached the review threshold at position {position}: {outcome}")
    return "\n".join(printable(line) for line in lines)
