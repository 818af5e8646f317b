"""The topics of one deployment (a topic prefix and an app id), as data.

All topics are append-only: ``cleanup.policy=delete`` with ``retention.ms=-1``
(nothing ever expires) and never compacted. That includes the state changelog:
each of its records is one journal entry's whole change set (not a per-key
value), so compaction would drop state. Every topic has the same partition
count, because a scope's journal partition is also its changelog partition and
(by key) its output partition.
"""

from dataclasses import dataclass, field
from typing import Final

from recurrence.processor.stream.settings import StreamSettings

APPEND_ONLY: Final = {"cleanup.policy": "delete", "retention.ms": "-1"}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    role: str
    partitions: int
    replication: int
    config: dict[str, str] = field(default_factory=dict)
    description: str = ""


def topic_specs(settings: StreamSettings) -> list[TopicSpec]:
    names = settings.topics
    config = {**APPEND_ONLY, "min.insync.replicas": str(settings.min_insync)}

    def spec(name: str, role: str, description: str) -> TopicSpec:
        return TopicSpec(name, role, settings.partitions, settings.replication, dict(config), description)

    return [
        spec(names.journal, "journal", "Source journal entries, keyed by scope_id, in position order per scope"),
        spec(names.ledger, "ledger", "match and observation records, keyed by scope_id"),
        spec(names.review, "review", "review_proposal and admission records, keyed by scope_id"),
        spec(names.dead_letters, "dead-letters", "dead_letter records (key scope_id when readable)"),
        spec(names.changelog, "changelog", "engine state: one change set per applied journal entry"),
    ]
