"""ACLs through a client that is not the product's: confluent-kafka's admin API (librdkafka), as a super user.

``apply`` creates the bindings of ``recurrence acls --json``, ``held`` lists what the broker holds
for a principal in the same JSON shape, ``revoke`` deletes one. ``decisions`` reads the secured
node's authorizer log (``kafka.sh`` logs every decision there, with the ACL that matched).
"""

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from devkit.topologies import SecureBroker

_TIMEOUT: Final = 30.0
# "Principal = User:w is Allowed operation = READ from host = ... on resource = Topic:LITERAL:t for request =
# Fetch ... based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=t, patternType=LITERAL,
# principal=User:w, host=*, operation=READ, permissionType=ALLOW))"
_DECISION: Final = re.compile(
    r"Principal = (?P<principal>\S+) is (?P<verdict>Allowed|Denied) operation = (?P<operation>\w+) .*?"
    r"on resource = (?P<resource>\S+) for request = (?P<request>\w+)"
    r"(?:.*?StandardAcl\(resourceType=(?P<acl_type>\w+), resourceName=(?P<acl_name>[^,]+), "
    r"patternType=(?P<acl_pattern>\w+), principal=[^,]+, host=[^,]+, operation=(?P<acl_operation>\w+))?"
)
_RESOURCE_TYPES: Final = {
    "TOPIC": ResourceType.TOPIC,
    "GROUP": ResourceType.GROUP,
    "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
    "CLUSTER": ResourceType.BROKER,
}


def admin(broker: SecureBroker) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": broker.password("admin"),
            "ssl.ca.location": str(broker.ca),
        }
    )


def _fields(acl: Mapping[str, str]) -> tuple[Any, ...]:
    """An ACL's JSON form as the seven arguments of confluent_kafka's ``AclBinding`` (and its filter)."""
    return (
        _RESOURCE_TYPES[acl["resource_type"]],
        acl["resource_name"],
        ResourcePatternType[acl["pattern_type"]],
        acl["principal"],
        acl["host"],
        AclOperation[acl["operation"]],
        AclPermissionType[acl["permission"]],
    )


def binding(acl: Mapping[str, str]) -> AclBinding:
    return AclBinding(*_fields(acl))


def as_json(found: AclBinding) -> dict[str, str]:
    kind = {v: k for k, v in _RESOURCE_TYPES.items()}[found.restype]
    return {
        "principal": found.principal,
        "host": found.host,
        "resource_type": kind,
        "resource_name": found.name,
        "pattern_type": found.resource_pattern_type.name,
        "operation": found.operation.name,
        "permission": found.permission_type.name,
    }


def apply(broker: SecureBroker, acls: Iterable[Mapping[str, str]]) -> None:
    client = admin(broker)  # held until the futures resolve: a collected client cancels them
    for future in client.create_acls([binding(acl) for acl in acls]).values():
        future.result(timeout=_TIMEOUT)


def held(broker: SecureBroker, principal: str) -> list[dict[str, str]]:
    """Every ACL the broker holds for ``principal``, on any resource."""
    wanted = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY, AclPermissionType.ANY
    )
    client = admin(broker)
    return [as_json(found) for found in client.describe_acls(wanted).result(timeout=_TIMEOUT)]


def revoke(broker: SecureBroker, acl: Mapping[str, str]) -> None:
    client = admin(broker)
    exact = AclBindingFilter(*_fields(acl))
    for future in client.delete_acls([exact]).values():
        assert future.result(timeout=_TIMEOUT), f"no ACL deleted for {acl}"


def decisions(log: Path, principal: str, since: int = 0) -> list[dict[str, Any]]:
    """The broker's authorization decisions for ``principal`` logged after byte ``since`` of the log:
    verdict, operation, resource, matched ACL."""
    found = []
    with log.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode(errors="replace")
    for line in text.splitlines():
        match = _DECISION.search(line)
        if match and match["principal"] == principal:
            found.append(match.groupdict())
    return found


def used(log: Path, principal: str, since: int = 0) -> set[tuple[str, str, str, str]]:
    """The ACLs that allowed a request for exactly their own operation (not one they merely imply)."""
    return {
        (d["acl_type"], d["acl_name"], d["acl_pattern"], d["acl_operation"])
        for d in decisions(log, principal, since)
        if d["verdict"] == "Allowed" and d["acl_operation"] == d["operation"]
    }


def denied(log: Path, principal: str, since: int = 0) -> list[str]:
    return sorted(
        {
            f"{d['operation']} {d['resource']} ({d['request']})"
            for d in decisions(log, principal, since)
            if d["verdict"] == "Denied"
        }
    )


def key(acl: Mapping[str, str]) -> tuple[str, str, str, str]:
    return (acl["resource_type"], acl["resource_name"], acl["pattern_type"], acl["operation"])
