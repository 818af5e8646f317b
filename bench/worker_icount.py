"""Instructions per entry of the worker's batch path, without a broker, beside embedded replay's.

``bench/icount.py`` counts the embedded runner; this counts what the Kafka
worker's main thread adds around the same engine: ``BatchProcessor`` (plan,
headers, routes, the record index, statistics records, change sets) and the
worker's sink (``sink.FaustSink``: producer batching over aiokafka's real
``BatchBuilder``, and with ``--exactly-once`` the transactional producer of
each partition and its calls), over one RocksDB database per partition, in batches of
``--batch`` entries on ``--partitions`` partitions placed as the producer
would place them. The broker is a stub that acknowledges every producer batch
at once, so what is counted is CPU the worker spends per entry, not waiting;
Faust's consumer thread, the network and aiokafka's sender are not in it.
It runs under the worker's collection policy and without early flushes (they
follow the clock, which valgrind slows ~50 times), so a count repeats to a
few parts in a hundred thousand.

    python bench/worker_icount.py JOURNAL [--short 2000] [--long 8000] [--exactly-once] [--no-replay]

It prints the worker path's instructions per entry, embedded replay's on the
same entries, and their ratio: the share of the worker's per-entry CPU that
is engine work both runners do (goal 3 of issue 8 measures the same thing
by the clock, on a real broker, in ``kafka_bench.py --compare``). Like
``icount.py`` it runs each count on the first SHORT and LONG entries and
divides the difference by LONG - SHORT, so start-up cancels out.
"""

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka.producer.message_accumulator import BatchBuilder

from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.partitioning import partition_for, scope_key
from recurrence_ledger.processor.host.gcpolicy import freeze_startup_objects
from recurrence_ledger.processor.store.rocksdb import RocksStore
from recurrence_ledger.processor.stream.batch import processing
from recurrence_ledger.processor.stream.batch.processing import BatchIO, BatchProcessor
from recurrence_ledger.processor.stream.batch.steps import EngineStep
from recurrence_ledger.processor.stream.batch.types import Entry
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.processor.stream.worker.sink import FaustSink

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from icount import PYTHON, Window, check_window, counted_with_state, replay_count, window_parser  # noqa: E402


class _StubProducer:
    """Just enough of an AIOKafkaProducer for the sink: real batch builders, instant acknowledgements."""

    def __init__(self, partitions: int) -> None:
        self._partitions = set(range(partitions))
        self._offsets: dict[tuple[str, int], int] = {}

    def create_batch(self) -> Any:
        return BatchBuilder(512 * 1024, 0, is_transactional=False, key_serializer=None, value_serializer=None)

    async def partitions_for(self, topic: str) -> set[int]:
        return self._partitions

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> "asyncio.Future[Any]":
        base = self._offsets.get((topic, partition), 0)
        self._offsets[(topic, partition)] = base + batch.record_count()
        acknowledged: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        acknowledged.set_result(SimpleNamespace(offset=base))
        return acknowledged


class _Producer(_StubProducer):
    """The transactional calls an exactly_once batch makes, answered at once."""

    async def send_offsets_to_transaction(self, offsets: Mapping[Any, int], group_id: str) -> None:
        return None

    async def commit_transaction(self) -> None:
        return None

    async def begin_transaction(self) -> None:
        return None


class _FaustProducer:
    """What ``faustcompat`` reaches of Faust's Producer: the plain producer, one transactional producer and
    lock per journal partition (``<app id>-<group>-<partition>``)."""

    def __init__(self, partitions: int) -> None:
        self._plain = _Producer(partitions)
        ids = [f"icount-0-{partition}" for partition in range(partitions)]
        self._transaction_producers = {tid: _Producer(partitions) for tid in ids}
        self._trn_locks = {tid: asyncio.Lock() for tid in ids}

    def _ensure_producer(self) -> Any:
        return self._plain


def _app(partitions: int) -> Any:
    """Just enough of the worker's Faust app for ``FaustSink``."""
    return SimpleNamespace(
        conf=SimpleNamespace(id="icount"),
        assignor=SimpleNamespace(group_for_topic=lambda t: 0),
        producer=_FaustProducer(partitions),
    )


