"""What really failed between a command and Kafka: one line each, told apart (exit 2, ``BrokerError``).

aiokafka reports every failure to bootstrap as ``KafkaConnectionError: Unable to bootstrap`` and
only logs the cause, and it shows a topic the principal may not describe as no topic at all.
Operators were sent to the wrong fix ("is the broker up?" for a wrong password, "run topics
apply" for a missing ACL). The failures are told apart here:

* authentication failed (``AuthenticationFailedError``): the mechanism and the user, never the password;
* not authorized (``NotAuthorizedError``): which principal may not do which operation on which
  resource, and the ``recurrence acls`` command that prints the role's set (``for_role``);
* TLS (``TlsError``): the broker's certificate is not trusted, does not name the host dialled,
  or the broker refused the client's certificate;
* a security protocol other than the listener's (``ProtocolMismatchError``): the broker hangs up at
  the first request;
* unreachable (``unreachable``): the only one that asks whether the broker is up.

After a bootstrap failure, ``connection_failure`` opens one connection per broker the way the
client does (TLS, then SASL) and sends one request; the exception that stops it is the cause.
"""

import asyncio
import ssl
from collections.abc import Iterable
from typing import Final

from aiokafka import errors
from aiokafka.conn import create_conn
from aiokafka.protocol.metadata import MetadataRequest

from ...exceptions import BrokerError
from ..settings import KafkaConnection

#: ``ssl.SSLCertVerificationError.verify_code`` for a certificate that does not name the host.
HOSTNAME_MISMATCH: Final = 62
#: TLS alerts a broker sends about the client's certificate (absent, unknown CA, unusable).
CLIENT_CERTIFICATE_ALERTS: Final = (
    "CERTIFICATE_REQUIRED",
    "BAD_CERTIFICATE",
    "UNKNOWN_CA",
    "CERTIFICATE_UNKNOWN",
    "UNSUPPORTED_CERTIFICATE",
    "CERTIFICATE_EXPIRED",
    "CERTIFICATE_REVOKED",
    "ACCESS_DENIED",
)
#: A role's principal as the ``recurrence acls`` hint names it.
ROLE_NAMES: Final = {
    "worker": "a worker",
    "publish": "a publisher",
    "read": "a reader",
    "review": "a Review service",
    "statistics": "a statistics service",
}


class AuthenticationFailedError(BrokerError):
    """The broker refused the SASL login (wrong user or password, or a mechanism it does not offer)."""


class TlsError(BrokerError):
    """The TLS handshake failed: the broker's certificate, its host name, or the client's certificate."""


class ProtocolMismatchError(BrokerError):
    """The broker hung up at the first request: its listener speaks another security protocol."""


class NotAuthorizedError(BrokerError):
    """The principal may not perform an operation on a resource (no ACL grants it)."""

    def __init__(
        self, connection: KafkaConnection, operation: str, resource: str, name: str, code: str, role: str | None = None
    ) -> None:
        self.connection, self.operation, self.resource, self.name = connection, operation, resource, name
        self.code, self.role = code, role
        self.role_flags = ""  # further flags of the acls command (a consuming service's --group)
        super().__init__(self.line())

    def line(self) -> str:
        principal = principal_of(self.connection)
        head = (
            f"not authorized: {principal} may not {self.operation} {self.resource} {self.name} on "
            f"{self.connection.bootstrap_servers} ({self.code})"
        )
        if self.role is None:
            return head + "; grant it, or run this as a principal that may (a super user applies topics and ACLs)"
        who = principal if principal.startswith("User:") else "User:NAME"
        return (
            f"{head}; 'recurrence acls --principal {who} --role {self.role}{self.role_flags}' prints the ACLs "
            f"{ROLE_NAMES.get(self.role, self.role)} needs"
        )

    def for_role(self, role: str, flags: str = "") -> "NotAuthorizedError":
        """The same refusal, naming the ``recurrence acls`` command of the command's role (and its ``flags``)."""
        found = NotAuthorizedError(self.connection, self.operation, self.resource, self.name, self.code, role)
        found.role_flags = flags
        found.args = (found.line(),)
        return found


