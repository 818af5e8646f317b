"""What one batch runs per input record, for each of the worker's two agents.

``processing.BatchProcessor`` owns the durability order (outputs, then change
sets, then local state; one Kafka transaction per source partition under
exactly_once) and runs a ``Step`` inside it:

* ``EngineStep`` -- the journal agent: ``Engine.process`` per entry; every
  output record goes to its ledger topic keyed by ``scope_id``, and a
  ``recurred`` observation *also* to the repartition topic keyed by its
  signature key (the group-by of Kafka Streams, written in the same batch, so
  the same transaction). After the batch, each scope its change set touched
  gets its ``RecurrenceStatistics`` written to the compacted statistics topic:
  one record per changed scope per batch, computed over the batch's
  transaction, so it is exactly what ``/scopes/{id}/statistics`` serves once
  the batch is applied. They come from per-scope summaries the batch's rows
  bring forward (``scopesummary``), not from a scan of the scope's history.
* ``PatternStep`` -- the patterns agent over the repartition topic: the
  embedded runner's ``PatternTracker`` per observation, in a table
  partitioned by signature key; a suggestion goes to the patterns topic.

Idempotence of the patterns agent: its own redeliveries are skipped by the
recorded position like the engine's, but under at-least-once the journal
agent itself may re-emit a batch's observations after a crash, and those
copies are new records on the repartition topic. Each observation id is
therefore recorded once (``["patseen", id]``) and a copy changes nothing, so
the tracker sees each recurrence exactly once, as in the embedded runner.
"""

import logging
from collections.abc import Collection, Mapping
from typing import Any, Final

import orjson

from ....topics.names import TopicNames
from ...core.engine import Engine
from ...core.engineconfig import EngineConfig
from ...core.patterns import PatternTracker, is_recurred
from ...core.records import Emitted, Origin
from ...core.scopesummary import StatisticsCache, changed_rows
from ...core.state import key
from ...store.base import Transaction
from .types import StepRun, TableRecord

log = logging.getLogger("recurrence.stream")

_SEEN: Final = "patseen"


def route(topics: TopicNames, record: Emitted) -> str:
    if record.record in ("match", "observation"):
        return topics.ledger
    if record.record in ("review_proposal", "admission"):
        return topics.review
    if record.record == "pattern":
        return topics.patterns
    return topics.dead_letters


def statistics_value(statistics: Mapping[str, Any]) -> bytes:
    """A scope's statistics as the worker serves them (``GET /scopes/{id}/statistics``)."""
    return orjson.dumps(statistics)


class EngineStep:
    def __init__(self, topics: TopicNames, config: EngineConfig) -> None:
        self.topics = topics
        self.config = config
        # One per worker, over all its partitions: bounded, and never trusted without proof (scopesummary).
        self.summaries = StatisticsCache(config.review_threshold, config.top_revisions)

    @property
    def source(self) -> str:
        return self.topics.journal

    @property
    def changelog(self) -> str:
        return self.topics.changelog

    def pinned(self) -> dict[str, int]:
        return self.config.pinned()

    def begin(self, txn: Transaction, partition: int) -> StepRun:
        engine = Engine(txn, self.config, track_statistics_rows=True)
        return _EngineRun(engine, self.topics.statistics, self.summaries, partition)

    def routes(self, record: Emitted) -> list[tuple[str, bytes | None]]:
        scope_key = record.scope_id.encode() if record.scope_id else None
        found = [(route(self.topics, record), scope_key)]
        if is_recurred(record):
            found.append((self.topics.recurred, str(record.data()["signature_key"]).encode()))
        return found


class _EngineRun:
    def __init__(self, engine: Engine, statistics_topic: str, summaries: StatisticsCache, partition: int) -> None:
        self.engine = engine
        self.statistics_topic = statistics_topic
        self.summaries = summaries
        self.partition = partition

    def process(self, raw: bytes, origin: Origin) -> list[Emitted]:
        return self.engine.process(raw, origin)

    def finish(self, changed: Collection[bytes]) -> list[TableRecord]:
        # Called before flush: the summaries read the rows as committed before the batch.
        records = []
        for scope_id, rows in sorted(changed_rows(self.engine.state, changed).items()):
            found = self.summaries.statistics(self.engine.state, self.partition, scope_id, rows)
            if found is not None:
                records.append(TableRecord(self.statistics_topic, scope_id.encode(), statistics_value(found)))
        return records


class PatternStep:
    def __init__(self, topics: TopicNames, min_scopes: int) -> None:
        self.topics = topics
        self.min_scopes = min_scopes

    @property
    def source(self) -> str:
        return self.topics.recurred

    @property
    def changelog(self) -> str:
        return self.topics.patterns_changelog

    def pinned(self) -> dict[str, int]:
        return {"pattern_scopes": self.min_scopes}

    def begin(self, txn: Transaction, partition: int) -> StepRun:
        return _PatternRun(txn, PatternTracker(txn, self.min_scopes))

    def routes(self, record: Emitted) -> list[tuple[str, bytes | None]]:
        return [(route(self.topics, record), str(record.data()["signature_key"]).encode())]


class _PatternRun:
    def __init__(self, txn: Transaction, tracker: PatternTracker) -> None:
        self.txn = txn
        self.tracker = tracker

    def process(self, raw: bytes, origin: Origin) -> list[Emitted]:
        txn = self.txn
        txn.begin_entry()
        try:
            observation = orjson.loads(raw)
            if observation.get("record") != "observation" or observation.get("event") != "recurred":
                raise ValueError("not a recurred observation")
            seen = key(_SEEN, str(observation["observation_id"]))
            if txn.get(seen) is not None:
                txn.end_entry()
                return []  # a copy re-emitted by the journal agent (at-least-once): counted already
            txn.put(seen, b"")
            suggestion = self.tracker.observe(observation)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            # Only the journal agent writes this topic; anything else is a foreign or corrupt record.
            txn.abort_entry()
            log.warning(
                "%s partition %s offset %s: skipped, not a recurred observation (%s)",
                origin.get("topic"),
                origin.get("partition"),
                origin.get("offset"),
                type(error).__name__,
            )
            return []
        txn.end_entry()
        return [] if suggestion is None else [suggestion]

    def finish(self, changed: Collection[bytes]) -> list[TableRecord]:
        return []
