"""``/metrics`` of ``recurrence serve``: the state it serves, in Prometheus' text format.

A worker's metrics count what its process did (entries run, batches made
durable); ``serve`` runs nothing, so its metrics are the state's own readings,
read at scrape time from the view being served: how much of the journal it
applied, the ledger's length and when the last batch was committed, the
distinct dead letters by code, and the statistics' totals over every scope.
Names a worker also exports mean the same thing where both have them
(``recurrence_dead_letters_total{code}``, exported for every code from the
start, 0 until one is written). Labels hold codes and field names only.
"""

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ...schemas.statistics import RecurrenceStatistics
from ..core.deadletters import CODES
from .follow import StateMark

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
#: The statistics fields summed over scopes (``recurrence_statistics{field}``): every count of the model.
FIELDS: Final = tuple(name for name in RecurrenceStatistics.model_fields if name != "top_revisions")


def dead_letter_family(counts: Mapping[str, int]) -> CounterMetricFamily:
    """``recurrence_dead_letters_total{code}``: every stable code, 0 until one is written."""
    family = CounterMetricFamily("recurrence_dead_letters", "Distinct dead letters, by error code.", labels=["code"])
    for code in sorted(set(CODES) | set(counts)):
        family.add_metric([code], counts.get(code, 0))
    return family


class StateReadings(Collector):
    """The followed state's readings, taken from whatever the callables return at scrape time."""

    def __init__(
        self,
        mark: Callable[[], StateMark],
        dead_letters: Callable[[], Mapping[str, int]],
        statistics: Callable[[], list[dict[str, Any]]],
        views_opened: Callable[[], int],
    ) -> None:
        self._mark, self._dead_letters, self._statistics, self._views = mark, dead_letters, statistics, views_opened

    def describe(self) -> list[Metric]:
        return []  # read at scrape time; prometheus_client then collects to describe

    def collect(self) -> Iterator[Metric]:
        mark = self._mark()
        yield GaugeMetricFamily(
            "recurrence_journal_lines_applied", "Journal lines the served state applied.", value=mark.line
        )
        yield GaugeMetricFamily(
            "recurrence_journal_bytes_applied", "Journal bytes the served state applied.", value=mark.offset
        )
        yield GaugeMetricFamily(
            "recurrence_ledger_bytes", "Ledger bytes the served state recorded.", value=mark.ledger_bytes
        )
        if mark.written_ms is not None:
            yield GaugeMetricFamily(
                "recurrence_state_written_timestamp_seconds",
                "When the served state's last batch was committed (the writer's clock).",
                value=mark.written_ms / 1000,
            )
        yield dead_letter_family(self._dead_letters())
        scopes = self._statistics()
        yield GaugeMetricFamily("recurrence_scopes", "Scopes with an accepted entry.", value=len(scopes))
        totals = GaugeMetricFamily(
            "recurrence_statistics", "RecurrenceStatistics summed over every scope.", labels=["field"]
        )
        for field in FIELDS:
            totals.add_metric([field], sum(int(s["recurrence"][field]) for s in scopes))
        yield totals
        yield CounterMetricFamily(
            "recurrence_state_views_opened",
            "Views of the state opened (one more each time a replay's commits are followed).",
            value=self._views(),
        )


def registry(readings: StateReadings) -> CollectorRegistry:
    found = CollectorRegistry()
    found.register(readings)
    ProcessCollector(registry=found)
    return found


def render(found: CollectorRegistry) -> bytes:
    return generate_latest(found)
