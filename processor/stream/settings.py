"""Connection and deployment settings shared by the worker, ``topics``, ``publish`` and ``ledger-dump``.

Every value comes from a command-line flag, else an environment variable, else
a default that works against the local broker (``make kafka-up``). Security
settings are passed through unchanged to aiokafka (and to Faust, which uses
aiokafka underneath), so any cluster the Kafka clients can reach works:
PLAINTEXT, SSL (optionally with a client certificate), SASL_PLAINTEXT and
SASL_SSL with PLAIN or SCRAM-SHA-256/512.
"""

import argparse
import os
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from recurrence.processor.cliargs import positive_int
from recurrence.schemas.constants import RECURRENCE_REVIEW_STREAK_THRESHOLD

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:39092"
DEFAULT_PREFIX: Final = "recurrence"
DEFAULT_PARTITIONS: Final = 4
DEFAULT_WEB_PORT: Final = 6066
TABLE_NAME: Final = "state"

Guarantee = Literal["at_least_once", "exactly_once"]
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


@dataclass(frozen=True)
class KafkaConnection:
    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"SASL mechanism must be one of {', '.join(SASL_MECHANISMS)}")
        if self.uses_sasl and (not self.sasl_username or self.sasl_password is None):
            raise ValueError(f"{self.security_protocol} needs a SASL username and password")

    @property
    def servers(self) -> list[str]:
        return [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_ssl:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer / AIOKafkaConsumer / AIOKafkaAdminClient."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.servers,
            "security_protocol": self.security_protocol,
        }
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs

    def faust_broker(self) -> list[str]:
        return [f"kafka://{server}" for server in self.servers]


@dataclass(frozen=True)
class TopicNames:
    journal: str
    ledger: str
    review: str
    dead_letters: str
    changelog: str

    def outputs(self) -> tuple[str, str, str]:
        return (self.ledger, self.review, self.dead_letters)


@dataclass(frozen=True)
class StreamSettings:
    kafka: KafkaConnection = field(default_factory=KafkaConnection)
    topic_prefix: str = DEFAULT_PREFIX
    journal_topic: str | None = None  # defaults to <prefix>.journal (a rebuild reads an existing one)
    app_id: str | None = None  # consumer group and changelog prefix; defaults to the topic prefix
    partitions: int = DEFAULT_PARTITIONS
    replication: int = 1
    min_insync: int = 1
    datadir: Path = Path("recurrence-data")
    web_host: str = "127.0.0.1"  # bind address
    web_port: int = DEFAULT_WEB_PORT
    web_advertise: str | None = None  # host other workers forward to; default web_host (hostname if a wildcard)
    standby_replicas: int = 1
    processing_guarantee: Guarantee = "at_least_once"
    review_threshold: int = RECURRENCE_REVIEW_STREAK_THRESHOLD
    batch_max: int = 500
    batch_within: float = 0.02
    # Consumer group membership: a dead worker's partitions move after the session
    # timeout; with a stable instance id (static membership) a restarted worker takes
    # its partitions back at once, without waiting for the session to expire.
    session_timeout: float = 10.0
    instance_id: str | None = None

    @property
    def group_id(self) -> str:
        return self.app_id or self.topic_prefix

    @property
    def canonical_url(self) -> str:
        """The URL other workers forward statistics requests to."""
        host = self.web_advertise or self.web_host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.web_port}"

    @property
    def topics(self) -> TopicNames:
        p = self.topic_prefix
        return TopicNames(
            journal=self.journal_topic or f"{p}.journal",
            ledger=f"{p}.ledger",
            review=f"{p}.review",
            dead_letters=f"{p}.dead-letters",
            # Faust names a table's changelog "<app id>-<table>-changelog".
            changelog=f"{self.group_id}-{TABLE_NAME}-changelog",
        )


# -- argparse wiring -------------------------------------------------------------------


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Kafka connection (flags override KAFKA_* environment variables)")
    g.add_argument("--bootstrap-servers", help=f"host:port[,host:port] (KAFKA_BOOTSTRAP_SERVERS; {DEFAULT_BOOTSTRAP})")
    g.add_argument("--security-protocol", choices=SECURITY_PROTOCOLS, help="KAFKA_SECURITY_PROTOCOL (PLAINTEXT)")
    g.add_argument("--sasl-mechanism", choices=SASL_MECHANISMS, help="KAFKA_SASL_MECHANISM (PLAIN)")
    g.add_argument("--sasl-username", help="KAFKA_SASL_USERNAME")
    g.add_argument(
        "--sasl-password-file",
        help="file holding the SASL password (else KAFKA_SASL_PASSWORD; never a flag, it would show in ps)",
    )
    g.add_argument("--ssl-cafile", help="CA bundle for SSL/SASL_SSL (KAFKA_SSL_CAFILE; system CAs by default)")
    g.add_argument("--ssl-certfile", help="client certificate for mutual TLS (KAFKA_SSL_CERTFILE)")
    g.add_argument("--ssl-keyfile", help="client key for mutual TLS (KAFKA_SSL_KEYFILE)")


