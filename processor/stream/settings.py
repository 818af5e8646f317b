"""Every setting of the Kafka commands, declared once (pydantic-settings).

Three models, one per concern, each field with its type, default, environment
variable, validation and help:

* ``KafkaConnection`` (``KAFKA_*``): where the brokers are and how to talk to
  them (PLAINTEXT, SSL with an optional client certificate, SASL_PLAINTEXT and
  SASL_SSL with PLAIN or SCRAM), passed through to aiokafka and Faust;
* ``TopicLayout`` (``RECURRENCE_*``): topic names, partitions, replication and
  ``min.insync.replicas`` -- what ``topics apply`` creates and what the worker
  checks, so it is read by every command from the same place;
* ``WorkerOptions`` (``RECURRENCE_*``): one worker process.

Where a value comes from, strongest first: a command-line flag (derived from
the field by ``cliflags``), the environment, the config file (``--config`` or
``RECURRENCE_CONFIG``: TOML with ``[kafka]``, ``[topics]`` and ``[worker]``
tables keyed by field name), the default. ``StreamSettings`` bundles the three;
each setting is read in one place, its section (``settings.layout.replication``), and only what
combines sections (the topic names, the effective batch size, the web URL) is computed here.
"""

import os
import socket
import ssl
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ...topics.names import TopicNames, topic_names
from ..core.engineconfig import worker_field
from ..exceptions import SettingsError
from ..host.regularfile import check_regular, read_small
from ..web.webtoken import TOKEN_ENV, TOKEN_FILE_LIMIT, check_token, load_token, read_token_file
from .origins import UNRECORDED, Origin

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:19092"
DEFAULT_PREFIX: Final = "recurrence"
DEFAULT_PARTITIONS: Final = 4
DEFAULT_WEB_PORT: Final = 6066
#: Under the user's state folder (XDG_STATE_HOME, else ~/.local/state), never the working directory:
#: a worker started in a checkout left an untracked folder there.
DATADIR_NAME: Final = ("recurrence", "worker-data")
#: Seconds a worker waits after SIGTERM or SIGINT for a clean stop before it exits anyway (the broker gone,
#: a stop waits on requests no one answers); under Kubernetes' default grace period of 30 s.
STOP_TIMEOUT: Final = 8.0
CONFIG_ENV: Final = "RECURRENCE_CONFIG"
# Entries per durable batch when --batch-max is not given. Under exactly_once every batch pays a
# transaction cycle (AddPartitionsToTxn, EndTxn and the markers) and its durability
# cannot overlap the next batch's engine, so a saturated worker gains from larger batches (+3 to
# +15% in four interleaved pairs, docs/performance.md); under at-least-once batches are pipelined,
# larger ones gained nothing measurable, and a crash re-emits every batch in flight.
BATCH_MAX_AT_LEAST_ONCE: Final = 1000
BATCH_MAX_EXACTLY_ONCE: Final = 2000
#: Largest changelog record value the worker writes by default (``--changelog-record-bytes``): half
#: the broker's default ``max.message.bytes`` (1 MiB), room left for the key and the batch framing.
CHANGELOG_RECORD_BYTES: Final = 512 * 1024

Guarantee = Literal["at_least_once", "exactly_once"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
Port = Annotated[int, Field(ge=1, le=65535)]

# The config file's tables, per model section; set only while ``load`` builds the models.
_CONFIG_FILE: ContextVar[Mapping[str, Any] | None] = ContextVar("recurrence_config_file", default=None)
# False while ``load`` builds the settings of a command that never connects (``acls`` only prints):
# its connection needs no credentials.
_CONNECTS: ContextVar[bool] = ContextVar("recurrence_connects", default=True)


def flag(*, metavar: str | None = None, short: str | None = None, cli: bool = True) -> dict[str, Any]:
    """``json_schema_extra`` for a field: how ``cliflags`` shows it (``cli=False``: environment only)."""
    return {"metavar": metavar, "short": short, "cli": cli}


class _ConfigFileSection(PydanticBaseSettingsSource):
    """The model's table of the config file (weaker than flags and the environment)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole table

    def __call__(self) -> dict[str, Any]:
        section: str = getattr(self.settings_cls, "section", "")
        table = (_CONFIG_FILE.get() or {}).get(section, {})
        return dict(table) if isinstance(table, Mapping) else {}


def default_datadir() -> Path:
    """The worker's data folder when none is given: under the user's state folder (XDG base directories)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state).joinpath(*DATADIR_NAME)


