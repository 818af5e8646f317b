"""Engine settings: one declaration, checked before anything is written (issue 25, section 3).

``replay --pattern-scopes 100`` used to stamp 100 into the state's header and
then crash (exit 1), and every later run refused that state; a bad value now
stops the command with one line naming the flag and its range, before the
state directory is even created, and a good run on the same ``--state``
afterwards succeeds. Both runners read one header module: the embedded
state and each Kafka partition's state refuse a foreign row layout.
"""

import asyncio
from pathlib import Path

import orjson
import pytest

from recurrence_ledger.processor.core import engineconfig
from recurrence_ledger.processor.core.engineconfig import EngineConfig
from recurrence_ledger.processor.core.stateheader import CONFIG_KEY, FORMAT_KEY, ROW_LAYOUT, check_pinned, config_of
from recurrence_ledger.processor.exceptions import ConfigMismatchError, SettingsError, StateDirError
from recurrence_ledger.processor.store.memory import MemoryStore
from recurrence_ledger.processor.stream.batch.processing import BatchIO, BatchProcessor
from recurrence_ledger.processor.stream.settings import WorkerOptions
from tests.support.batchfakes import Journal, Partitions, RecordingSink, engine_step, entries_of, journal_lines
from tests.support.embedded_cli import one_line, replay, stats

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rfc-minimum.jsonl"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--pattern-scopes", "100", "--pattern-scopes must be an integer from 1 to 64 (got 100)"),
        ("--pattern-scopes", "0", "--pattern-scopes must be an integer from 1 to 64 (got 0)"),
        ("--review-threshold", "0", "--review-threshold must be an integer from 1 to 1000 (got 0)"),
        ("--review-threshold", "three", "--review-threshold must be an integer from 1 to 1000 (got 'three')"),
    ],
)
def test_a_bad_engine_setting_exits_2_with_one_line_before_the_state_exists(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    refused = replay(EXAMPLE, state, out, flag, value)
    assert refused.returncode == 2
    assert one_line(refused.stderr) == f"recurrence replay: {message}"
    assert not state.exists() and not out.exists()
    assert replay(EXAMPLE, state, out).returncode == 0
    assert stats(state)[0]["scope_id"] == "rfc-minimum"


def test_a_bad_setting_leaves_a_used_state_untouched(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "ledger.jsonl"
    assert replay(EXAMPLE, state, out, "--pattern-scopes", "5").returncode == 0
    before = out.read_bytes()
    refused = replay(EXAMPLE, state, out, "--pattern-scopes", "100")
    assert refused.returncode == 2 and "1 to 64" in one_line(refused.stderr)
    again = replay(EXAMPLE, state, out, "--pattern-scopes", "5")
    assert again.returncode == 0 and out.read_bytes() == before


def test_the_worker_takes_its_engine_settings_from_the_same_declaration() -> None:
    for name in ("review_threshold", "pattern_scopes"):
        low, high = engineconfig.bounds(name)
        field = WorkerOptions.model_fields[name]
        assert field.default == EngineConfig.model_fields[name].default
        assert WorkerOptions.env_name(name) == EngineConfig.model_fields[name].json_schema_extra["env"]  # type: ignore[index]
        WorkerOptions.model_validate({name: low})
        WorkerOptions.model_validate({name: high})
        for bad in (low - 1, high + 1):
            with pytest.raises(ValueError):
                WorkerOptions.model_validate({name: bad})
            with pytest.raises(ValueError):
                EngineConfig.model_validate({name: bad})
            with pytest.raises(SettingsError):
                engineconfig.check(name, bad)


def test_a_header_holding_a_value_out_of_range_is_refused_with_one_line() -> None:
    store = MemoryStore()
    store.apply({FORMAT_KEY: ROW_LAYOUT, CONFIG_KEY: orjson.dumps({"pattern_scopes": 100})})
    with pytest.raises(StateDirError, match="unreadable settings header"):
        config_of(store.get, "the state", "rebuild it")
    store.apply({CONFIG_KEY: orjson.dumps({"pattern_scopes": 4, "review_threshold": 3})})
    assert config_of(store.get, "the state", "rebuild it").pattern_scopes == 4
    with pytest.raises(ConfigMismatchError, match="pattern_scopes=4, not 5"):
        check_pinned(store.get, {"pattern_scopes": 5}, "the state", "rebuild it")


def _kafka_batch(state: Partitions) -> None:
    lines = journal_lines(40, seed=2)
    entries = entries_of(lines, partitions=1)
    sink = RecordingSink(state.log)
    processor = BatchProcessor(BatchIO(Journal(entries), state, sink), engine_step())
    asyncio.run(processor.process(entries))


def test_the_kafka_path_stamps_the_row_layout_and_refuses_another() -> None:
    state = Partitions()
    _kafka_batch(state)
    assert state.stores[0].get(FORMAT_KEY) == ROW_LAYOUT
    foreign = Partitions()
    foreign.partition_state(0).apply({FORMAT_KEY: b"1"})
    with pytest.raises(StateDirError, match="layout '1'"):
        _kafka_batch(foreign)
    newer = Partitions()
    newer.partition_state(0).apply({FORMAT_KEY: b"%d" % (int(ROW_LAYOUT) + 1)})
    with pytest.raises(
        StateDirError,
        match=rf"newer recurrence \(row layout {int(ROW_LAYOUT) + 1}; this one reads "
        rf"{int(ROW_LAYOUT)}\): upgrade recurrence",
    ):
        _kafka_batch(newer)
