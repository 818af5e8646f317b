"""The RFC's worked examples carried on past Review: a revision 2 that stops recurring and one that does not.

``examples/repair-loop.jsonl`` is this journal (a test keeps the file equal to it). One scope,
``team-a``:

* E7 (the RFC's OpenAPI case) and E8 (the RFC's "port already bound" case), both
  ``experience_content``, cited by Handoff H12. Through receipt R12, one Task Outcome
  selects both and shows nothing (unknown), three fail both bound checks: each revision 1
  recurs 3 times in 4 selections and its streak writes a Review proposal.
* Review publishes E7@2 and E8@2; Handoff H13 cites them and E10, whose bound check
  never runs. Through receipt R13, five Task Outcomes: four show E7's condition and its
  check passing while E8's check fails, one shows nothing. E7@2: avoided 4 times, never
  recurs (repair effect ``stopped``); E8@2: recurs 4 times in 5 selections (``not_better``,
  and ``never_avoids``); E10: 5 selections without a verdict (``unknown_binding``).
* E9 (``recall_policy``) is never cited: three unlinked Task Outcomes fail its check, so it
  recurs through scope-heads matching and is never selected (``never_selected``).
"""

from .builders import Journal, check, claim, failure_block

SCOPE = "team-a"
OPENAPI_CUE = "Generated sources are in sync with the OpenAPI contract"
OPENAPI_CONDITION = "openapi/powercontext.yaml was edited"
PORT_CUE = "pytest fails with port already bound in sandbox"
PORT_CONDITION = "the integration tests ran in the sandbox"
RECALL_CUE = "the docs build without warnings"
UNBOUND_CUE = "the schema registry accepts the new version"


def repair_loop_journal(scope: str = SCOPE) -> Journal:
    journal = Journal()
    journal.evidence("ev-1", scope=scope)
    journal.experience("E7", 1, failure_block(OPENAPI_CUE, OPENAPI_CONDITION), scope=scope)
    journal.experience("E8", 1, failure_block(PORT_CUE, PORT_CONDITION), scope=scope)
    journal.experience("E9", 1, failure_block(RECALL_CUE, "docs were edited", surface="recall_policy"), scope=scope)
    journal.experience("E10", 1, failure_block(UNBOUND_CUE, "a schema changed"), scope=scope)
    journal.handoff("H12", [("E7", 1), ("E8", 1)], scope=scope)
    journal.receipt("R12", ("H12", 1), scope=scope)
    journal.outcome("O1", "succeeded", "R12", scope=scope)  # selected, nothing shown: unknown
    for n in (2, 3, 4):
        journal.outcome(
            f"O{n}", "failed", "R12", checks=[check(OPENAPI_CUE, "failed"), check(PORT_CUE, "failed")], scope=scope
        )
    # Review approved both proposals: revision 2 of each, same failure block, sharper text.
    journal.experience("E7", 2, failure_block(OPENAPI_CUE, OPENAPI_CONDITION), scope=scope, outcome="sharper")
    journal.experience("E8", 2, failure_block(PORT_CUE, PORT_CONDITION), scope=scope, outcome="sharper")
    journal.handoff("H13", [("E7", 2), ("E8", 2), ("E10", 1)], scope=scope)
    journal.receipt("R13", ("H13", 1), scope=scope)
    for n in (5, 6, 7, 9):
        journal.outcome(
            f"O{n}",
            "failed",
            "R13",
            observations=[claim(OPENAPI_CONDITION)],
            checks=[check(OPENAPI_CUE, "passed"), check(PORT_CUE, "failed")],
            scope=scope,
        )
        if n == 7:
            journal.outcome("O8", "succeeded", "R13", scope=scope)
    for n in (10, 11, 12):
        journal.outcome(f"O{n}", "failed", None, checks=[check(RECALL_CUE, "failed")], scope=scope)
    return journal
