"""The topics of one deployment (a topic prefix and an app id), as data.

Every topic but one is append-only: ``cleanup.policy=delete`` with
``retention.ms=-1`` (nothing ever expires), never compacted. That includes the
state changelogs: each of their records is one batch's whole change set (not a
per-key value), so compaction would drop state. The exception is
``<prefix>.statistics``, a table topic (a KTable changelog in Kafka Streams
terms): its value per key *is* the scope's current statistics, so compaction
keeps exactly what a consumer needs. ``<app id>-snapshots`` holds partition
snapshots (chunks, then a manifest; ``processor/stream/worker/snapshots.py``):
compacted so a superseded snapshot goes away once its chunks are tombstoned,
with a retention so chunks of an upload that never finished go away too
(live snapshots are re-shipped well within it), and small segments so
compaction keeps up. Every topic has the same partition count,
because a scope's journal partition is also its changelog partition and (by
key) its output partition, and the patterns agent's repartition topic and
changelog line up the same way by signature key.

Who uses each topic, and how (``uses``): the client roles of a deployment -- the worker, the
publisher (``recurrence publish``), a reader (``ledger-dump``, ``statistics-dump``,
``status``), a Review service and a statistics service -- each with the Kafka operations it
performs on that topic. ``recurrence acls``
derives a principal's least ACL set from these (``processor/stream/acls.py``); READ and WRITE
imply DESCRIBE in Kafka, so DESCRIBE appears only where nothing else is granted.

Record sizes: the changelogs split a change set into records below
``--changelog-record-bytes``, snapshots cut their chunks, and every other
record the worker writes is one record however large. The journal is held at
Kafka's default limit, and the topics the worker writes whole records to take
``OUTPUT_MAX_RECORD_BYTES``: the largest dead letter of a journal record
(its raw text escaped in JSON, at most six bytes per byte) fits, so no entry
the journal accepted can be refused on the way out and stop the worker.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal, Protocol

from .names import TopicNames

#: Kafka's default ``max.message.bytes`` (1 MiB and a record batch's framing), held on the journal:
#: the output limit below is sized from it.
JOURNAL_MAX_RECORD_BYTES: Final = 1024 * 1024 + 12
#: Records the worker writes whole (the changelogs and snapshots cut theirs in parts): a dead letter
#: keeps the raw entry in a JSON string, up to six bytes per byte (``\u0001``), and a ``match``
#: lists every candidate (~70 bytes each).
OUTPUT_MAX_RECORD_BYTES: Final = 8 * 1024 * 1024

APPEND_ONLY: Final = {"cleanup.policy": "delete", "retention.ms": "-1"}
RECORD_LIMIT: Final = "max.message.bytes"
JOURNAL_RECORDS: Final = {RECORD_LIMIT: str(JOURNAL_MAX_RECORD_BYTES)}
OUTPUT_RECORDS: Final = {RECORD_LIMIT: str(OUTPUT_MAX_RECORD_BYTES)}
OUTPUT: Final = {**APPEND_ONLY, **OUTPUT_RECORDS}
# Last value per key; old values may be cleaned as soon as they are superseded.
COMPACTED: Final = {"cleanup.policy": "compact"}
# Snapshots: last copy per key, and nothing older than the retention (> snapshots.MAX_AGE, 1 day).
SNAPSHOTS: Final = {
    "cleanup.policy": "compact,delete",
    "retention.ms": str(7 * 24 * 3600 * 1000),
    "segment.bytes": str(64 * 1024 * 1024),
    RECORD_LIMIT: str(8 * 1024 * 1024),  # snapshots.MAX_RECORD_BYTES
}


#: The clients of a deployment, one role per principal (``recurrence acls --role``): the worker, the
#: publisher, a reader (the dump and status commands), and the downstream services that consume an
#: output in a consumer group of their own: a Review service (``<prefix>.review``) and a statistics
#: service (``<prefix>.statistics``).
Role = Literal["worker", "publish", "read", "review", "statistics"]
ROLES: Final[tuple[Role, ...]] = ("worker", "publish", "read", "review", "statistics")
#: The roles that consume in a consumer group of their own, and its name unless ``--group`` says otherwise
#: (the example consumers' default, ``processor/stream/clients/outputconsumer.py``).
CONSUMER_GROUPS: Final[Mapping[Role, str]] = MappingProxyType(
    {"review": "recurrence-review", "statistics": "recurrence-statistics"}
)
#: Kafka's names of the topic operations the roles perform.
Operation = Literal["READ", "WRITE", "DESCRIBE"]
READ: Final = "READ"
WRITE: Final = "WRITE"
DESCRIBE: Final = "DESCRIBE"

# The worker writes the ledger topics and reads records back from them for /explain; readers dump them.
LEDGER_USES: Final[Mapping[Role, tuple[Operation, ...]]] = {"worker": (WRITE, READ), "read": (READ,)}
# What only the worker reads and writes: its state changelogs and snapshots.
WORKER_STATE: Final[Mapping[Role, tuple[Operation, ...]]] = {"worker": (READ, WRITE)}
# Written by the worker, read by readers (statistics-dump, ledger-dump --kinds patterns).
PUBLISHED: Final[Mapping[Role, tuple[Operation, ...]]] = {"worker": (WRITE,), "read": (READ,)}
# The review topic: the ledger topics' uses, and a Review service's.
REVIEW_USES: Final[Mapping[Role, tuple[Operation, ...]]] = {**LEDGER_USES, "review": (READ,)}
# The statistics table topic: published, and a statistics service's.
STATISTICS_USES: Final[Mapping[Role, tuple[Operation, ...]]] = {**PUBLISHED, "statistics": (READ,)}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    role: str
    partitions: int
    replication: int
    config: dict[str, str] = field(default_factory=dict)
    description: str = ""
    #: Configs the topic may hold a larger value of than ``config`` (a record limit on a topic the
    #: worker writes: a larger one only lets larger records through). The rest must be equal.
    at_least: frozenset[str] = frozenset()
    #: Role -> the operations its principal performs on this topic (the module's docstring).
    uses: Mapping[Role, tuple[Operation, ...]] = field(default_factory=lambda: MappingProxyType({}))


class Counts(Protocol):
    """How many of each the topics have (``TopicLayout`` is one)."""

    @property
    def partitions(self) -> int: ...
    @property
    def replication(self) -> int: ...
    @property
    def min_insync(self) -> int: ...


class Layout(Protocol):
    """What the definitions read of a deployment (``StreamSettings`` is one)."""

    @property
    def topics(self) -> TopicNames: ...
    @property
    def layout(self) -> Counts: ...


def topic_specs(settings: Layout) -> list[TopicSpec]:
    names = settings.topics
    counts = settings.layout
    insync = {"min.insync.replicas": str(counts.min_insync)}

    def spec(
        name: str,
        role: str,
        description: str,
        uses: Mapping[Role, tuple[Operation, ...]],
        policy: dict[str, str] = APPEND_ONLY,
    ) -> TopicSpec:
        # The journal's limit is exact: a larger one would admit entries whose dead letters the
        # output topics refuse. Any other topic may take larger records than defined.
        at_least = frozenset() if role == "journal" else frozenset({RECORD_LIMIT} & policy.keys())
        return TopicSpec(
            name,
            role,
            counts.partitions,
            counts.replication,
            {**policy, **insync},
            description,
            at_least,
            MappingProxyType(dict(uses)),
        )

    return [
        # Readers read the journal's and the repartition topic's end offsets (status, --until-caught-up).
        spec(
            names.journal,
            "journal",
            "Source journal entries, keyed by scope_id, in position order per scope",
            {"publish": (WRITE,), "worker": (READ,), "read": (DESCRIBE,)},
            {**APPEND_ONLY, **JOURNAL_RECORDS},
        ),
        spec(names.ledger, "ledger", "match and observation records, keyed by scope_id", LEDGER_USES, OUTPUT),
        spec(names.review, "review", "review_proposal and admission records, keyed by scope_id", REVIEW_USES, OUTPUT),
        spec(
            names.dead_letters, "dead-letters", "dead_letter records (key scope_id when readable)", LEDGER_USES, OUTPUT
        ),
        spec(
            names.changelog, "changelog", "engine state: one change set per journal partition per batch", WORKER_STATE
        ),
        spec(
            names.statistics,
            "statistics",
            "each changed scope's RecurrenceStatistics after every batch, keyed by scope_id (last value wins)",
            STATISTICS_USES,
            {**COMPACTED, **OUTPUT_RECORDS},
        ),
        spec(
            names.recurred,
            "repartition",
            "recurred observations keyed by signature key, for the patterns agent",
            {"worker": (READ, WRITE), "read": (DESCRIBE,)},
            OUTPUT,
        ),
        spec(
            names.patterns,
            "patterns",
            "pattern suggestions (a signature recurring in K scopes), keyed by it",
            PUBLISHED,
            OUTPUT,
        ),
        spec(
            names.patterns_changelog,
            "patterns-changelog",
            "patterns agent state: one change set per batch",
            WORKER_STATE,
        ),
        spec(
            names.snapshots,
            "snapshots",
            "partition snapshots of both tables: chunks then a manifest, keyed <table>/<partition>/...",
            WORKER_STATE,
            SNAPSHOTS,
        ),
    ]
