"""``recurrence acls``: the least ACL set a principal needs for one role of a deployment.

Derived, never listed by hand: the topic operations come from the topic definitions (each
``TopicSpec.uses`` says which role reads, writes or only describes that topic), and the rest from
what the commands of the role do with the settings given:

* worker: ``READ`` on its consumer group (the app id: join, heartbeat, commit); ``DESCRIBE_CONFIGS``
  on every topic, because it checks every topic against its definition before it starts
  (``topics apply --dry-run``'s check); ``CREATE`` on every topic only with ``--create-topics``;
  under ``exactly_once`` ``WRITE`` on the transactional ids Faust gives its producers
  (``<app id>-<topic group>-<partition>``, so the prefix ``<app id>-``);
* publish: ``WRITE`` on the journal, nothing else (its producer is idempotent, which Kafka 3.0+
  allows to any principal that may write a topic, KIP-679);
* read: what ``ledger-dump``, ``statistics-dump`` and ``status`` read, and ``DESCRIBE`` on the
  group (they read its committed offsets), nothing it could write.
* review, statistics: a downstream service consuming ``<prefix>.review`` or ``<prefix>.statistics``
  in a consumer group of its own (``--group``, default ``CONSUMER_GROUPS``): ``READ`` on that topic
  and ``READ`` on that group (join, commit); read_committed needs nothing more.

No ``ALL``, no wildcard, nothing on the cluster: Kafka 3.0+ needs ``IDEMPOTENT_WRITE`` on the
cluster from nobody who may write a topic, and Faust's topic declarations are off (topics are
code), so it creates no topic. Three forms: the ``kafka-acls`` commands an operator pastes, JSON
in Kafka's names (for an admin API), and a Strimzi ``KafkaUser``.
"""

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from ...topics.definitions import CONSUMER_GROUPS, DESCRIBE, READ, WRITE, Role, topic_specs
from ..exceptions import SettingsError
from .settings import StreamSettings

TOPIC: Final = "TOPIC"
GROUP: Final = "GROUP"
TRANSACTIONAL_ID: Final = "TRANSACTIONAL_ID"
LITERAL: Final = "LITERAL"
PREFIXED: Final = "PREFIXED"
DESCRIBE_CONFIGS: Final = "DESCRIBE_CONFIGS"
CREATE: Final = "CREATE"
ALLOW: Final = "ALLOW"
ANY_HOST: Final = "*"

#: Faust names a transactional producer ``<app id>-<topic group>-<partition>``
#: (``faust.transport.consumer.TransactionManager.transactional_id_format``; tests/stream/test_acls.py checks it).
TRANSACTIONAL_ID_SEPARATOR: Final = "-"

# A principal as Kafka's authorizers name it: "User:" and the name (SCRAM user, or a certificate's
# mapped name), printable, no whitespace (the kafka-acls command is quoted, but an ACL on a name
# with spaces is an operator's mistake more often than a wish).
_PRINCIPAL: Final = re.compile(r"^User:[^\s\x00-\x1f\x7f]+$")
# A Kubernetes object name (KafkaUser metadata.name) and a Strimzi cluster label.
_K8S_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ORDER: Final = {TOPIC: 0, GROUP: 1, TRANSACTIONAL_ID: 2}


@dataclass(frozen=True)
class Acl:
    """One ALLOW ACL in Kafka's names."""

    principal: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str
    host: str = ANY_HOST
    permission: str = ALLOW

    def as_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "host": self.host,
            "resource_type": self.resource_type,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type,
            "operation": self.operation,
            "permission": self.permission,
        }

    @property
    def resource(self) -> tuple[str, str, str]:
        return (self.resource_type, self.resource_name, self.pattern_type)


def check_principal(principal: str) -> str:
    if not _PRINCIPAL.match(principal):
        raise SettingsError(
            f"--principal {principal!r} is not a Kafka principal: write User:NAME (the SCRAM user name, or the "
            "name a client certificate maps to)"
        )
    return principal


def consumer_group(role: Role, group: str | None) -> str | None:
    """The consumer group of a role that consumes in its own (``--group``, else its default); None for the others."""
    if role not in CONSUMER_GROUPS:
        if group is not None:
            raise SettingsError(
                f"--group is for the roles with a consumer group of their own: {', '.join(CONSUMER_GROUPS)}"
            )
        return None
    return group or CONSUMER_GROUPS[role]


def acl_set(settings: StreamSettings, role: Role, principal: str, group: str | None = None) -> list[Acl]:
    """The least ACLs ``principal`` needs to act as ``role`` for this deployment (the module's docstring)."""
    check_principal(principal)
    own_group = consumer_group(role, group)
    specs = topic_specs(settings)
    wanted: list[tuple[str, str, str, str]] = []
    for spec in specs:
        wanted += [(TOPIC, spec.name, LITERAL, operation) for operation in spec.uses.get(role, ())]
    if role == "worker":
        wanted += [(TOPIC, spec.name, LITERAL, DESCRIBE_CONFIGS) for spec in specs]
        if settings.worker.create_topics:
            wanted += [(TOPIC, spec.name, LITERAL, CREATE) for spec in specs]
        wanted.append((GROUP, settings.layout.group_id, LITERAL, READ))
        if settings.worker.processing_guarantee == "exactly_once":
            wanted.append((TRANSACTIONAL_ID, settings.layout.group_id + TRANSACTIONAL_ID_SEPARATOR, PREFIXED, WRITE))
    elif role == "read":
        wanted.append((GROUP, settings.layout.group_id, LITERAL, DESCRIBE))
    elif own_group is not None:
        wanted.append((GROUP, own_group, LITERAL, READ))
    order = {spec.name: i for i, spec in enumerate(specs)}
    unique = dict.fromkeys(wanted)  # first occurrence wins; keeps the definitions' order
    acls = [Acl(principal, *entry) for entry in unique]
    return sorted(acls, key=lambda a: (_ORDER[a.resource_type], order.get(a.resource_name, 0), a.resource_name))


