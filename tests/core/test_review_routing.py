"""Review routing for recurrence streaks (issue 4; RFC "Degradation and the Review interaction";
contract record ``review_proposal`` and section 3, last bullet).

Two ways to write a ``recurred`` verdict are used, and each test says which:

* unlinked: a Task Outcome with no receipt (``scope_heads`` mode) whose verified
  failed check is named exactly the head revision's cue;
* linked: the same failing check in an Outcome that resolves through R12 -> H12,
  which cites E7 r1 (``handoff_citations`` mode). Only linked Outcomes can write
  ``avoided`` (a verified condition observation plus the bound check passing),
  and only they keep matching a revision after it is superseded.
"""

from typing import Any

import pytest

from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.schemas.base import ArtifactRef, SourceRef
from recurrence_ledger.schemas.records import ObservationRecord, OutputRecord, ReviewProposalRecord
from tests.support.builders import (
    CUE,
    Journal,
    Runner,
    avoided,
    check,
    experience_content,
    failure_block,
    kinds,
    linked_setup,
    recurrence,
    run,
)

E7 = ArtifactRef(family="experience", artifact_id="E7", revision=1)
SURFACES_WITHOUT_CONTENT_REPAIR = ["working_state", "recall_policy", "acceptance_check"]


# -- local builders -------------------------------------------------------------------


def experience_setup(surface: str = "experience_content") -> Journal:
    """Unlinked setting: evidence and E7 r1 (failure block with ``surface``) as the only head."""
    journal = Journal()
    journal.evidence("ev-1")
    journal.experience("E7", 1, failure_block(surface=surface))
    return journal


def proposals(records: list[OutputRecord]) -> list[ReviewProposalRecord]:
    return [r for r in records if isinstance(r, ReviewProposalRecord)]


def events(records: list[OutputRecord], ref: ArtifactRef = E7) -> list[str]:
    return [r.event for r in records if isinstance(r, ObservationRecord) and r.artifact_ref == ref]


def outcome_refs(*source_ids: str) -> tuple[SourceRef, ...]:
    return tuple(SourceRef(source_type="content", source_id=s) for s in source_ids)


def feed_each(runner: Runner, journal: Journal) -> list[list[OutputRecord]]:
    """Records per journal entry, so a test can say which entry produced a proposal."""
    return [runner.feed([line]) for line in journal.lines()]


# -- one proposal per threshold crossing ------------------------------------------------------


def test_three_recurrences_then_two_more_yield_exactly_one_proposal() -> None:
    """Unlinked recurrences against the scope head E7 r1 (experience_content)."""
    journal = experience_setup()
    for source_id in ["O1", "O2", "O3", "O4", "O5"]:
        recurrence(journal, source_id)
    runner = Runner()
    per_entry = feed_each(runner, journal)
    records = [r for batch in per_entry for r in batch]

    assert events(records) == ["recurred"] * 5
    (proposal,) = proposals(records)
    # Written by the 3rd recurrence, right after the verdict that crossed the threshold.
    third = per_entry[-3]
    assert kinds(third) == ["match:matched", "observation:recurred", "review_proposal"]
    assert third[-1] is proposal

    assert proposal.scope_id == "team-a"
    assert proposal.target == E7
    assert proposal.proposal.model_dump(mode="json") == experience_content(failure_block())
    assert proposal.sources == outcome_refs("O1", "O2", "O3")
    assert proposal.streak == 3
    assert "3" in proposal.reason and "consecutive" in proposal.reason

    stats = runner.stats()
    assert (stats["recurred"], stats["needing_review"]) == (5, 1)
    assert stats["top_revisions"][0]["terminal_recurred_streak"] == 5


def test_avoided_in_between_then_three_more_yield_a_second_proposal() -> None:
    """Linked recurrences (R12 -> H12 -> E7 r1) so that an ``avoided`` can reset the streak."""
    journal = linked_setup()
    for source_id in ["O1", "O2", "O3", "O4"]:
        recurrence(journal, source_id, linked=True)
    avoided(journal, "A1")
    for source_id in ["O5", "O6", "O7"]:
        recurrence(journal, source_id, linked=True)
    records, runner = run(journal)

    assert events(records) == ["selected", "recurred"] * 4 + ["selected", "avoided"] + ["selected", "recurred"] * 3
    first, second = proposals(records)
    assert (first.sources, first.streak) == (outcome_refs("O1", "O2", "O3"), 3)
    # The second crossing cites only the new streak's Outcomes: the avoided cleared the old one.
    assert (second.sources, second.streak) == (outcome_refs("O5", "O6", "O7"), 3)
    assert first.target == second.target == E7
    assert first.proposal == second.proposal
    assert runner.stats()["needing_review"] == 1


