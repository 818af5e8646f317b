"""Worker counters and their Prometheus text exposition (``GET /metrics``).

Counters only ever hold numbers, record kinds and dead-letter codes: never
scope content, Experience or Outcome text.
"""

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str | int]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


@dataclass
class Metrics:
    entries: int = 0
    batches: int = 0
    records: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    changelog_records: int = 0
    state_changes: int = 0
    batch_seconds: float = 0.0
    redelivered_skipped: int = 0
    filled: int = 0
    # journal partition -> next journal offset recorded in the state (durable)
    positions: dict[int, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def render(self, lag: Mapping[int, int] | None = None, extra: Iterable[str] = ()) -> str:
        lines: list[str] = []

        def metric(
            name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str | int], float]]
        ) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                number = int(value) if float(value).is_integer() else value
                lines.append(f"{name}{_labels(labels)} {number}")

        metric(
            "recurrence_entries_processed_total",
            "counter",
            "Journal entries run through the engine.",
            [({}, self.entries)],
        )
        metric(
            "recurrence_records_emitted_total",
            "counter",
            "Output records produced, by record kind.",
            [({"kind": kind}, n) for kind, n in sorted(self.records.items())] or [({"kind": "match"}, 0)],
        )
        metric(
            "recurrence_dead_letters_total",
            "counter",
            "Dead letters produced, by error code.",
            [({"error": code}, n) for code, n in sorted(self.dead_letters.items())],
        )
        metric("recurrence_batches_total", "counter", "Batches made durable.", [({}, self.batches)])
        metric(
            "recurrence_batch_seconds_total",
            "counter",
            "Seconds spent processing batches.",
            [({}, round(self.batch_seconds, 6))],
        )
        metric(
            "recurrence_changelog_records_total",
            "counter",
            "Change-set records written to the changelog.",
            [({}, self.changelog_records)],
        )
        metric(
            "recurrence_state_changes_total", "counter", "State keys written or deleted.", [({}, self.state_changes)]
        )
        metric(
            "recurrence_redelivered_skipped_total",
            "counter",
            "Entries delivered again by the stream after they were applied (not run again).",
            [({}, self.redelivered_skipped)],
        )
        metric(
            "recurrence_stream_gaps_filled_total",
            "counter",
            "Entries the stream did not deliver, read directly from the journal and run.",
            [({}, self.filled)],
        )
        metric(
            "recurrence_journal_position",
            "gauge",
            "Next journal offset recorded in the state, by partition.",
            [({"partition": p}, o) for p, o in sorted(self.positions.items())],
        )
        if lag is not None:
            metric(
                "recurrence_consumer_lag",
                "gauge",
                "Journal entries not yet processed on this worker's partitions (high watermark - next offset).",
                [({"partition": p}, n) for p, n in sorted(lag.items())],
            )
            metric(
                "recurrence_consumer_lag_total", "gauge", "Sum of recurrence_consumer_lag.", [({}, sum(lag.values()))]
            )
        metric(
            "recurrence_uptime_seconds",
            "gauge",
            "Seconds since the worker started.",
            [({}, round(time.monotonic() - self.started, 3))],
        )
        lines.extend(extra)
        return "\n".join(lines) + "\n"


LagSource = Callable[[], Mapping[int, int]]