def add_topic_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("topics")
    g.add_argument(
        "--topic-prefix",
        help=f"topics are <prefix>.journal/.ledger/.review/.dead-letters (RECURRENCE_TOPIC_PREFIX; {DEFAULT_PREFIX})",
    )
    g.add_argument("--journal-topic", help="journal topic (RECURRENCE_JOURNAL_TOPIC; defaults to <prefix>.journal)")
    g.add_argument(
        "--app-id", help="consumer group id and changelog prefix (RECURRENCE_APP_ID; defaults to the topic prefix)"
    )


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("topic layout")
    g.add_argument(
        "--partitions",
        type=positive_int,
        help=f"partitions of every topic (RECURRENCE_PARTITIONS; {DEFAULT_PARTITIONS})",
    )
    g.add_argument("--replication", type=positive_int, help="replication factor (RECURRENCE_REPLICATION; 1)")
    g.add_argument("--min-insync", type=positive_int, help="min.insync.replicas (RECURRENCE_MIN_INSYNC; 1)")


def connection_from_args(args: argparse.Namespace) -> KafkaConnection:
    password = _env("KAFKA_SASL_PASSWORD")
    password_file = getattr(args, "sasl_password_file", None)
    if password_file:
        password = Path(password_file).read_text(encoding="utf-8").rstrip("\r\n")
    return KafkaConnection(
        bootstrap_servers=args.bootstrap_servers or _env("KAFKA_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP) or "",
        security_protocol=args.security_protocol or _env("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT") or "PLAINTEXT",
        sasl_mechanism=args.sasl_mechanism or _env("KAFKA_SASL_MECHANISM", "PLAIN") or "PLAIN",
        sasl_username=args.sasl_username or _env("KAFKA_SASL_USERNAME"),
        sasl_password=password,
        ssl_cafile=args.ssl_cafile or _env("KAFKA_SSL_CAFILE"),
        ssl_certfile=args.ssl_certfile or _env("KAFKA_SSL_CERTFILE"),
        ssl_keyfile=args.ssl_keyfile or _env("KAFKA_SSL_KEYFILE"),
    )


def _int_setting(args: argparse.Namespace, attr: str, env: str, default: int) -> int:
    value = getattr(args, attr, None)
    if value is not None:
        return int(value)
    raw = _env(env)
    return int(raw) if raw is not None else default


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> StreamSettings:
    guarantee = getattr(args, "processing_guarantee", None) or _env("RECURRENCE_PROCESSING_GUARANTEE", "at_least_once")
    if guarantee not in ("at_least_once", "exactly_once"):
        raise ValueError("processing guarantee must be at_least_once or exactly_once")
    datadir = getattr(args, "datadir", None) or _env("RECURRENCE_DATADIR", "recurrence-data") or "recurrence-data"
    values: dict[str, Any] = {
        "kafka": connection_from_args(args),
        "topic_prefix": getattr(args, "topic_prefix", None) or _env("RECURRENCE_TOPIC_PREFIX", DEFAULT_PREFIX),
        "journal_topic": getattr(args, "journal_topic", None) or _env("RECURRENCE_JOURNAL_TOPIC"),
        "app_id": getattr(args, "app_id", None) or _env("RECURRENCE_APP_ID"),
        "partitions": _int_setting(args, "partitions", "RECURRENCE_PARTITIONS", DEFAULT_PARTITIONS),
        "replication": _int_setting(args, "replication", "RECURRENCE_REPLICATION", 1),
        "min_insync": _int_setting(args, "min_insync", "RECURRENCE_MIN_INSYNC", 1),
        "datadir": Path(datadir),
        "web_host": getattr(args, "web_host", None) or _env("RECURRENCE_WEB_HOST", "127.0.0.1"),
        "web_port": _int_setting(args, "web_port", "RECURRENCE_WEB_PORT", DEFAULT_WEB_PORT),
        "web_advertise": getattr(args, "web_advertise", None) or _env("RECURRENCE_WEB_ADVERTISE"),
        "standby_replicas": _int_setting(args, "standby_replicas", "RECURRENCE_STANDBY_REPLICAS", 1),
        "processing_guarantee": guarantee,
        "review_threshold": _int_setting(
            args, "review_threshold", "RECURRENCE_REVIEW_THRESHOLD", RECURRENCE_REVIEW_STREAK_THRESHOLD
        ),
        "batch_max": _int_setting(args, "batch_max", "RECURRENCE_BATCH_MAX", 500),
        "session_timeout": float(
            getattr(args, "session_timeout", None) or _env("RECURRENCE_SESSION_TIMEOUT", "10") or 10
        ),
        "instance_id": getattr(args, "instance_id", None) or _env("RECURRENCE_INSTANCE_ID"),
    }
    values.update(overrides)
    return StreamSettings(**values)
