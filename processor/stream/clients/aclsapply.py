"""``recurrence acls --apply`` / ``--remove``: a role's set created or deleted through Kafka's admin API.

No Kafka installation needed: the requests are Kafka's own (DescribeAcls, CreateAcls, DeleteAcls,
version 1), sent with aiokafka's protocol classes as the principal the settings name (an admin:
it needs ALTER and DESCRIBE on the cluster). Kafka's AclCommand from the jars took 71 s for 20
``kafka-acls`` lines, a JVM each; here the whole set is one describe and one create.

Idempotent: what the broker already holds for the principal is described first and only the rest
is created (``created`` / ``already there``); ``--remove`` deletes exactly the set's bindings and
says which were not there. Every failure is one line like every other command's.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import (
    CreateAclsRequest_v1,
    DeleteAclsRequest_v1,
    DescribeAclsRequest,
)
from aiokafka.protocol.api import Request

from ...exceptions import BrokerError
from ..acls import ALLOW, Acl
from ..settings import KafkaConnection
from .brokers import bounded, started
from .diagnosis import authorization
from .faustcompat import admin_request

# Kafka's wire codes (org.apache.kafka.common.acl / resource): resource type, pattern type, operation, permission.
RESOURCE_TYPES: Final = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERN_TYPES: Final = {"ANY": 1, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS: Final = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
PERMISSIONS: Final = {"ANY": 1, "DENY": 2, "ALLOW": 3}


Row = tuple[int, str, int, str, str, int, int]


class _CreateAcls(Request[CreateAclsRequest_v1]):  # type: ignore[misc]  # aiokafka's protocol is untyped
    """Every creation in one request (aiokafka's ``CreateAclsRequest`` sends one)."""

    API_KEY = 30

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)

    def build(self, request_struct_class: Any) -> Any:
        return CreateAclsRequest_v1(self.rows)


class _DeleteAcls(Request[DeleteAclsRequest_v1]):  # type: ignore[misc]
    """Every deletion filter in one request."""

    API_KEY = 31

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)

    def build(self, request_struct_class: Any) -> Any:
        return DeleteAclsRequest_v1(self.rows)


def _row(acl: Acl) -> Row:
    return (
        RESOURCE_TYPES[acl.resource_type],
        acl.resource_name,
        PATTERN_TYPES[acl.pattern_type],
        acl.principal,
        acl.host,
        OPERATIONS[acl.operation],
        PERMISSIONS[acl.permission],
    )


@dataclass(frozen=True)
class Applied:
    """What ``--apply`` created and found, or what ``--remove`` deleted and did not find."""

    changed: list[Acl]
    unchanged: list[Acl]


def _check(connection: KafkaConnection, code: int, message: str | None, operation: str) -> None:
    if code == 0:
        return
    error = errors.for_code(code)(message or "")
    refused = authorization(connection, error, operation)
    if refused is not None:
        raise refused
    if isinstance(error, errors.SecurityDisabled):
        raise BrokerError(
            f"Kafka at {connection.bootstrap_servers} has no authorizer (SECURITY_DISABLED): it enforces no ACLs, "
            "so there are none to apply"
        )
    raise BrokerError(
        f"Kafka at {connection.bootstrap_servers} refused the ACL request: {type(error).__name__}"
        f"{': ' + message if message else ''}"
    )


async def held(connection: KafkaConnection, admin: AIOKafkaAdminClient, principal: str) -> set[Acl]:
    """Every ACL the broker holds for ``principal`` (any resource, any host)."""
    request = DescribeAclsRequest(
        RESOURCE_TYPES["ANY"], None, PATTERN_TYPES["ANY"], principal, None, OPERATIONS["ANY"], PERMISSIONS["ANY"]
    )
    response = await bounded(connection, admin_request(admin, request), "DESCRIBE")
    _check(connection, response.error_code, response.error_message, "DESCRIBE")
    types = {v: k for k, v in RESOURCE_TYPES.items()}
    patterns = {v: k for k, v in PATTERN_TYPES.items()}
    operations = {v: k for k, v in OPERATIONS.items()}
    permissions = {v: k for k, v in PERMISSIONS.items()}
    found = set()
    for resource_type, name, pattern, acls in response.resources:
        for who, host, operation, permission in acls:
            found.add(
                Acl(
                    who,
                    types.get(resource_type, str(resource_type)),
                    name,
                    patterns.get(pattern, str(pattern)),
                    operations.get(operation, str(operation)),
                    host,
                    permissions.get(permission, str(permission)),
                )
            )
    return found


def _admin(connection: KafkaConnection) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**connection.aiokafka_kwargs(), request_timeout_ms=int(connection.timeout * 1000))


async def apply_acls(connection: KafkaConnection, acls: Sequence[Acl]) -> Applied:
    """Create the ACLs the broker does not hold yet; the others are left as they are."""
    async with started(connection, _admin(connection)) as admin:
        there = set().union(*[await held(connection, admin, p) for p in sorted({a.principal for a in acls})])
        missing = [acl for acl in acls if acl not in there]
        if missing:
            request = _CreateAcls([_row(acl) for acl in missing])
            response = await bounded(connection, admin_request(admin, request), "ALTER")
            for code, message in response.creation_responses:
                _check(connection, code, message, "ALTER")
        return Applied(missing, [acl for acl in acls if acl in there])


async def remove_acls(connection: KafkaConnection, acls: Sequence[Acl]) -> Applied:
    """Delete exactly the set's bindings; say which were not there."""
    async with started(connection, _admin(connection)) as admin:
        if not acls:
            return Applied([], [])
        request = _DeleteAcls([_row(acl) for acl in acls])
        response = await bounded(connection, admin_request(admin, request), "ALTER")
        removed: list[Acl] = []
        absent: list[Acl] = []
        for acl, (code, message, matching) in zip(acls, response.filter_responses, strict=True):
            _check(connection, code, message, "ALTER")
            (removed if matching else absent).append(acl)
        return Applied(removed, absent)


__all__ = ["ALLOW", "Applied", "apply_acls", "held", "remove_acls"]