def grouped(acls: Iterable[Acl]) -> list[tuple[tuple[str, str, str], list[str]]]:
    """The ACLs by resource, each with its operations, in the set's order."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for acl in acls:
        found.setdefault(acl.resource, []).append(acl.operation)
    return list(found.items())


def camel(operation: str) -> str:
    """Kafka's operation names as its tools print them: DESCRIBE_CONFIGS -> DescribeConfigs."""
    return "".join(part.capitalize() for part in operation.split("_"))


#: How the comments name a role's principal.
ROLE_NAMES: Final[dict[Role, str]] = {
    "worker": "worker",
    "publish": "publisher",
    "read": "reader",
    "review": "Review service",
    "statistics": "statistics service",
}


@dataclass(frozen=True)
class Grant:
    """Who gets a role's set, for which deployment (and, for a consuming service, which consumer group)."""

    settings: StreamSettings
    role: Role
    principal: str
    group: str | None = None

    def acls(self) -> list[Acl]:
        return acl_set(self.settings, self.role, self.principal, self.group)

    def described(self) -> str:
        settings, role = self.settings, self.role
        guarantee = f", {settings.worker.processing_guarantee}" if role == "worker" else ""
        creates = ", --create-topics" if role == "worker" and settings.worker.create_topics else ""
        own = consumer_group(role, self.group)
        consumes = f", consumer group {own}" if own else ""
        return (
            f"app id {settings.layout.group_id}, topic prefix {settings.layout.topic_prefix}"
            f"{guarantee}{creates}{consumes}"
        )


def as_commands(grant: Grant, acls: Sequence[Acl], command_config: str) -> str:
    """The ``kafka-acls`` commands that grant the set, one per resource, run as a super user."""
    principal, settings = grant.principal, grant.settings
    lines = [
        f"# The least ACLs for {principal} as a recurrence {ROLE_NAMES[grant.role]} ({grant.described()}): "
        f"{len(acls)} ACLs.",
        f"# Run as a super user; {command_config} holds its client settings (security.protocol, sasl.*, "
        "ssl.truststore.*).",
    ]
    base = [
        "kafka-acls",
        "--bootstrap-server",
        settings.kafka.bootstrap_servers,
        "--command-config",
        command_config,
        "--add",
        "--allow-principal",
        principal,
    ]
    flags = {TOPIC: "--topic", GROUP: "--group", TRANSACTIONAL_ID: "--transactional-id"}
    for (kind, name, pattern), operations in grouped(acls):
        words = [*base]
        for operation in operations:
            words += ["--operation", camel(operation)]
        words += [flags[kind], name]
        if pattern == PREFIXED:
            words += ["--resource-pattern-type", "prefixed"]
        lines.append(" ".join(shlex.quote(word) for word in words))
    return "\n".join(lines) + "\n"


def as_json(acls: Sequence[Acl]) -> bytes:
    return orjson.dumps([acl.as_json() for acl in acls], option=orjson.OPT_INDENT_2) + b"\n"


def strimzi_name(principal: str) -> str:
    name = principal.removeprefix("User:")
    if not _K8S_NAME.match(name):
        raise SettingsError(
            f"--principal {principal!r}: a Strimzi KafkaUser's name is the user name and must be a Kubernetes "
            "object name (lower-case letters, digits, '-' and '.')"
        )
    return name


def as_strimzi(grant: Grant, acls: Sequence[Acl], cluster: str) -> str:
    """A Strimzi ``KafkaUser`` (SCRAM-SHA-512, simple authorization) holding the set, as YAML."""
    name = strimzi_name(grant.principal)
    if not _K8S_NAME.match(cluster):
        raise SettingsError(f"--strimzi {cluster!r} is not the name of a Strimzi Kafka cluster resource")
    kinds = {TOPIC: "topic", GROUP: "group", TRANSACTIONAL_ID: "transactionalId"}
    patterns = {LITERAL: "literal", PREFIXED: "prefix"}
    lines = [
        f"# The least ACLs for a recurrence {ROLE_NAMES[grant.role]} ({grant.described()}), from `recurrence acls`.",
        "apiVersion: kafka.strimzi.io/v1beta2",
        "kind: KafkaUser",
        "metadata:",
        f"  name: {name}",
        "  labels:",
        f"    strimzi.io/cluster: {cluster}",
        "spec:",
        "  authentication:",
        "    type: scram-sha-512",
        "  authorization:",
        "    type: simple",
        "    acls:",
    ]
    for (kind, resource, pattern), operations in grouped(acls):
        lines += [
            "      - resource:",
            f"          type: {kinds[kind]}",
            f"          name: {_yaml_string(resource)}",
            f"          patternType: {patterns[pattern]}",
            f"        operations: [{', '.join(camel(operation) for operation in operations)}]",
            '        host: "*"',
        ]
    return "\n".join(lines) + "\n"


def _yaml_string(value: str) -> str:
    # Topic, group and transactional id names are [A-Za-z0-9._-]; quoted, none reads as a number or a bool.
    return orjson.dumps(value).decode()


def render(grant: Grant, form: str, command_config: str = "admin.properties", cluster: str = "") -> bytes:
    """The set in one of the three forms: ``text`` (kafka-acls commands), ``json``, ``strimzi``."""
    acls = grant.acls()
    if form == "json":
        return as_json(acls)
    if form == "strimzi":
        return as_strimzi(grant, acls, cluster).encode()
    return as_commands(grant, acls, command_config).encode()
