"""An example downstream consumer for a Review service: ``<prefix>.review``, deduplicated, offsets committed.

    python -m recurrence_ledger.processor.stream.clients.review_consumer --group review-service [--idle-exit 10]

It reads ``review_proposal`` and ``admission`` records in its own consumer
group (``read_committed``, from the earliest offset the first time), skips a
record whose id (the ``recurrence-id`` header) it has already handled, hands
each new one to ``handle`` (here: print it as a JSON line), and commits the
offsets of what it handled after each poll -- at-least-once, like the worker:
after a crash the uncommitted tail comes again, so a real service upserts by
that id (the in-memory set only spans one run). The worker itself may write a
record twice after a crash; both copies carry the same id.
"""

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer

from ...exceptions import RecurrenceError
from ..cliflags import NAMING, add_config_argument, add_model_arguments, load
from ..settings import KafkaConnection, TopicLayout
from .brokers import bounded, quiet_client_logs, require_topics, started
from .dump import record_id
from .faustcompat import kafka_client

POLL_MS: Final = 500


@dataclass
class ReviewSummary:
    read: int = 0
    handled: int = 0

    @property
    def duplicates(self) -> int:
        return self.read - self.handled


async def consume(
    connection: KafkaConnection,
    topic: str,
    group: str,
    handle: Callable[[str, bytes], None],
    stop: asyncio.Event,
    idle_exit: float | None = None,
) -> ReviewSummary:
    """Until ``stop`` is set (or nothing new arrived for ``idle_exit`` seconds)."""
    summary = ReviewSummary()
    seen: set[str] = set()
    consumer = AIOKafkaConsumer(
        topic,
        **connection.aiokafka_kwargs(),
        group_id=group,
        enable_auto_commit=False,  # commit only what was handled
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    async with started(connection, consumer):
        await require_topics(connection, kafka_client(consumer), [topic])
        loop = asyncio.get_running_loop()
        last_new = loop.time()
        while not stop.is_set():
            batches: dict[Any, list[Any]] = await consumer.getmany(timeout_ms=POLL_MS)
            for messages in batches.values():
                for message in messages:
                    summary.read += 1
                    ident = record_id(message.value, message.headers)
                    if ident in seen:
                        continue
                    seen.add(ident)
                    handle(ident, message.value)
                    summary.handled += 1
            if batches:
                await bounded(connection, consumer.commit())
                last_new = loop.time()
            elif idle_exit is not None and loop.time() - last_new >= idle_exit:
                break
    return summary


def _print(ident: str, value: bytes) -> None:
    sys.stdout.buffer.write(value + b"\n")
    sys.stdout.buffer.flush()


async def _run(connection: KafkaConnection, topic: str, group: str, idle_exit: float | None) -> ReviewSummary:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return await consume(connection, topic, group, _print, stop, idle_exit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recurrence_ledger.processor.stream.clients.review_consumer",
        description="Example Review consumer: <prefix>.review as deduplicated JSON lines, offsets committed.",
    )
    parser.add_argument("--group", default="recurrence-review", help="its own consumer group (default %(default)s)")
    parser.add_argument("--idle-exit", type=float, metavar="SECONDS", help="stop after this long without records")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the Kafka client's log lines")
    add_config_argument(parser)
    add_model_arguments(parser, KafkaConnection, "Kafka connection")
    add_model_arguments(parser, TopicLayout, "topics", only=NAMING)
    args = parser.parse_args(argv)
    quiet_client_logs(args.verbose)
    try:
        settings = load(args)
        summary = asyncio.run(_run(settings.kafka, settings.topics.review, args.group, args.idle_exit))
    except RecurrenceError as error:
        print(f"review_consumer: {error}", file=sys.stderr)
        return error.exit_code
    print(
        f"review_consumer: {summary.handled} records handled, {summary.duplicates} duplicates skipped", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
