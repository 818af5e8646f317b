"""A worker's ``/dead-letters/{code}`` reads the dead-letters topic once, then only what it grew by, and keeps
at most the first N of each code in journal order, duplicates listed once (decision 122)."""

import asyncio
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from devkit.deployment import Deployment
from recurrence_ledger.processor.stream.batch.types import ID_HEADER, SOURCE_HEADER
from recurrence_ledger.processor.stream.clients.deadletterfeed import DeadLetterFeed


def _record(partition: int, offset: int, code: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    ident = f"dl-{partition}-{offset}"
    value = orjson.dumps({"record": "dead_letter", "dead_letter_id": ident, "error": code, "raw": "x"})
    return value, [(SOURCE_HEADER, f"{partition}:{offset}:0".encode()), (ID_HEADER, f"dead_letter:{ident}".encode())]


async def _produce(deployment: Deployment, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    producer = AIOKafkaProducer(**deployment.connection.aiokafka_kwargs())
    await producer.start()
    try:
        for index, (value, headers) in enumerate(records):
            await producer.send_and_wait(
                f"{deployment.prefix}.dead-letters", value=value, headers=headers, partition=index % 2
            )
    finally:
        await producer.stop()


def _ids(feed: DeadLetterFeed, code: str) -> list[Any]:
    return [row["dead_letter_id"] for row in feed.listed(code)]


def test_the_feed_reads_only_what_the_topic_grew_by_and_keeps_the_first_of_each_code(
    deployment: Deployment,
) -> None:
    deployment.apply_topics()
    feed = DeadLetterFeed(deployment.connection, f"{deployment.prefix}.dead-letters", 3, dict)
    first = [_record(1, offset, "invalid_json") for offset in (10, 11, 12, 13)] + [_record(0, 5, "bad_field")]
    asyncio.run(_produce(deployment, first))
    asyncio.run(feed.update())
    assert feed.read_records == 5
    assert _ids(feed, "invalid_json") == ["dl-1-10", "dl-1-11", "dl-1-12"]  # the first 3 of the code
    assert _ids(feed, "bad_field") == ["dl-0-5"]
    # More: one of an earlier journal position (another journal partition sorts first), and duplicates
    # (a batch written again) of a listed record and of one past those kept.
    later = [_record(0, 2, "invalid_json"), _record(1, 10, "invalid_json"), _record(1, 13, "invalid_json")]
    asyncio.run(_produce(deployment, later))
    asyncio.run(feed.update())
    assert feed.read_records == 8  # only the 3 new records were read
    assert _ids(feed, "invalid_json") == ["dl-0-2", "dl-1-10", "dl-1-11"]
    asyncio.run(feed.update())
    assert feed.read_records == 8  # nothing new: nothing read
