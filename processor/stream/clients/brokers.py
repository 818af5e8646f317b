"""Kafka clients for the short-lived commands: bounded by ``--timeout``, one readable line on failure.

aiokafka retries for up to its request timeout (40 s) and logs every retry at
ERROR (a publish to a missing topic printed 390 lines), and a client whose
``start`` failed is never closed ("Unclosed AIOKafkaProducer"). Here every
start and metadata request is bounded by the connection's ``timeout``, a
client is always closed, aiokafka's own log lines stay below WARNING unless
``-v``, and every failure becomes one ``BrokerError`` (exit 2) that names the
brokers and what really failed (``diagnosis``: authentication, authorization, TLS,
unreachable, topics missing).
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from ...exceptions import BrokerError
from ..settings import KafkaConnection
from .diagnosis import authorization, connection_failure, topic_refused, unreachable

T = TypeVar("T")
C = TypeVar("C")

APPLY_HINT: Final = "run 'recurrence topics apply' with the same --config / --topic-prefix first"
_KAFKA_LOGGERS: Final = ("aiokafka", "kafka")
TOPIC_AUTHORIZATION_FAILED: Final = 29


def committed_reader(connection: KafkaConnection, **options: Any) -> AIOKafkaConsumer:
    """A group-less consumer that reads only committed records from the start of what it is given
    (dumps, explain's record reads, the journal and changelog readers); not started yet."""
    return AIOKafkaConsumer(
        **connection.aiokafka_kwargs(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
        **options,
    )


def quiet_client_logs(verbose: bool) -> None:
    """Keep aiokafka's per-retry ERROR lines off a command's stderr (``-v`` shows them)."""
    if not verbose:
        for name in _KAFKA_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)


async def bounded(connection: KafkaConnection, request: Awaitable[T], operation: str | None = None) -> T:
    """One broker request within the connection's timeout, or a readable ``BrokerError``; ``operation``
    names what a refused request was doing (``diagnosis.authorization``)."""
    try:
        return await asyncio.wait_for(request, connection.timeout)
    except BrokerError:
        raise
    except (TimeoutError, OSError) as error:
        raise unreachable(connection, error) from None
    except Exception as error:
        raise _readable(connection, error, operation) from None


def _readable(connection: KafkaConnection, error: Exception, operation: str | None) -> Exception:
    refused = authorization(connection, error, operation)
    if refused is not None:
        return refused
    return unreachable(connection, error) if type(error).__module__.startswith("aiokafka") else error


async def retrying(connection: KafkaConnection, request: Callable[[], Awaitable[T]], operation: str | None = None) -> T:
    """``bounded``, retrying errors Kafka calls retriable (a coordinator not elected yet) until the timeout."""
    deadline = asyncio.get_running_loop().time() + connection.timeout
    while True:
        try:
            return await asyncio.wait_for(request(), max(0.1, deadline - asyncio.get_running_loop().time()))
        except TimeoutError as error:
            raise unreachable(connection, error) from None
        except Exception as error:
            if not getattr(error, "retriable", False) or asyncio.get_running_loop().time() >= deadline:
                raise _readable(connection, error, operation) from None
            await asyncio.sleep(0.2)


async def _close(client: Any) -> None:
    closer = getattr(client, "stop", None) or client.close
    try:
        await asyncio.wait_for(closer(), 5.0)
    except Exception:  # closing after a failure: the first error is the one to report
        logging.getLogger("recurrence.stream").debug("closing a Kafka client failed", exc_info=True)


@asynccontextmanager
async def started(connection: KafkaConnection, client: C) -> AsyncIterator[C]:
    """Start ``client`` within the timeout; always close it, whatever happens. A client that cannot
    bootstrap fails with what stopped it (``diagnosis.connection_failure``), found in the time left."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        try:
            await asyncio.wait_for(client.start(), connection.timeout)  # type: ignore[attr-defined]
        except (TimeoutError, OSError, KafkaError) as error:
            refused = authorization(connection, error)
            if refused is not None:
                raise refused from None
            left = connection.timeout - (loop.time() - began)
            raise await connection_failure(connection, error, left) from None
        yield client
    finally:
        await _close(client)


async def require_topics(connection: KafkaConnection, kafka_client: Any, names: Iterable[str]) -> dict[str, int]:
    """Partition count per topic; a missing topic is a ``BrokerError`` naming ``topics apply``, one the
    principal may not describe a ``NotAuthorized`` (the broker leaves both out of a full listing)."""
    wanted = list(names)
    metadata = await bounded(connection, kafka_client.fetch_all_metadata())
    counts: dict[str, int] = {}
    absent: list[str] = []
    for name in wanted:
        partitions = metadata.partitions_for_topic(name)
        if not partitions:
            absent.append(name)
        else:
            counts[name] = len(partitions)
    if not absent:
        return counts
    codes = await topic_errors(connection, kafka_client, absent)
    refused = [name for name in absent if codes.get(name) == TOPIC_AUTHORIZATION_FAILED]
    if refused:
        raise topic_refused(connection, "DESCRIBE", refused, "TOPIC_AUTHORIZATION_FAILED")
    raise BrokerError(
        f"topic{'s' if len(absent) > 1 else ''} {', '.join(absent)} not found on {connection.bootstrap_servers}: "
        f"{APPLY_HINT}"
    )


async def topic_errors(connection: KafkaConnection, kafka_client: Any, names: list[str]) -> dict[str, int]:
    """The broker's error code for each named topic (0 found, 3 unknown, 29 not authorized to describe)."""
    request = MetadataRequest(names, allow_auto_topic_creation=False)
    response = await bounded(connection, kafka_client.send(kafka_client.get_random_node(), request))
    return {str(topic[1]): int(topic[0]) for topic in response.topics}
