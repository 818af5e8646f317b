"""Create missing topics, report drift on existing ones; never recreate or alter anything.

Drift is anything that would break the stream path's guarantees: a partition
count that differs from the definition (a scope would change partitions, or
the changelog would not line up with the journal), a cleanup policy other than
the definition's (compaction drops change sets and ledger records; the
statistics table topic must be compacted), a finite retention on an
append-only topic, a different replication factor or ``min.insync.replicas``,
a record size limit (``max.message.bytes``) other than the definition's (on a
topic the worker writes, only a smaller one: a larger one admits larger records).
Fixing drift is an operator decision (migrate to new topics, or alter configs
by hand), so ``apply`` only reports it, with a non-zero exit code.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from ....topics.definitions import RECORD_LIMIT, TopicSpec
from ..settings import KafkaConnection
from .brokers import bounded, started
from .diagnosis import topic_refused

# Limits that move no record when changed: the drift line says how to change them in place.
ALTERABLE_IN_PLACE = frozenset({RECORD_LIMIT})

_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
_CLUSTER_AUTHORIZATION_FAILED = 31


@dataclass
class TopicReport:
    spec: TopicSpec
    status: str  # "created" | "would create" | "ok" | "drift" | "error"
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        head = f"{self.status:<12} {self.spec.name} ({self.spec.role})"
        return head + "".join(f"\n             - {p}" for p in self.problems)


@dataclass
class ApplyResult:
    reports: list[TopicReport]

    @property
    def ok(self) -> bool:
        return all(r.status in ("created", "ok") for r in self.reports)

    @property
    def drift(self) -> list[TopicReport]:
        return [r for r in self.reports if r.status in ("drift", "error", "would create")]


def _describe_drift(spec: TopicSpec, partitions: int, replication: int, configs: dict[str, str]) -> list[str]:
    problems = []
    if partitions != spec.partitions:
        problems.append(
            f"has {partitions} partitions, the definition says {spec.partitions}: scopes would move between "
            "partitions; create new topics (new prefix) and rebuild instead of changing it"
        )
    if replication != spec.replication:
        problems.append(f"replication factor is {replication}, the definition says {spec.replication}")
    for name, wanted in spec.config.items():
        actual = configs.get(name)
        if name in spec.at_least and actual is not None and actual.isdigit() and int(actual) >= int(wanted):
            continue
        if actual != wanted:
            says = "at least " if name in spec.at_least else ""
            problem = f"{name}={actual}, the definition says {says}{wanted}"
            if name in ALTERABLE_IN_PLACE:  # a limit, not a layout: changing it moves no record
                problem += (
                    f" (safe to change in place: kafka-configs.sh --alter --entity-type topics "
                    f"--entity-name {spec.name} --add-config {name}={wanted})"
                )
            problems.append(problem)
    return problems


async def _existing(
    connection: KafkaConnection, admin: AIOKafkaAdminClient, names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The topics that exist; one the principal may not describe is refused, not taken for missing."""
    found: dict[str, dict[str, Any]] = {}
    refused: list[str] = []
    for topic in await admin.describe_topics(list(names)):
        if topic["error_code"] == _TOPIC_AUTHORIZATION_FAILED:
            refused.append(topic["topic"])
        elif topic["error_code"] == 0 and topic["partitions"]:
            found[topic["topic"]] = topic
    if refused:
        raise topic_refused(connection, "DESCRIBE", refused, "TOPIC_AUTHORIZATION_FAILED")
    return found


async def _configs(
    connection: KafkaConnection, admin: AIOKafkaAdminClient, names: Sequence[str]
) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name, None) for name in names]
    result: dict[str, dict[str, str]] = {}
    refused: list[str] = []
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"] == _TOPIC_AUTHORIZATION_FAILED:
                refused.append(resource["resource_name"])
                continue
            result[resource["resource_name"]] = {
                entry["config_names"]: entry["config_value"] for entry in resource["config_entries"]
            }
    if refused:  # without its configs a topic would look drifted: say what is missing instead
        raise topic_refused(connection, "DESCRIBE_CONFIGS", refused, "TOPIC_AUTHORIZATION_FAILED")
    return result


async def apply_topics(connection: KafkaConnection, specs: Sequence[TopicSpec], create: bool = True) -> ApplyResult:
    timeout_ms = max(1000, int(connection.timeout * 1000))
    admin = AIOKafkaAdminClient(**connection.aiokafka_kwargs(), request_timeout_ms=timeout_ms)
    async with started(connection, admin):
        existing = await bounded(connection, _existing(connection, admin, [s.name for s in specs]))
        configs = await bounded(connection, _configs(connection, admin, [s.name for s in specs if s.name in existing]))
        reports: list[TopicReport] = []
        to_create: list[TopicSpec] = []
        for spec in specs:
            topic = existing.get(spec.name)
            if topic is None:
                to_create.append(spec)
                continue
            partitions = topic["partitions"]
            replication = len(partitions[0]["replicas"]) if partitions else 0
            problems = _describe_drift(spec, len(partitions), replication, configs.get(spec.name, {}))
            reports.append(TopicReport(spec, "drift" if problems else "ok", problems))
        if to_create and create:
            response = await bounded(
                connection,
                admin.create_topics(
                    [NewTopic(s.name, s.partitions, s.replication, topic_configs=dict(s.config)) for s in to_create],
                    timeout_ms=timeout_ms,
                ),
            )
            errors = {e["topic"]: e for e in response.to_object()["topic_errors"]}
            refused = [
                name
                for name, e in errors.items()
                if e["error_code"] in (_TOPIC_AUTHORIZATION_FAILED, _CLUSTER_AUTHORIZATION_FAILED)
            ]
            if refused:
                raise topic_refused(connection, "CREATE", refused, "TOPIC_AUTHORIZATION_FAILED")
            for spec in to_create:
                error = errors.get(spec.name, {})
                code = error.get("error_code", 0)
                if code == 0:
                    reports.append(TopicReport(spec, "created"))
                elif code == _TOPIC_ALREADY_EXISTS:
                    # created concurrently by someone else: check it like any existing topic
                    again = await apply_topics(connection, [spec], create=False)
                    reports.extend(again.reports)
                else:
                    problem = f"create failed: {error.get('error_message')} ({code})"
                    reports.append(TopicReport(spec, "error", [problem]))
        else:
            reports.extend(TopicReport(spec, "would create", ["topic does not exist"]) for spec in to_create)
        order = {spec.name: i for i, spec in enumerate(specs)}
        reports.sort(key=lambda r: order[r.spec.name])
        if any(r.status == "created" for r in reports):
            await _wait_visible(connection, admin, [r.spec.name for r in reports if r.status == "created"])
        return ApplyResult(reports)


async def _wait_visible(
    connection: KafkaConnection, admin: AIOKafkaAdminClient, names: Sequence[str], timeout: float = 30.0
) -> None:
    """Topic creation is asynchronous on the broker; wait until every partition has a leader."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await _existing(connection, admin, names)
        if all(name in found and all(p["leader"] >= 0 for p in found[name]["partitions"]) for name in names):
            return
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(0.2)
