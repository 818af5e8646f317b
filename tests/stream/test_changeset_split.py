"""Change sets larger than one changelog record: split into parts, joined back whole (no broker).

A batch's change set can outgrow the broker's record limit; the processor
then writes it as consecutive part records, each at most
``changelog_record_bytes``. Restoring must apply a change set only once all
its parts are read -- across recovery batches, after a restart that reads
parts again, and after a crash that left the first parts of a batch without
the rest (at-least-once: that batch runs again and writes all its parts anew).
"""

import asyncio
import logging
import random
from collections.abc import Awaitable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devkit.deployment import write_journal
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.formats import CHANGESET_FORMAT
from recurrence_ledger.processor.stream.batch import changeset
from recurrence_ledger.processor.stream.batch.processing import BatchIO, BatchLimits, BatchProcessor
from recurrence_ledger.processor.stream.batch.types import SOURCE_HEADER, ChangelogRecord, Outgoing
from recurrence_ledger.processor.verify import compare
from tests.support.batchfakes import TOPICS, Journal, Partitions, RecordingSink, engine_step, entries_of, journal_lines
from tests.support.faust_tables import BACKENDS, state_table_data, table_rows

CAP = 700  # bytes per changelog record: a 25-entry batch's change set takes several


@given(
    st.dictionaries(st.binary(max_size=300), st.one_of(st.none(), st.binary(max_size=300)), max_size=20),
    st.integers(min_value=changeset.MIN_RECORD_BYTES, max_value=400),
)
def test_split_records_stay_under_the_cap_and_join_back_whole(changes: dict[bytes, bytes | None], cap: int) -> None:
    records = changeset.encode_records(changes, cap)
    assert all(len(value) <= cap for value in records)
    whole = changeset.encode(changes)
    if len(whole) <= cap:
        assert records == [whole]
    assembler = changeset.Assembler()
    taken = [assembler.take(3, offset, value) for offset, value in enumerate(records)]
    assert all(t is changeset.Held.HELD for t in taken[:-1])
    assert taken[-1] == whole and changeset.decode(whole) == changes


def test_a_cap_without_room_for_a_part_is_refused() -> None:
    with pytest.raises(ValueError):
        changeset.encode_records({b"k": b"v" * 100}, changeset.MIN_RECORD_BYTES - 1)


def test_a_change_set_of_a_newer_format_is_refused_not_applied_as_a_plain_record() -> None:
    whole = changeset.encode({b'["scope","a"]': b"[1,0,0,0,0]"})
    newer = b"RCS%d" % (CHANGESET_FORMAT + 1) + whole[len(changeset.MAGIC) :]
    assembler = changeset.Assembler()
    assert assembler.take(0, 1, whole) == whole
    with pytest.raises(
        changeset.ChangeSetError,
        match=rf"partition 0 offset 2 is a change set of format "
        rf"{CHANGESET_FORMAT + 1}, written by a newer recurrence \(this one reads {CHANGESET_FORMAT}\)",
    ):
        assembler.take(0, 2, newer)
    part = b"RCP%d" % (CHANGESET_FORMAT + 1) + b"\x00" * 9
    with pytest.raises(changeset.ChangeSetError, match="newer recurrence"):
        assembler.take(0, 3, part)
    assert assembler.take(0, 4, b"RCSx plain value") == b"RCSx plain value"  # not a format digit: a plain value


def test_orphaned_first_parts_are_dropped_and_the_rerun_applies() -> None:
    # A crash after two of three parts; the batch ran again and wrote all three anew.
    old = changeset.encode_records({b"a": b"x" * 100, b"b": b"y" * 100}, 90)
    new = changeset.encode_records({b"a": b"x" * 100, b"c": b"z" * 100}, 90)
    assert len(old) > 2
    assembler = changeset.Assembler()
    log = [*old[:2], *new]
    out = [assembler.take(0, offset, value) for offset, value in enumerate(log)]
    assert [o for o in out if o is not changeset.Held.HELD] == [changeset.encode({b"a": b"x" * 100, b"c": b"z" * 100})]
    assert assembler.orphaned == 2
    # A part without its predecessors (the tail of an orphan) is dropped as well.
    assembler = changeset.Assembler()
    assert assembler.take(1, 10, old[1]) is changeset.Held.HELD and assembler.orphaned == 1


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return state_table_data(request.param, tmp_path, "cs")


