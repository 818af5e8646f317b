"""What this worker sees of the consumer group: its journal partitions, their owners, high watermarks.

Faust answers these questions only while the group is settled; during a
rebalance or before the first assignment its calls raise (which exceptions
depends on the moment, not on a bug). Every answer here therefore has a
defined "not now" value (an empty set, None) and the failure is logged at
debug with the exception's class, never swallowed silently.
"""

import logging
from typing import Any, cast

log = logging.getLogger("recurrence.stream.cluster")


class Cluster:
    def __init__(self, app: Any, journal: str, changelog: str, table: str) -> None:
        self.app = app
        self.journal = journal
        self.changelog = changelog
        self.table = table

    def journal_partitions(self) -> set[Any]:
        """The journal partitions actively assigned here (empty before the first assignment)."""
        try:
            actives = self.app.assignor.assigned_actives()
        except Exception as error:  # not assigned yet, or mid-rebalance
            log.debug("no assignment yet (%s)", type(error).__name__)
            return set()
        return {tp for tp in actives if tp.topic == self.journal}

    def ready_partitions(self) -> set[int]:
        """Assigned partitions whose state is restored and served (none while rebalancing or recovering)."""
        if self.app.rebalancing or self.app.in_recovery:
            return set()
        if not cast(Any, self.app.tables).recovery.completed.is_set():
            return set()
        return {tp.partition for tp in self.journal_partitions()}

    def owners(self) -> dict[str, set[int]]:
        """Worker URL -> the journal partitions it actively owns, from the assignor's table metadata."""
        owners: dict[str, set[int]] = {}
        try:
            metadata = self.app.router.table_metadata(self.table)
        except Exception as error:  # no assignment metadata yet
            log.debug("no table metadata yet (%s)", type(error).__name__)
            return owners
        for url, topics in metadata.items():
            partitions = topics.get(self.changelog, [])
            if partitions:
                owners[str(url)] = set(partitions)
        return owners

    def highwater(self, tp: Any) -> int | None:
        """The journal partition's high watermark as the consumer last saw it, or None."""
        try:
            value = self.app.consumer.highwater(tp)
        except Exception as error:  # the partition is not (or no longer) assigned to the consumer
            log.debug("no high watermark for %s (%s)", tp, type(error).__name__)
            return None
        return None if value is None else int(value)