def principal_of(connection: KafkaConnection) -> str:
    """The principal the broker sees, as far as the client can tell."""
    if connection.uses_sasl:
        return f"User:{connection.sasl_username}"
    if connection.ssl_certfile is not None:
        return "the principal of the client certificate"
    return "User:ANONYMOUS"


def unreachable(connection: KafkaConnection, error: BaseException | None) -> BrokerError:
    if error is None or isinstance(error, TimeoutError):
        why = f"no answer within {connection.timeout:g}s"
    else:
        kind = type(error).__name__
        detail = str(error).strip().removeprefix(f"{kind}: ")
        why = f"{kind}: {detail}" if detail else kind
    return BrokerError(
        f"cannot reach Kafka at {connection.bootstrap_servers} ({why}); is the broker up, and are "
        "--bootstrap-servers / KAFKA_BOOTSTRAP_SERVERS and the security settings right?"
    )


def _reason(error: ssl.SSLError) -> str:
    return str(getattr(error, "reason", "") or "")


def _tls(connection: KafkaConnection, where: str, error: ssl.SSLError) -> BrokerError | None:
    """A handshake failure as its own line, or None when ``error`` is no TLS verdict."""
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = str(getattr(error, "verify_message", "") or error).rstrip(".")
        if error.verify_code == HOSTNAME_MISMATCH:
            host = where.rsplit(":", 1)[0]
            return TlsError(
                f"TLS: the certificate of Kafka at {where} is not valid for the host name {host!r} ({detail}); "
                "put a name the certificate holds in --bootstrap-servers / KAFKA_BOOTSTRAP_SERVERS, or have the "
                "broker's certificate name this one"
            )
        return TlsError(
            f"TLS: the certificate of Kafka at {where} is not trusted ({detail}); point --ssl-cafile / "
            "KAFKA_SSL_CAFILE at the CA that signed it"
        )
    reason = _reason(error)
    if any(alert in reason for alert in CLIENT_CERTIFICATE_ALERTS):
        given = "none was given" if connection.ssl_certfile is None else f"{connection.ssl_certfile} was given"
        return TlsError(
            f"TLS: Kafka at {where} refused the client certificate ({given}; alert {reason.lower()}); give "
            "--ssl-certfile and --ssl-keyfile (KAFKA_SSL_CERTFILE, KAFKA_SSL_KEYFILE) signed by a CA the broker trusts"
        )
    if reason:
        return TlsError(
            f"TLS: the handshake with Kafka at {where} failed ({reason.lower()}); check the security "
            "settings (--security-protocol, --ssl-cafile)"
        )
    return None


def classify(connection: KafkaConnection, where: str, error: BaseException) -> BrokerError | None:
    """The line for what stopped a connection to ``where`` (host:port), or None if it says nothing."""
    cause = error.__cause__
    if isinstance(error, errors.SaslAuthenticationFailed | errors.AuthenticationFailedError):
        return AuthenticationFailedError(
            f"authentication failed: Kafka at {where} refused the {connection.sasl_mechanism} login of user "
            f"{connection.sasl_username!r} ({type(error).__name__}); check --sasl-username / KAFKA_SASL_USERNAME "
            "and the password (KAFKA_SASL_PASSWORD or --sasl-password-file)"
        )
    if isinstance(error, errors.UnsupportedSaslMechanismError):
        _, said, offered = str(error).partition("Enabled mechanisms are:")
        offers = f"it offers {offered.strip()}" if said else "UNSUPPORTED_SASL_MECHANISM"
        return AuthenticationFailedError(
            f"authentication failed: Kafka at {where} does not offer SASL mechanism {connection.sasl_mechanism} "
            f"for user {connection.sasl_username!r} ({offers}); set --sasl-mechanism / KAFKA_SASL_MECHANISM"
        )
    for candidate in (error, cause):
        if isinstance(candidate, ssl.SSLError):
            found = _tls(connection, where, candidate)
            if found is not None:
                return found
    if isinstance(error, errors.KafkaConnectionError) and isinstance(cause, asyncio.IncompleteReadError | EOFError):
        return mismatch(connection, where, "at the first request")
    # A listener without TLS reads the ClientHello as a request of absurd size and drops the connection;
    # one without SASL answers the handshake with ILLEGAL_SASL_STATE.
    dropped = (ConnectionResetError, ssl.SSLEOFError, asyncio.IncompleteReadError, EOFError)
    if connection.uses_ssl and any(isinstance(candidate, dropped) for candidate in (error, cause)):
        return mismatch(connection, where, "at the TLS handshake")
    if connection.uses_sasl and isinstance(error, errors.IllegalSaslStateError):
        return mismatch(connection, where, "at the SASL handshake")
    return None