def test_an_avoided_before_the_threshold_means_no_proposal() -> None:
    """Linked: R R A R R never holds three consecutive recurrences."""
    journal = linked_setup()
    recurrence(journal, "O1", linked=True)
    recurrence(journal, "O2", linked=True)
    avoided(journal, "A1")
    recurrence(journal, "O3", linked=True)
    recurrence(journal, "O4", linked=True)
    records, runner = run(journal)
    assert events(records).count("recurred") == 4
    assert proposals(records) == []
    stats = runner.stats()
    assert (stats["avoided"], stats["needing_review"]) == (1, 0)
    assert stats["top_revisions"][0]["terminal_recurred_streak"] == 2


def test_an_ambiguous_outcome_does_not_advance_the_streak() -> None:
    """Unlinked: two failing checks for one group in one Outcome leave the verdict unknown."""
    journal = experience_setup()
    recurrence(journal, "O1")
    recurrence(journal, "O2")
    journal.outcome("O3", status="failed", receipt=None, checks=[check(CUE, "failed"), check(CUE, "timed_out")])
    records, runner = run(journal)
    assert events(records) == ["recurred", "recurred"]
    assert proposals(records) == []
    assert runner.stats()["needing_review"] == 0


# -- routing by repair_surface ----------------------------------------------------------------


@pytest.mark.parametrize("surface", SURFACES_WITHOUT_CONTENT_REPAIR)
def test_surfaces_without_content_repair_get_no_proposal_but_show_in_statistics(surface: str) -> None:
    """Unlinked recurrences; the repair is not a content change, so only statistics show it."""
    journal = experience_setup(surface)
    for source_id in ["O1", "O2", "O3", "O4"]:
        recurrence(journal, source_id)
    records, runner = run(journal)
    assert events(records) == ["recurred"] * 4
    assert proposals(records) == []
    stats = runner.stats()
    assert stats["needing_review"] == 1
    assert stats["top_revisions"] == [
        {
            "artifact_ref": E7.model_dump(mode="json"),
            "signature_key": "generated sources are in sync",
            "terminal_recurred_streak": 4,
        }
    ]


@pytest.mark.parametrize("surface", SURFACES_WITHOUT_CONTENT_REPAIR)
def test_surfaces_without_content_repair_get_no_proposal_when_linked_either(surface: str) -> None:
    journal = linked_setup(surface=surface)
    for source_id in ["O1", "O2", "O3"]:
        recurrence(journal, source_id, linked=True)
    records, runner = run(journal)
    assert proposals(records) == []
    assert runner.stats()["needing_review"] == 1


# -- heads only ---------------------------------------------------------------------------------


def _superseded_journal(publish_r2: bool) -> Journal:
    """Linked: H12 cites E7 r1, so r1 stays the target after r2 (same cue) becomes the head."""
    journal = linked_setup()
    recurrence(journal, "O1", linked=True)
    recurrence(journal, "O2", linked=True)
    if publish_r2:
        journal.experience("E7", 2, failure_block())
    recurrence(journal, "O3", linked=True)
    return journal


def test_streak_on_a_superseded_revision_yields_no_proposal() -> None:
    records, runner = run(_superseded_journal(publish_r2=True))
    assert events(records) == ["selected", "recurred"] * 3  # all on r1, through H12's citation
    assert proposals(records) == []
    stats = runner.stats()
    # Statistics still mark the revision (contract: groups whose streak reached the threshold).
    assert stats["needing_review"] == 1
    assert stats["top_revisions"][0]["artifact_ref"]["revision"] == 1


def test_control_the_same_streak_on_the_head_yields_a_proposal() -> None:
    records, _ = run(_superseded_journal(publish_r2=False))
    assert [p.target for p in proposals(records)] == [E7]


def test_a_streak_never_transfers_to_the_replacement_revision() -> None:
    """Unlinked: once r2 is the head, scope_heads matching targets r2 and its streak starts at 1."""
    journal = experience_setup()
    recurrence(journal, "O1")
    recurrence(journal, "O2")
    journal.experience("E7", 2, failure_block())
    for source_id in ["O3", "O4", "O5"]:
        recurrence(journal, source_id)
    records, _ = run(journal)
    r2 = E7.model_copy(update={"revision": 2})
    assert events(records, E7) == ["recurred"] * 2
    assert events(records, r2) == ["recurred"] * 3
    (proposal,) = proposals(records)
    assert (proposal.target, proposal.sources) == (r2, outcome_refs("O3", "O4", "O5"))


# -- threshold --------------------------------------------------------------------------------


def test_review_threshold_is_configurable() -> None:
    """Unlinked recurrences; threshold 2 proposes at the 2nd, the default 3 does not."""
    journal = experience_setup()
    recurrence(journal, "O1")
    recurrence(journal, "O2")

    records, runner = run(journal, EngineConfig(review_threshold=2))
    (proposal,) = proposals(records)
    assert (proposal.streak, proposal.sources) == (2, outcome_refs("O1", "O2"))
    assert "2" in proposal.reason
    assert runner.stats()["needing_review"] == 1

    records, runner = run(journal)
    assert proposals(records) == []
    assert runner.stats()["needing_review"] == 0


