"""``recurrence publish``: a journal file onto the journal topic, keyed by scope, in order.

Each non-blank line becomes one record, byte for byte (the trailing newline
removed, exactly as the embedded runner reads it). The key is the line's
``scope_id`` when the line is a JSON object with a string ``scope_id``; a line
whose scope cannot be read still goes (nothing is lost), unkeyed, to
partition 0, where the worker dead-letters it like the embedded runner would.
The producer is idempotent with acks=all and one request in flight per
partition, so a scope's entries land in file order. A line larger than the
journal topic takes (``JOURNAL_MAX_RECORD_BYTES``) stops the run with its line
number before it is sent; the lines before it are published, and ``--from-line``
publishes the rest (decision 121). A last line without its line end that is not
JSON (still being written) is held back, not sent, as ``replay`` holds it back
(``JournalReader``); the summary says so.
"""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any, Final

from aiokafka import AIOKafkaProducer

from ....topics.definitions import JOURNAL_MAX_RECORD_BYTES
from ...core.partitioning import UNKEYED_PARTITION, scope_key
from ...core.tally import counted
from ...exceptions import UnusableError
from ...host.journalfile import HeldBack, JournalReader
from ...host.progress import Progress
from ..settings import KafkaConnection
from .brokers import bounded, require_topics, started
from .diagnosis import NotAuthorizedError, topic_refused

_WINDOW: Final = 2000  # records in flight before waiting for acknowledgements
# A record alone in its record batch: the batch header (61 bytes) and the record's own framing.
_FRAMING: Final = 128


@dataclass
class PublishSummary:
    entries: int = 0
    unkeyed: int = 0
    blank_lines: int = 0
    bytes: int = 0
    seconds: float = 0.0
    from_line: int = 1  # lines before it were not read for publishing (--from-line)
    held_back: HeldBack | None = None

    def held_back_line(self) -> str | None:
        if self.held_back is None:
            return None
        return (
            f"recurrence publish: the journal's last line ({self.held_back.line:,}, {self.held_back.size:,} bytes) "
            "has no line end and is not JSON yet: held back, not published (it is still being written, or its "
            "writer stopped)"
        )

    def line(self, topic: str) -> str:
        rate = self.entries / self.seconds if self.seconds > 0 else 0.0
        start = f" from line {self.from_line:,}" if self.from_line > 1 else ""
        return (
            f"recurrence publish: {counted(self.entries, 'entry', 'entries')}{start} ({self.bytes:,} bytes) to "
            f"{topic} in {self.seconds:.2f}s ({rate:,.0f} entries/s); {self.unkeyed:,} without a readable scope_id "
            f"(sent unkeyed to partition {UNKEYED_PARTITION}); {counted(self.blank_lines, 'blank line')} skipped"
        )


@asynccontextmanager
async def writing(connection: KafkaConnection, topic: str) -> AsyncIterator[None]:
    """A refusal of the producer is a refusal to WRITE the journal: Kafka 3.0+ refuses an idempotent
    producer's id on the cluster when the principal may write no topic (KIP-679)."""
    try:
        yield
    except NotAuthorizedError as refused:
        if refused.resource != "cluster":
            raise
        raise topic_refused(connection, "WRITE", [topic], refused.code) from None


async def publish(
    journal: str,
    connection: KafkaConnection,
    topic: str,
    progress_stream: IO[str] | None = None,
    from_line: int = 1,
) -> PublishSummary:
    """Lines before ``from_line`` are skipped (a run stopped at a line the topic cannot take goes on past it)."""
    summary = PublishSummary(from_line=from_line)
    began = time.monotonic()
    reader = JournalReader(journal)
    progress = Progress(reader.total_bytes, progress_stream)
    producer = AIOKafkaProducer(
        **connection.aiokafka_kwargs(),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        max_batch_size=512 * 1024,
        max_request_size=4 * 1024 * 1024,
        # A broker that stops answering mid-run fails the run within the timeout, not 40 s later.
        request_timeout_ms=max(1000, int(connection.timeout * 1000)),
    )
    try:
        async with writing(connection, topic), started(connection, producer):
            # Checked first: aiokafka would otherwise retry a missing topic's metadata for 40 s.
            await require_topics(connection, producer.client, [topic])
            in_flight: list[asyncio.Future[Any]] = []
            for line, entry in reader:
                if line < from_line:
                    continue
                key = scope_key(entry)
                if len(entry) + len(key or b"") + _FRAMING > JOURNAL_MAX_RECORD_BYTES:
                    await bounded(connection, asyncio.gather(*in_flight), "WRITE")
                    raise UnusableError(
                        f"journal line {line:,} is {len(entry):,} bytes, more than the journal topic takes "
                        f"({JOURNAL_MAX_RECORD_BYTES:,} bytes a record); "
                        f"{counted(summary.entries, 'entry', 'entries')} before it "
                        f"{'was' if summary.entries == 1 else 'were'} published, nothing after it. "
                        f"To go on without it: --from-line {line + 1} (the topic then lacks that entry, which an "
                        "embedded replay of the file would read: docs/kafka.md)"
                    )
                if key is None:
                    summary.unkeyed += 1
                in_flight.append(
                    await producer.send(
                        topic, value=entry, key=key, partition=UNKEYED_PARTITION if key is None else None
                    )
                )
                summary.entries += 1
                summary.bytes += len(entry)
                if len(in_flight) >= _WINDOW:
                    await bounded(connection, asyncio.gather(*in_flight), "WRITE")
                    in_flight.clear()
                progress.update(summary.entries, reader.read_bytes)
            await bounded(connection, asyncio.gather(*in_flight), "WRITE")
            await bounded(connection, producer.flush())
    finally:
        reader.close()
        summary.blank_lines = reader.blank_lines
        summary.held_back = reader.held_back
        progress.update(summary.entries, reader.read_bytes, force=True)
        progress.close()
    summary.seconds = time.monotonic() - began
    return summary