def test_a_split_change_set_is_applied_with_its_last_part_across_recovery_batches(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store.apply_changelog(0, [(0, b"s", changeset.encode({b"a": b"1"}))])
    parts = changeset.encode_records({b"a": b"2", b"b": b"3" * 200}, 64)
    orphan = changeset.encode_records({b"a": b"never", b"b": b"4" * 200}, 64)[:2]
    records: list[ChangelogRecord] = [(1 + i, b"s", v) for i, v in enumerate([*orphan, *parts])]
    cut = len(orphan) + len(parts) // 2
    with caplog.at_level(logging.WARNING, logger="recurrence.stream"):
        store.apply_changelog(0, records[:cut])  # a recovery batch ends mid-change-set
    assert table_rows(store, 0) == [(b"a", b"1")]
    assert store.changelog_offset(0) == 0, "the offset must stay at the last whole change set"
    assert "dropped 2 parts" in caplog.text
    store.apply_changelog(0, records[cut - 1 : cut])  # a held part delivered again
    assert store.changelog_offset(0) == 0
    store.apply_changelog(0, records[cut - 1 :])  # and the rest
    assert table_rows(store, 0) == [(b"a", b"2"), (b"b", b"3" * 200)]
    store.apply_changelog(0, records[1:])  # read again from before the held parts (a restore's tail check)
    assert table_rows(store, 0) == [(b"a", b"2"), (b"b", b"3" * 200)]
    assert store.changelog_offset(0) == records[-1][0]
    store.apply_changelog_batch([_event(0, records[-1][0] + 1, changeset.encode({b"a": None}))], None, None)
    assert table_rows(store, 0) == [(b"b", b"3" * 200)]


def _event(partition: int, offset: int, value: bytes | None, key: bytes = b"scope") -> Any:
    return SimpleNamespace(message=SimpleNamespace(partition=partition, offset=offset, key=key, value=value))


class CrashingSink(RecordingSink):
    """A sink whose process dies after ``after`` more changelog records were written (kill -9 mid-write)."""

    def __init__(self, log: list[tuple[str, Any]], changelog: dict[int, list[bytes]]) -> None:
        super().__init__(log)
        self.changelog = changelog
        self.after: int | None = None

    async def send(self, record: Outgoing) -> Awaitable[Any]:
        if record.topic == TOPICS.changelog and self.after is not None:
            if self.after == 0:
                raise ConnectionError("killed")
            self.after -= 1
        return await super().send(record)


def test_a_batch_processor_under_a_tiny_cap_splits_and_a_crash_mid_write_loses_nothing(
    store: Any, tmp_path: Path
) -> None:
    lines = journal_lines(500, seed=21)
    journal_file = tmp_path / "journal.jsonl"
    write_journal(journal_file, lines)
    oracle = Oracle.run(journal_file, tmp_path)
    entries = entries_of(lines, partitions=2)
    changelog: dict[int, list[bytes]] = {}
    state = Partitions()
    sinks: list[CrashingSink] = []
    crashes = 0

    def processor() -> BatchProcessor:
        sink = CrashingSink(state.log, changelog)
        sinks.append(sink)
        return BatchProcessor(
            BatchIO(Journal(entries), state, sink), engine_step(), limits=BatchLimits(changelog_record_bytes=CAP)
        )

    async def main() -> None:
        nonlocal crashes
        chooser = random.Random(4)
        current = processor()
        start = 0
        while start < len(entries):
            batch = entries[start : start + 25]
            if chooser.random() < 0.2:
                current.sink.after = chooser.randrange(1, 4)  # type: ignore[attr-defined]
            try:
                await current.process(batch)
            except ConnectionError:
                crashes += 1
                # The local state never saw the batch (it is written after the changelog): a
                # restarted worker runs it again; the first parts stay in the changelog.
                current = processor()
                continue
            start += 25

    asyncio.run(main())
    assert crashes >= 3
    records = {p: [(o, b"s", v) for o, v in enumerate(values)] for p, values in changelog.items()}
    assert all(len(v) <= CAP for values in changelog.values() for v in values)
    assert any(changeset.is_part(v) for values in changelog.values() for v in values)
    # Outputs: every record at least once, and deduplicated exactly the oracle's.
    assert compare(ledger=oracle.records, outputs=_in_source_order(sinks)).equal
    # A restore from the changelog alone, in recovery batches that cut change sets anywhere.
    for partition, recs in records.items():
        for at in range(0, len(recs), 7):
            store.apply_changelog_batch([_event(partition, o, v) for o, _, v in recs[at : at + 7]], None, None)
        want = [(k, v) for k, v in state.partition_state(partition).iterate_prefix(b"")]
        assert table_rows(store, partition) == want
    assert store.assembler.orphaned > 0


def _in_source_order(sinks: Sequence[RecordingSink]) -> list[bytes]:
    tagged = []
    for sink in sinks:
        for topic in TOPICS.outputs():
            for _key, value, headers in sink.sent.get(topic, []):
                source = dict(headers)[SOURCE_HEADER].decode()
                tagged.append((tuple(int(x) for x in source.split(":")), value))
    return [value for _, value in sorted(tagged)]