def test_threshold_one_proposes_once_per_streak() -> None:
    """Linked: with threshold 1 every streak's first recurrence crosses it, and only that one."""
    journal = linked_setup()
    recurrence(journal, "O1", linked=True)
    recurrence(journal, "O2", linked=True)
    avoided(journal, "A1")
    recurrence(journal, "O3", linked=True)
    records, _ = run(journal, EngineConfig(review_threshold=1))
    assert [p.sources for p in proposals(records)] == [outcome_refs("O1"), outcome_refs("O3")]


def test_threshold_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="review_threshold"):
        EngineConfig(review_threshold=0)


# -- statistics: needing_review and top_revisions ------------------------------------------------


def _statistics_journal() -> Journal:
    """Linked E7 (R R A: recurred but streak 0) plus unlinked heads EA (1), EB (3), EC (3), ED (never)."""
    journal = linked_setup()
    for artifact_id in ["EA", "EB", "EC", "ED"]:
        journal.experience(artifact_id, 1, failure_block(cue=f"cue of {artifact_id}", check_subject="a check"))
    recurrence(journal, "L1", linked=True)
    recurrence(journal, "L2", linked=True)
    avoided(journal, "L3")
    streaks = {"EA": 1, "EB": 3, "EC": 3}
    for artifact_id, count in streaks.items():
        for n in range(count):
            recurrence(journal, f"{artifact_id}-{n}", cue=f"cue of {artifact_id}")
    return journal


def _top(stats: dict[str, Any]) -> list[tuple[str, int]]:
    return [(t["artifact_ref"]["artifact_id"], t["terminal_recurred_streak"]) for t in stats["top_revisions"]]


def test_needing_review_and_top_revisions_ordering() -> None:
    records, runner = run(_statistics_journal())
    assert [p.target.artifact_id for p in proposals(records)] == ["EB", "EC"]
    stats = runner.stats()
    assert stats["needing_review"] == 2
    # Streak descending, then (family, artifact_id, revision, signature_key); ED never recurred.
    assert _top(stats) == [("EB", 3), ("EC", 3), ("EA", 1), ("E7", 0)]
    assert stats["top_revisions"][0]["signature_key"] == "cue of eb"


@pytest.mark.parametrize(("top", "expected"), [(0, []), (1, ["EB"]), (2, ["EB", "EC"]), (10, ["EB", "EC", "EA", "E7"])])
def test_top_revisions_cap_is_applied_after_ordering(top: int, expected: list[str]) -> None:
    _, runner = run(_statistics_journal())
    stats = runner.stats(top=top)
    assert [a for a, _ in _top(stats)] == expected
    assert stats["needing_review"] == 2  # the cap never changes the count


def test_top_revisions_default_cap_comes_from_the_config() -> None:
    _, runner = run(_statistics_journal(), EngineConfig(top_revisions=3))
    assert [a for a, _ in _top(runner.stats())] == ["EB", "EC", "EA"]


# -- no retirement -------------------------------------------------------------------------------


def test_no_retirement_after_a_proposal() -> None:
    """Linked: after the proposal E7 r1 keeps being selected, matched, recurring and avoidable."""
    journal = linked_setup()
    for source_id in ["O1", "O2", "O3"]:
        recurrence(journal, source_id, linked=True)
    runner = Runner()
    assert len(proposals(runner.feed(journal.lines()))) == 1

    start = len(journal.entries)
    recurrence(journal, "O4", linked=True)
    recurrence(journal, "O5")  # unlinked: the scope-heads candidate set still holds E7 r1
    avoided(journal, "A1")
    recurrence(journal, "O6", linked=True)
    later = runner.feed(journal.lines()[start:])
    assert kinds(later) == [
        "match:matched",
        "observation:selected",
        "observation:recurred",
        "match:matched",
        "observation:recurred",
        "observation:selected",
        "observation:avoided",
        "match:matched",
        "observation:selected",
        "observation:recurred",
    ]
    assert all(getattr(r, "artifact_ref", E7) == E7 for r in later)
    stats = runner.stats()
    assert (stats["recurred"], stats["avoided"], stats["needing_review"]) == (6, 1, 0)
    assert _top(stats) == [("E7", 1)]


def test_replaying_the_journal_writes_no_second_proposal() -> None:
    journal = experience_setup()
    for source_id in ["O1", "O2", "O3"]:
        recurrence(journal, source_id)
    runner = Runner()
    assert len(proposals(runner.feed(journal.lines()))) == 1
    before = runner.stats()
    assert runner.feed(journal.lines()) == []
    assert Runner(store=runner.store).feed(journal.lines()) == []
    assert runner.stats() == before
