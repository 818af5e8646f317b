"""Liveness and readiness, as Kubernetes probes ask them (``/livez``, ``/readyz``).

* live: the process can still make progress by itself -- the agent has not
  crashed. Restoring a partition from the changelog, rebalancing or lagging
  are all live (a restart would only start them over).
* ready: serving what it owns, fresh: the group has joined and the
  assignment's recovery completed (no rebalance in progress), every assigned
  journal partition is restored, and no partition lags the journal by more
  than ``ready_max_lag`` entries.

The Faust readings (recovery state, rebalance count) are read here, so the
app only wires callables.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from .metrics import RestoreProgress


@dataclass(frozen=True)
class ProbeInputs:
    agent_crashed: bool
    rebalancing: bool
    recovered: bool  # the last assignment's changelog recovery completed
    partitions: Sequence[int]  # journal partitions actively assigned here
    ready_partitions: Sequence[int]  # of those, restored and served
    lag: Mapping[int, int]
    max_lag: int
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    status: str
    body: dict[str, Any]


def liveness(inputs: ProbeInputs) -> ProbeResult:
    status = "agent crashed" if inputs.agent_crashed else "ok"
    return ProbeResult(not inputs.agent_crashed, status, {"status": status})


def readiness(inputs: ProbeInputs) -> ProbeResult:
    reasons: list[str] = []
    if inputs.agent_crashed:
        reasons.append("agent crashed")
    if inputs.rebalancing:
        reasons.append("rebalancing")
    if not inputs.recovered:
        reasons.append("restoring state from the changelog")
    unrestored = sorted(set(inputs.partitions) - set(inputs.ready_partitions))
    if unrestored and inputs.recovered and not inputs.rebalancing:
        reasons.append(f"partitions {unrestored} not restored")
    behind = {p: n for p, n in sorted(inputs.lag.items()) if n > inputs.max_lag}
    if behind:
        reasons.append(f"lag above {inputs.max_lag} on partitions {sorted(behind)}")
    status = "ok" if not reasons else "recovering" if not inputs.recovered or inputs.rebalancing else "not ready"
    if inputs.agent_crashed:
        status = "agent crashed"
    body: dict[str, Any] = {
        "status": status,
        "reasons": reasons,
        "partitions": sorted(inputs.partitions),
        "ready_partitions": sorted(inputs.ready_partitions),
        "lag": {str(p): n for p, n in sorted(inputs.lag.items())},
        "max_lag": inputs.max_lag,
        **inputs.details,
    }
    return ProbeResult(not reasons, status, body)


def restore_progress(app: Any, changelog: str) -> RestoreProgress:
    """Active changelog partitions' restore offsets and high watermarks, from Faust's recovery."""
    try:
        recovery = cast(Any, app.tables).recovery
        highwaters = {tp.partition: int(hw) for tp, hw in recovery.active_highwaters.items() if tp.topic == changelog}
        offsets = {
            tp.partition: int(o) for tp, o in recovery.active_offsets.items() if tp.topic == changelog and o >= 0
        }
        standby = int(recovery.standby_remaining_total())
    except Exception:  # not started yet: nothing to report
        return RestoreProgress({}, {})
    # Faust keeps both as last offsets (its high watermark minus one); +1 makes them positions.
    return RestoreProgress({p: o + 1 for p, o in offsets.items()}, {p: hw + 1 for p, hw in highwaters.items()}, standby)


def rebalances(app: Any) -> int:
    return int(getattr(app, "rebalancing_count", 0) or 0)
