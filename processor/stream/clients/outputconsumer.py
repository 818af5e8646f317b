"""A downstream service's consumer of one output topic, in its own consumer group: what the example
Review and statistics consumers share (``review_consumer``, ``statistics_consumer``).

It reads in its own group (``read_committed``: under exactly_once the worker writes in
transactions, and an aborted one's records are never handed over; from the earliest offset the
first time), optionally skips a record whose id (the ``recurrence-id`` header) it has already
handled, hands each record to ``handle``, and commits the offsets of what it handled after each
poll -- at-least-once, like the worker: after a crash the uncommitted tail comes again, so a real
service upserts by the record's id or key.

Its principal holds the role's set (``recurrence acls --role review|statistics --group G``); a
refusal names that command.
"""

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer

from ....topics.definitions import CONSUMER_GROUPS, Role
from ....topics.names import TopicNames
from ...exceptions import RecurrenceError
from ..cliflags import NAMING, add_config_argument, add_model_arguments, load
from ..settings import KafkaConnection, TopicLayout
from .brokers import bounded, quiet_client_logs, require_topics, started
from .diagnosis import NotAuthorizedError
from .dump import record_id
from .faustcompat import kafka_client

POLL_MS: Final = 500
#: Handed each record: its id (``<kind>:<id>``), key and value.
Handler = Callable[[str, bytes | None, bytes], None]


@dataclass
class ConsumerSummary:
    read: int = 0
    handled: int = 0

    @property
    def duplicates(self) -> int:
        return self.read - self.handled


@dataclass(frozen=True)
class OutputConsumer:
    """One service's consumer: the topic, its group, and whether a record seen before is skipped."""

    connection: KafkaConnection
    topic: str
    group: str
    dedupe: bool = True

    async def consume(self, handle: Handler, stop: asyncio.Event, idle_exit: float | None = None) -> ConsumerSummary:
        """Until ``stop`` is set (or nothing new arrived for ``idle_exit`` seconds)."""
        connection, summary, seen = self.connection, ConsumerSummary(), set[str]()
        consumer = AIOKafkaConsumer(
            self.topic,
            **connection.aiokafka_kwargs(),
            group_id=self.group,
            enable_auto_commit=False,  # commit only what was handled
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        async with started(connection, consumer):
            await require_topics(connection, kafka_client(consumer), [self.topic])
            loop = asyncio.get_running_loop()
            last_new = loop.time()
            while not stop.is_set():
                batches: dict[Any, list[Any]] = await bounded(connection, consumer.getmany(timeout_ms=POLL_MS), "READ")
                for messages in batches.values():
                    for message in messages:
                        summary.read += 1
                        ident = record_id(message.value, message.headers)
                        if self.dedupe and ident in seen:
                            continue
                        seen.add(ident)
                        handle(ident, message.key, message.value)
                        summary.handled += 1
                if batches:
                    await bounded(connection, consumer.commit(), "READ")
                    last_new = loop.time()
                elif idle_exit is not None and loop.time() - last_new >= idle_exit:
                    break
        return summary


async def _until_signalled(consumer: OutputConsumer, handle: Handler, idle_exit: float | None) -> ConsumerSummary:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return await consumer.consume(handle, stop, idle_exit)


@dataclass(frozen=True)
class ServiceCommand:
    """The command line of an example consumer: its name, role, topic and what it does with a record."""

    module: str
    role: Role
    topic: Callable[[TopicNames], str]
    handle: Handler
    description: str
    dedupe: bool = True

    def main(self, argv: list[str] | None = None) -> int:
        name = self.module.rsplit(".", 1)[-1]
        parser = argparse.ArgumentParser(prog=f"python -m {self.module}", description=self.description)
        default = CONSUMER_GROUPS[self.role]
        parser.add_argument("--group", default=default, help="its own consumer group (default %(default)s)")
        parser.add_argument("--idle-exit", type=float, metavar="SECONDS", help="stop after this long without records")
        parser.add_argument("-v", "--verbose", action="store_true", help="show the Kafka client's log lines")
        add_config_argument(parser)
        add_model_arguments(parser, KafkaConnection, "Kafka connection")
        add_model_arguments(parser, TopicLayout, "topics", only=NAMING)
        args = parser.parse_args(argv)
        quiet_client_logs(args.verbose)
        try:
            settings = load(args, program=name)
            consumer = OutputConsumer(settings.kafka, self.topic(settings.topics), args.group, self.dedupe)
            summary = asyncio.run(_until_signalled(consumer, self.handle, args.idle_exit))
        except NotAuthorizedError as refused:
            group = "" if args.group == default else f" --group {args.group}"
            print(f"{name}: {refused.for_role(self.role, group)}", file=sys.stderr)
            return refused.exit_code
        except RecurrenceError as error:
            print(f"{name}: {error}", file=sys.stderr)
            return error.exit_code
        print(f"{name}: {summary.handled} records handled, {summary.duplicates} duplicates skipped", file=sys.stderr)
        return 0


def print_value(ident: str, key: bytes | None, value: bytes) -> None:
    """The record's value as one line on stdout (the examples' ``handle``)."""
    sys.stdout.buffer.write(value + b"\n")
    sys.stdout.buffer.flush()
