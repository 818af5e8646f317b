"""What several Kafka tests check of live workers against the embedded oracle."""

from devkit.deployment import Worker, quote
from devkit.localrun import wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.state import State
from recurrence_ledger.processor.core.whatif import chart_thresholds, rows, scope_shadows, served
from recurrence_ledger.processor.store.base import Transaction


def check_statistics(workers: list[Worker], oracle: Oracle, scopes: list[str]) -> None:
    # A batch's outputs are durable before its local state is written (docs/worker.md, "How a batch
    # is processed"), so output equal to the oracle can be seen a moment before the statistics are.
    expected = oracle.statistics()

    def settled(worker: Worker) -> bool:
        return worker.get_json("/statistics") == (200, expected)

    for worker in workers:
        wait_for(lambda: settled(worker), 30, 0.2, "the statistics to settle")  # noqa: B023 - called here
    for worker in workers:
        status, body = worker.get_json("/statistics")
        assert status == 200, body
        assert body == oracle.statistics()
        status, body = worker.get_json("/statistics?top=1")
        assert status == 200 and body == oracle.statistics(None, 1)
        for scope in scopes:
            for top in (None, 0, 2):
                query = "" if top is None else f"?top={top}"
                status, body = worker.get_json(f"/scopes/{quote(scope)}/statistics{query}")
                assert status == 200, (scope, body)
                assert body == oracle.statistics(scope, top)[0]
        assert worker.get_json("/scopes/no-such-scope/statistics")[0] == 404
        # The shadow counters went through the same batches, redeliveries and restores as the groups.
        scopes_seen, short = scope_shadows(State(Transaction(oracle.store)))
        assert short == []
        assert worker.get_json("/tune") == (200, served(3, [], rows(scopes_seen, chart_thresholds(3))))
        assert worker.get_json("/statistics?top=-1")[0] == 400
        assert worker.get_json("/statistics?top=many")[0] == 400


def scopes_of(oracle: Oracle, limit: int = 6) -> list[str]:
    return [s["scope_id"] for s in oracle.statistics()][:limit]