class _State:
    """``PartitionedState`` over one RocksDB database per partition (what Faust's table keeps)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._stores: dict[int, Any] = {}

    def partition_state(self, partition: int) -> Any:
        store = self._stores.get(partition)
        if store is None:
            store = self._stores[partition] = RocksStore.open(self._root / f"p{partition}")
        return store

    def open_partition_state(self, partition: int) -> Any:
        return self._stores.get(partition)

    def generation(self, partition: int) -> int:
        return 0

    def flush_local(self, partition: int, txn: Any, changelog_offset: int) -> None:
        txn.flush({b'["stream","changelog_offset"]': str(changelog_offset).encode()})

    def changelog_offset(self, partition: int) -> int | None:
        return None

    def apply_changelog(self, partition: int, records: Sequence[Any]) -> None:
        raise AssertionError("no restore here")


class _Journal:
    def __init__(self, entries: Sequence[Any]) -> None:
        self._values = {(e.partition, e.offset): e.value for e in entries}

    async def log_start(self, partition: int) -> int:
        return 0

    async def fetch(self, partition: int, start: int, stop: int) -> list[tuple[int, bytes]]:
        return [(o, self._values[(partition, o)]) for o in range(start, stop) if (partition, o) in self._values]


def run(journal: Path, state: Path, partitions: int, batch: int, exactly_once: bool) -> None:
    """The worker's batch path over ``journal`` (the child process callgrind counts)."""
    # No early flushes: they come after EARLY_FLUSH_SECONDS of the clock, and valgrind runs the code
    # some 50 times slower, so their number (and the count) would vary from run to run by ~1%.
    setattr(processing, "EARLY_FLUSH_SECONDS", float("inf"))  # noqa: B010 (a Final, set for this process only)
    offsets = dict.fromkeys(range(partitions), 0)
    entries = []
    # The publisher's work, not the worker's: murmur2 is pure Python, so once per scope, not per entry.
    placed: dict[bytes, int] = {}
    published = time.time()  # each record's timestamp, as a fetched record has one (the latency histogram)
    for line in journal.read_bytes().splitlines():
        if not line.strip():
            continue
        key = scope_key(line)
        if key is None:
            partition = 0
        elif (partition := placed.get(key, -1)) < 0:
            partition = placed[key] = partition_for(key.decode(), partitions)
        entries.append(Entry(partition, offsets[partition], line, published))
        offsets[partition] += 1
    topics = StreamSettings(topic_prefix="icount").topics
    processor = BatchProcessor(
        BatchIO(_Journal(entries), _State(state), FaustSink(_app(partitions), topics.journal, exactly_once)),
        EngineStep(topics, EngineConfig()),
    )
    # The worker's collection policy (``gcpolicy.freeze_startup_objects``): startup objects frozen, no full
    # collection triggered by heap growth. Without it full collections walked the row caches here.
    freeze_startup_objects()

    async def main() -> None:
        # As the worker runs them: at-least-once each batch's engine, then its durability in the
        # background while the next batch's engine runs (``process_pipelined``); exactly_once one
        # batch after another, each in its transactions (``process``).
        tail = None
        for start in range(0, len(entries), batch):
            if exactly_once:
                await processor.process(entries[start : start + batch])
            else:
                tail = await processor.process_pipelined(entries[start : start + batch])
        if tail is not None:
            await tail

    asyncio.run(main())


def worker_count(journal: Path, workdir: Path, partitions: int, batch: int, exactly_once: bool) -> int:
    state = workdir / f"worker-state-{journal.stem}"
    return counted_with_state(
        [
            PYTHON,
            __file__,
            "--child",
            str(journal),
            "--state",
            str(state),
            "--partitions",
            str(partitions),
            "--batch",
            str(batch),
            *(["--exactly-once"] if exactly_once else []),
        ],
        state,
    )


def main() -> int:
    parser = window_parser()
    parser.description = (__doc__ or "").splitlines()[0]
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1000, help="entries per batch (the worker's --batch-max)")
    parser.add_argument("--no-replay", action="store_true", help="count the worker path only (an A/B of it)")
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="the exactly_once path: transactional producers, one batch after another",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run(args.journal, args.state, args.partitions, args.batch, args.exactly_once)
        return 0
    if not check_window(parser, args):
        return 2
    with tempfile.TemporaryDirectory(prefix="recurrence-worker-icount-") as tmp:
        window = Window.of(args, Path(tmp))
        worker = window.per_entry(
            lambda journal: worker_count(journal, window.workdir, args.partitions, args.batch, args.exactly_once)
        )
        replay = None if args.no_replay else window.per_entry(lambda journal: replay_count(journal, window.workdir))
    print(
        f"entries {args.short + 1:,}-{args.long:,} of {args.journal.name}, "
        f"{args.partitions} partitions, batches of {args.batch}, "
        f"{'exactly_once' if args.exactly_once else 'at_least_once'}"
    )
    print(f"worker batch path: {worker:,.0f} instructions per entry")
    if replay is not None:
        print(f"embedded replay:   {replay:,.0f} instructions per entry")
        print(f"replay / worker (by instructions): {replay / worker:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