class SettingsModel(BaseSettings):
    """Common configuration: frozen, unknown keys refused, empty variables treated as unset."""

    section: ClassVar[str] = ""
    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", env_ignore_empty=True, validate_by_name=True, validate_by_alias=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags arrive as init arguments; no .env or secrets directory is read implicitly.
        return (init_settings, env_settings, _ConfigFileSection(settings_cls))

    @classmethod
    def defaults(cls) -> Any:
        """The model from its defaults alone (no environment, no file)."""
        return cls.model_validate({})

    @classmethod
    def env_name(cls, name: str) -> str:
        alias = cls.model_fields[name].validation_alias
        if isinstance(alias, str):
            return alias
        return f"{cls.model_config.get('env_prefix', '')}{name}".upper()


class KafkaConnection(SettingsModel):
    section: ClassVar[str] = "kafka"
    model_config = SettingsConfigDict(env_prefix="KAFKA_")

    bootstrap_servers: str = Field(
        DEFAULT_BOOTSTRAP,
        min_length=1,
        description="brokers, host:port[,host:port]",
        json_schema_extra=flag(metavar="HOST:PORT"),
    )
    security_protocol: SecurityProtocol = Field("PLAINTEXT", description="how to talk to the brokers")
    sasl_mechanism: SaslMechanism = Field("PLAIN", description="SASL mechanism for SASL_PLAINTEXT/SASL_SSL")
    sasl_username: str | None = Field(None, description="SASL username", json_schema_extra=flag(metavar="NAME"))
    sasl_password: SecretStr | None = Field(
        None,
        description="SASL password (environment or config file only: a flag would show in ps)",
        json_schema_extra=flag(cli=False),
    )
    sasl_password_file: Path | None = Field(
        None,
        description="file holding the SASL password (instead of KAFKA_SASL_PASSWORD)",
        json_schema_extra=flag(metavar="PATH"),
    )
    ssl_cafile: Path | None = Field(
        None, description="CA bundle for SSL/SASL_SSL (system CAs when unset)", json_schema_extra=flag(metavar="PATH")
    )
    ssl_certfile: Path | None = Field(
        None, description="client certificate for mutual TLS", json_schema_extra=flag(metavar="PATH")
    )
    ssl_keyfile: Path | None = Field(
        None, description="client key for mutual TLS", json_schema_extra=flag(metavar="PATH")
    )
    timeout: float = Field(
        5.0,
        gt=0,
        le=600,
        validation_alias="RECURRENCE_TIMEOUT",
        description="seconds a command (topics, publish, ledger-dump, status) waits for the broker before giving up",
        json_schema_extra=flag(metavar="SECONDS"),
    )

    @model_validator(mode="after")
    def _sasl_complete(self) -> "KafkaConnection":
        if self.sasl_password is not None and self.sasl_password_file is not None:
            raise ValueError(
                "the SASL password is given twice, as KAFKA_SASL_PASSWORD and as a password file "
                "(--sasl-password-file / KAFKA_SASL_PASSWORD_FILE / sasl_password_file); keep one"
            )
        if not _CONNECTS.get():
            return self
        if self.uses_sasl and not self.sasl_username:
            raise ValueError(f"{self.security_protocol} needs a SASL username (--sasl-username, KAFKA_SASL_USERNAME)")
        if self.uses_sasl and self.sasl_password is None and self.sasl_password_file is None:
            raise ValueError(
                f"{self.security_protocol} needs a SASL password (KAFKA_SASL_PASSWORD or --sasl-password-file)"
            )
        return self

    @property
    def servers(self) -> list[str]:
        return [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def password(self) -> str | None:
        if self.sasl_password_file is not None:
            raw = read_small(self.sasl_password_file, "the SASL password file", limit=TOKEN_FILE_LIMIT)
            return raw.decode("utf-8", "replace").rstrip("\r\n")
        return None if self.sasl_password is None else self.sasl_password.get_secret_value()

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_ssl:
            return None
        for path, what in (
            (self.ssl_cafile, "--ssl-cafile"),
            (self.ssl_certfile, "--ssl-certfile"),
            (self.ssl_keyfile, "--ssl-keyfile"),
        ):
            if path is not None:
                check_regular(path, what)  # OpenSSL would read a FIFO or /dev/zero until it gives up
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer / AIOKafkaConsumer / AIOKafkaAdminClient."""
        kwargs: dict[str, Any] = {"bootstrap_servers": self.servers, "security_protocol": self.security_protocol}
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.password()
        return kwargs

    def faust_broker(self) -> list[str]:
        return [f"kafka://{server}" for server in self.servers]


class TopicLayout(SettingsModel):
    section: ClassVar[str] = "topics"
    model_config = SettingsConfigDict(env_prefix="RECURRENCE_")

    topic_prefix: str = Field(
        DEFAULT_PREFIX,
        min_length=1,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="topics are <prefix>.journal/.ledger/.review/.dead-letters",
        json_schema_extra=flag(metavar="PREFIX"),
    )
    journal_topic: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="journal topic (default <prefix>.journal)",
        json_schema_extra=flag(metavar="TOPIC"),
    )
    app_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="consumer group id and changelog prefix (default the prefix)",
        json_schema_extra=flag(metavar="ID"),
    )
    partitions: int = Field(
        DEFAULT_PARTITIONS,
        ge=1,
        le=10_000,
        description="partitions of every topic (fixed once created)",
        json_schema_extra=flag(metavar="N"),
    )
    replication: int = Field(
        1, ge=1, le=100, description="replication factor of every topic", json_schema_extra=flag(metavar="N")
    )
    min_insync: int = Field(
        1, ge=1, le=100, description="min.insync.replicas of every topic", json_schema_extra=flag(metavar="N")
    )

    @model_validator(mode="after")
    def _insync_within_replicas(self) -> "TopicLayout":
        if self.min_insync > self.replication:
            raise ValueError(
                f"min_insync {self.min_insync} exceeds replication {self.replication}: every write would be refused"
            )
        return self

    @property
    def group_id(self) -> str:
        return self.app_id or self.topic_prefix


class WorkerOptions(SettingsModel):
    section: ClassVar[str] = "worker"
    model_config = SettingsConfigDict(env_prefix="RECURRENCE_")

    datadir: Path = Field(
        default_factory=default_datadir,
        description="local state directory, one per worker process (locked: a second worker on it exits 2); "
        "default $XDG_STATE_HOME/recurrence/worker-data (~/.local/state/...)",
        json_schema_extra=flag(metavar="PATH"),
    )
    web_host: str = Field(
        "127.0.0.1", min_length=1, description="web bind address", json_schema_extra=flag(metavar="HOST")
    )
    web_port: Port = Field(
        DEFAULT_WEB_PORT, description="web port (statistics, probes, metrics)", json_schema_extra=flag(metavar="PORT")
    )
    web_advertise: str | None = Field(
        None,
        description="host other workers forward statistics requests to (default the bind address, or the "
        "hostname when binding 0.0.0.0)",
        json_schema_extra=flag(metavar="HOST"),
    )
    # The web port's bearer token (websecurity): every path but the probes and the page's shell asks for it.
    # Every worker of a group has the same one (they forward requests to each other with it).
    http_token: SecretStr | None = Field(
        None,
        description="bearer token the web port asks for (environment or config file only: a flag would show in ps)",
        json_schema_extra=flag(cli=False),
    )
    http_token_file: Path | None = Field(
        None,
        description="file holding the web port's bearer token (instead of RECURRENCE_HTTP_TOKEN; a mounted "
        "Kubernetes Secret)",
        json_schema_extra=flag(metavar="PATH"),
    )
    standby_replicas: int = Field(
        1, ge=0, le=10, description="standby copies of each partition's state", json_schema_extra=flag(metavar="N")
    )
    processing_guarantee: Guarantee = Field("at_least_once", description="delivery guarantee (see docs/kafka.md)")
    # Declared once with the embedded runner's flags (engineconfig): same bounds, help and variables.
    review_threshold: int = worker_field("review_threshold", "; fixed per app id")
    pattern_scopes: int = worker_field("pattern_scopes", "; fixed per app id")
    batch_max: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=f"journal entries per durable batch (default {BATCH_MAX_AT_LEAST_ONCE} at_least_once, "
        f"{BATCH_MAX_EXACTLY_ONCE} exactly_once)",
        json_schema_extra=flag(metavar="N"),
    )
    # Like a consumer's fetch.min.bytes and fetch.max.wait.ms: only a batch below --batch-min waits
    # (at most --batch-within) for more. Under load a batch holds what arrived while the previous
    # one ran, and waiting would only lengthen every cycle, and with it the latency.
    batch_min: int = Field(
        100,
        ge=1,
        le=100_000,
        description="entries below which a batch waits for more",
        json_schema_extra=flag(metavar="N"),
    )
    batch_within: float = Field(
        0.02,
        gt=0,
        le=10,
        description="seconds a batch below --batch-min waits for more entries",
        json_schema_extra=flag(metavar="SECONDS"),
    )
    # A batch's change set larger than this goes to the changelog as several records (changeset.py):
    # keep it below the changelog topics' max.message.bytes (the broker's default is 1 MiB).
    changelog_record_bytes: int = Field(
        CHANGELOG_RECORD_BYTES,
        ge=256,
        le=1_000_000,
        description="largest changelog record; a larger change set is split across several",
        json_schema_extra=flag(metavar="BYTES"),
    )
    # Group membership: a dead worker's partitions move after the session timeout; with a
    # stable instance id (static membership) a restarted worker takes them back at once.
    session_timeout: float = Field(
        10.0,
        ge=1,
        le=1800,
        description="seconds before a silent worker's partitions move",
        json_schema_extra=flag(metavar="SECONDS"),
    )
    instance_id: str | None = Field(
        None,
        min_length=1,
        description="stable id of this worker process (static membership: a restart takes its "
        "partitions back without a rebalance); unique per worker",
        json_schema_extra=flag(metavar="ID"),
    )
    ready_max_lag: int = Field(
        1000,
        ge=0,
        description="/readyz: most journal entries a ready worker may be behind on any partition",
        json_schema_extra=flag(metavar="N"),
    )
    create_topics: bool = Field(False, description="create missing topics before starting (never alters any)")
    # Snapshots (docs/worker.md): a partition with no local state loads the latest one and replays
    # only the changelog after it. Both 0: none are shipped (a worker still loads existing ones).
    snapshot_interval: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="ship a snapshot of each owned partition whose state changed at most "
        "this many seconds after the last one (0: not by time)",
        json_schema_extra=flag(metavar="SECONDS"),
    )
    snapshot_batches: int = Field(
        1000,
        ge=0,
        description="also ship one once a partition has this many change sets (batches) past the last "
        "(0: not by count)",
        json_schema_extra=flag(metavar="N"),
    )
    stop_timeout: float = Field(
        STOP_TIMEOUT,
        gt=0,
        le=600,
        description="seconds a worker waits after SIGTERM/SIGINT for a clean stop before it exits anyway",
        json_schema_extra=flag(metavar="SECONDS"),
    )
    loglevel: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="worker log level", json_schema_extra=flag(short="-l")
    )

    @model_validator(mode="after")
    def _one_token(self) -> "WorkerOptions":
        if self.http_token is not None and self.http_token_file is not None:
            raise ValueError(
                "the web port's token is given twice, as RECURRENCE_HTTP_TOKEN and as a token file "
                "(--http-token-file / RECURRENCE_HTTP_TOKEN_FILE / http_token_file); keep one"
            )
        return self


_SECTIONS: Final[dict[str, type[SettingsModel]]] = {
    "kafka": KafkaConnection,
    "layout": TopicLayout,
    "worker": WorkerOptions,
}


class StreamSettings(BaseModel):
    """The three models of one worker, each setting read from its own (``settings.worker.web_port``).

    Flat keywords (``StreamSettings(topic_prefix="p", partitions=6)``) are routed to
    their model, for tests and embedding; values come only from the arguments and
    the defaults -- the environment and the file are read by ``load``.
    """

    model_config = ConfigDict(frozen=True)

    kafka: KafkaConnection = Field(default_factory=KafkaConnection.defaults)
    layout: TopicLayout = Field(default_factory=TopicLayout.defaults)
    worker: WorkerOptions = Field(default_factory=WorkerOptions.defaults)
    # "<section>.<field>" -> where its value came from (``cliflags.load`` records them).
    _origins: dict[str, Origin] = PrivateAttr(default_factory=dict)

    def with_origins(self, origins: Mapping[str, Origin]) -> "StreamSettings":
        self._origins = dict(origins)
        return self

    def origin(self, section: str, name: str) -> Origin:
        return self._origins.get(f"{section}.{name}", UNRECORDED)

    def connection_sources(self) -> str:
        """Where the connection's bootstrap servers, protocol and credentials came from, in one line."""
        kafka = self.kafka
        shown: list[tuple[str, str]] = [
            ("bootstrap_servers", kafka.bootstrap_servers),
            ("security_protocol", kafka.security_protocol),
        ]
        if kafka.uses_sasl:
            shown += [("sasl_mechanism", kafka.sasl_mechanism), ("sasl_username", str(kafka.sasl_username))]
            if kafka.sasl_password_file is not None:
                shown.append(("sasl_password_file", str(kafka.sasl_password_file)))
            elif kafka.sasl_password is not None:
                shown.append(("sasl_password", "(set)"))
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(kafka, name)
            if kafka.uses_ssl and value is not None:
                shown.append((name, str(value)))
        by_origin: dict[Origin, list[str]] = {}
        for name, value in shown:
            by_origin.setdefault(self.origin("kafka", name), []).append(f"{name} {value}")
        return "; ".join(f"{', '.join(names)} ({origin})" for origin, names in by_origin.items())

    @model_validator(mode="before")
    @classmethod
    def _route_flat(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        routed: dict[str, Any] = {k: v for k, v in data.items() if k in _SECTIONS}
        for key, value in data.items():
            if key in _SECTIONS:
                continue
            owner = next((s for s, model in _SECTIONS.items() if key in model.model_fields), None)
            if owner is None:
                raise ValueError(f"unknown setting {key!r}")
            section = routed.setdefault(owner, {})
            if not isinstance(section, dict):
                section = routed[owner] = section.model_dump()
            section[key] = value
        return routed

    @property
    def batch_entries(self) -> int:
        """Entries per durable batch: ``--batch-max``, else the guarantee's default."""
        if self.worker.batch_max is not None:
            return self.worker.batch_max
        if self.worker.processing_guarantee == "exactly_once":
            return BATCH_MAX_EXACTLY_ONCE
        return BATCH_MAX_AT_LEAST_ONCE

    def web_token(self) -> str | None:
        """The web port's bearer token (``webtoken``): the file's, else the setting's; an empty one is refused."""
        if self.worker.http_token_file is not None:
            return read_token_file(self.worker.http_token_file)
        if self.worker.http_token is not None:
            return check_token(self.worker.http_token.get_secret_value(), TOKEN_ENV)
        return load_token(None)  # an empty RECURRENCE_HTTP_TOKEN (read as unset above) is refused here

    @property
    def canonical_url(self) -> str:
        """The URL other workers forward statistics requests to."""
        host = self.worker.web_advertise or self.worker.web_host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.worker.web_port}"

    @property
    def topics(self) -> TopicNames:
        return topic_names(self.layout.topic_prefix, self.layout.group_id, self.layout.journal_topic)


def read_config_file(path: Path) -> dict[str, Any]:
    """The TOML config file: tables ``[kafka]``, ``[topics]``, ``[worker]``; anything else is refused."""
    try:
        data = tomllib.loads(read_small(path, "config file").decode("utf-8"))
    except UnicodeDecodeError:
        raise SettingsError(f"config file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"config file {path} is not valid TOML: {error}") from None
    known = {model.section for model in _SECTIONS.values()}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SettingsError(f"config file {path}: unknown table(s) {', '.join(unknown)}; expected {sorted(known)}")
    return data


@contextmanager
def config_file(data: Mapping[str, Any], connects: bool = True) -> Iterator[None]:
    """While the models are built: the config file's tables, and whether the command connects."""
    token, connecting = _CONFIG_FILE.set(data), _CONNECTS.set(connects)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)
        _CONNECTS.reset(connecting)
