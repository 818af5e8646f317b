"""Kafka clients for the short-lived commands: bounded by ``--timeout``, one readable line on failure.

aiokafka retries for up to its request timeout (40 s) and logs every retry at
ERROR (a publish to a missing topic printed 390 lines), and a client whose
``start`` failed is never closed ("Unclosed AIOKafkaProducer"). Here every
start and metadata request is bounded by the connection's ``timeout``, a
client is always closed, aiokafka's own log lines stay below WARNING unless
``-v``, and every failure becomes one ``BrokerError`` (exit 2) that names the
brokers and the likely fix.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from aiokafka import AIOKafkaConsumer

from ...exceptions import BrokerError
from ..settings import KafkaConnection

T = TypeVar("T")
C = TypeVar("C")

APPLY_HINT: Final = "run 'recurrence topics apply' with the same --config / --topic-prefix first"
_KAFKA_LOGGERS: Final = ("aiokafka", "kafka")


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


async def bounded(connection: KafkaConnection, request: Awaitable[T]) -> T:
    """One broker request within the connection's timeout, or a readable ``BrokerError``."""
    try:
        return await asyncio.wait_for(request, connection.timeout)
    except BrokerError:
        raise
    except (TimeoutError, OSError) as error:
        raise unreachable(connection, error) from None
    except Exception as error:
        if type(error).__module__.startswith("aiokafka"):
            raise unreachable(connection, error) from None
        raise


async def retrying(connection: KafkaConnection, request: Callable[[], Awaitable[T]]) -> T:
    """``bounded``, retrying errors Kafka calls retriable (a coordinator not elected yet) until the timeout."""
    deadline = asyncio.get_running_loop().time() + connection.timeout
    while True:
        try:
            return await asyncio.wait_for(request(), max(0.1, deadline - asyncio.get_running_loop().time()))
        except TimeoutError as error:
            raise unreachable(connection, error) from None
        except Exception as error:
            if not getattr(error, "retriable", False) or asyncio.get_running_loop().time() >= deadline:
                if type(error).__module__.startswith("aiokafka"):
                    raise unreachable(connection, error) from None
                raise
            await asyncio.sleep(0.2)


async def _close(client: Any) -> None:
    closer = getattr(client, "stop", None) or client.close
    try:
        await asyncio.wait_for(closer(), 5.0)
    except Exception:  # closing after a failure: the first error is the one to report
        logging.getLogger("recurrence.stream").debug("closing a Kafka client failed", exc_info=True)


@asynccontextmanager
async def started(connection: KafkaConnection, client: C) -> AsyncIterator[C]:
    """Start ``client`` within the timeout; always close it, whatever happens."""
    try:
        await bounded(connection, client.start())  # type: ignore[attr-defined]
        yield client
    finally:
        await _close(client)


async def require_topics(connection: KafkaConnection, kafka_client: Any, names: Iterable[str]) -> dict[str, int]:
    """Partition count per topic; a missing topic is a ``BrokerError`` naming ``topics apply``."""
    metadata = await bounded(connection, kafka_client.fetch_all_metadata())
    counts: dict[str, int] = {}
    missing: list[str] = []
    for name in names:
        partitions = metadata.partitions_for_topic(name)
        if not partitions:
            missing.append(name)
        else:
            counts[name] = len(partitions)
    if missing:
        raise BrokerError(
            f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} not found on {connection.bootstrap_servers}: "
            f"{APPLY_HINT}"
        )
    return counts