def mismatch(connection: KafkaConnection, where: str, when: str) -> ProtocolMismatchError:
    return ProtocolMismatchError(
        f"Kafka at {where} hung up {when}, as a listener that speaks another security protocol "
        f"than {connection.security_protocol} does; set --security-protocol / KAFKA_SECURITY_PROTOCOL "
        "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) to the listener's, and check that it is a Kafka listener"
    )


async def connection_failure(
    connection: KafkaConnection, original: BaseException | None, seconds: float
) -> BrokerError:
    """Why the client could not bootstrap: what a fresh connection to each broker meets within ``seconds``."""
    context = connection.ssl_context()
    deadline = asyncio.get_running_loop().time() + seconds
    last: BaseException | None = original
    for server in connection.servers:
        host, _, port = server.rpartition(":")
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0 or not port.isdigit():
            break
        conn = None
        try:
            conn = await asyncio.wait_for(
                create_conn(
                    host.strip("[]"),
                    int(port),
                    ssl_context=context,
                    security_protocol=connection.security_protocol,
                    sasl_mechanism=connection.sasl_mechanism,
                    sasl_plain_username=connection.sasl_username,
                    sasl_plain_password=connection.password() if connection.uses_sasl else None,
                    request_timeout_ms=max(1000, int(remaining * 1000)),
                ),
                remaining,
            )
            left = max(0.1, deadline - asyncio.get_running_loop().time())
            await asyncio.wait_for(conn.send(MetadataRequest([])), left)
        except (OSError, TimeoutError, errors.KafkaError) as error:
            found = classify(connection, server, error)
            if found is not None:
                return found
            last = error  # what stopped this one (aiokafka's own error only says it could not bootstrap)
        finally:
            if conn is not None:
                conn.close()
    return unreachable(connection, last)


def topic_refused(connection: KafkaConnection, operation: str, topics: Iterable[str], code: str) -> NotAuthorizedError:
    names = sorted(set(topics))
    return NotAuthorizedError(connection, operation, "topic" if len(names) == 1 else "topics", ", ".join(names), code)


def authorization(
    connection: KafkaConnection, error: BaseException, operation: str | None = None
) -> NotAuthorizedError | None:
    """An authorization error of aiokafka as ``NotAuthorizedError``; ``operation``: what the caller was doing
    (when the error does not say: a produce is WRITE, a fetch READ)."""
    if isinstance(error, errors.TopicAuthorizationFailedError):
        topics = error.args[0] if error.args else ()
        names = [topics] if isinstance(topics, str) else [str(t) for t in topics]
        return topic_refused(connection, operation or "DESCRIBE", names, "TOPIC_AUTHORIZATION_FAILED")
    if isinstance(error, errors.GroupAuthorizationFailedError):
        group = str(error.args[0]) if error.args else "?"
        return NotAuthorizedError(connection, operation or "READ", "group", group, "GROUP_AUTHORIZATION_FAILED")
    if isinstance(error, errors.ClusterAuthorizationFailedError):
        # Kafka 3.0+ asks it of an idempotent producer that may write no topic at all (KIP-679).
        return NotAuthorizedError(
            connection, operation or "IDEMPOTENT_WRITE", "cluster", "kafka-cluster", "CLUSTER_AUTHORIZATION_FAILED"
        )
    if isinstance(error, errors.TransactionalIdAuthorizationFailed):
        transactional_id = str(error.args[0]) if error.args else "?"
        return NotAuthorizedError(
            connection, "WRITE", "transactional id", transactional_id, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        )
    return None
