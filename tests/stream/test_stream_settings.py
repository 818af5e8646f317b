"""The Kafka commands' settings, flags, probes and metrics, without a broker.

Settings are declared once (``processor/stream/settings.py``); these tests pin
what follows from that: every field has a flag with help naming its
environment variable, flags beat the environment which beats the config file,
invalid values from any source exit 2 with one line, secrets never print.
"""

import argparse
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from recurrence_ledger.processor.cli import build_parser, main
from recurrence_ledger.processor.core.deadletters import CODES
from recurrence_ledger.processor.exceptions import SettingsError, UnusableError
from recurrence_ledger.processor.stream.batch.metrics import LiveReadings, Metrics, RestoreProgress
from recurrence_ledger.processor.stream.batch.probes import ProbeInputs, liveness, readiness
from recurrence_ledger.processor.stream.batch.types import Entry
from recurrence_ledger.processor.stream.cli import check_web_port
from recurrence_ledger.processor.stream.clients.dump import topics_for_kinds
from recurrence_ledger.processor.stream.cliflags import load
from recurrence_ledger.processor.stream.settings import (
    BATCH_MAX_AT_LEAST_ONCE,
    BATCH_MAX_EXACTLY_ONCE,
    KafkaConnection,
    StreamSettings,
    TopicLayout,
    WorkerOptions,
)

KAFKA_COMMANDS = (
    ["worker"],
    ["topics", "apply"],
    ["topics", "show"],
    ["publish", "j.jsonl"],
    ["ledger-dump"],
    ["status"],
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("KAFKA_", "RECURRENCE_")):
            monkeypatch.delenv(name)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_every_field_has_a_flag_whose_help_names_its_environment_variable() -> None:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helptext = commands.choices["worker"].format_help()
    flat = " ".join(helptext.split())
    for model in (KafkaConnection, TopicLayout, WorkerOptions):
        for name, info in model.model_fields.items():
            assert info.description, name
            if name == "sasl_password":  # environment only: a flag would show in ps
                assert "--sasl-password " not in flat
                continue
            assert f"--{name.replace('_', '-')}" in flat, name
            assert model.env_name(name).replace("_", "") in flat.replace("_", "").replace("-", ""), name
    assert "RECURRENCE_REVIEW_STREAK_THRESHOLD" in flat


def test_the_batch_cap_defaults_by_guarantee_and_a_given_one_holds_under_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # exactly_once amortizes a transaction cycle per batch over twice the entries.
    assert load(parse("worker")).batch_entries == BATCH_MAX_AT_LEAST_ONCE == 1000
    assert (
        load(parse("worker", "--processing-guarantee", "exactly_once")).batch_entries == BATCH_MAX_EXACTLY_ONCE == 2000
    )
    for guarantee in ("at_least_once", "exactly_once"):
        assert load(parse("worker", "--processing-guarantee", guarantee, "--batch-max", "300")).batch_entries == 300
    monkeypatch.setenv("RECURRENCE_PROCESSING_GUARANTEE", "exactly_once")
    monkeypatch.setenv("RECURRENCE_BATCH_MAX", "50")
    assert load(parse("worker")).batch_entries == 50
    monkeypatch.delenv("RECURRENCE_BATCH_MAX")
    assert load(parse("worker")).batch_entries == 2000
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helptext = " ".join(commands.choices["worker"].format_help().split())
    assert "(default 1000 at_least_once, 2000 exactly_once)" in helptext


def test_flags_override_environment_which_overrides_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "recurrence.toml"
    config.write_text(
        '[topics]\npartitions = 12\nreplication = 3\nmin_insync = 2\ntopic_prefix = "file"\n'
        '[worker]\nbatch_max = 7\n[kafka]\nbootstrap_servers = "file:9092"\n'
    )
    monkeypatch.setenv("RECURRENCE_CONFIG", str(config))
    settings = load(parse("worker"))
    assert (settings.layout.partitions, settings.layout.replication, settings.layout.min_insync) == (12, 3, 2)
    assert settings.layout.topic_prefix == "file" and settings.batch_entries == 7
    assert settings.kafka.bootstrap_servers == "file:9092"
    monkeypatch.setenv("RECURRENCE_PARTITIONS", "6")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "env:9092")
    assert load(parse("worker")).layout.partitions == 6
    assert load(parse("worker", "--partitions", "8")).layout.partitions == 8
    assert load(parse("worker", "--bootstrap-servers", "flag:9092")).kafka.bootstrap_servers == "flag:9092"
    # Every command reads the same layout: topics apply and the worker cannot disagree.
    assert load(parse("topics", "apply")).layout.partitions == load(parse("worker")).layout.partitions == 6


def test_review_threshold_uses_the_rfc_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECURRENCE_REVIEW_STREAK_THRESHOLD", "5")
    assert load(parse("worker")).worker.review_threshold == 5


@pytest.mark.parametrize(
    ("env", "value", "needle"),
    [
        ("RECURRENCE_PARTITIONS", "0", "partitions"),
        ("RECURRENCE_PARTITIONS", "many", "partitions"),
        ("RECURRENCE_REVIEW_STREAK_THRESHOLD", "0", "review_threshold"),
        ("RECURRENCE_WEB_PORT", "70000", "web_port"),
        ("RECURRENCE_PROCESSING_GUARANTEE", "maybe", "processing_guarantee"),
        ("RECURRENCE_MIN_INSYNC", "2", "exceeds replication"),
        ("RECURRENCE_TIMEOUT", "0", "timeout"),
    ],
)
def test_invalid_settings_exit_2_with_one_readable_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(env, value)
    assert main(["topics", "show"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err


def test_sasl_password_is_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2")
    settings = load(parse("status"))
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    assert settings.kafka.aiokafka_kwargs()["sasl_plain_password"] == "hunter2"
    monkeypatch.delenv("KAFKA_SASL_PASSWORD")
    assert main(["topics", "show"]) == 2
    assert "needs a SASL password" in capsys.readouterr().err


def test_config_file_problems_are_settings_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[topic]\npartitions = 3\n")
    with pytest.raises(SettingsError, match="unknown table"):
        load(parse("status", "--config", str(bad)))
    bad.write_text("[topics]\npartitons = 3\n")
    with pytest.raises(SettingsError, match="partitons"):
        load(parse("status", "--config", str(bad)))
    with pytest.raises(SettingsError, match="cannot read"):
        load(parse("status", "--config", str(tmp_path / "missing.toml")))


def test_stream_settings_accepts_flat_keywords_and_exposes_the_stream_names() -> None:
    settings = StreamSettings(topic_prefix="p", partitions=6, replication=3, min_insync=2, web_port=7000)
    assert settings.layout.partitions == 6 and settings.layout.replication == 3 and settings.worker.web_port == 7000
    assert settings.topics.changelog == "p-state-changelog" and settings.layout.group_id == "p"
    with pytest.raises(ValueError, match="unknown setting"):
        StreamSettings(partitons=3)


@pytest.mark.parametrize("argv", KAFKA_COMMANDS)
def test_verbose_after_the_subcommand(argv: list[str]) -> None:
    assert parse(*argv, "-v").verbose is True
    assert parse("-v", *argv).verbose is True
    assert parse(*argv).verbose is False


def test_kinds_accept_documented_names_and_aliases() -> None:
    names = StreamSettings(topic_prefix="p").topics
    assert topics_for_kinds(names, "reviews") == ["p.review"]
    assert topics_for_kinds(names, "dead_letter,ledger") == ["p.ledger", "p.dead-letters"]
    assert topics_for_kinds(names, "ledger,review,dead-letters") == ["p.ledger", "p.review", "p.dead-letters"]
    with pytest.raises(SettingsError, match="choose from ledger, review, dead-letters"):
        topics_for_kinds(names, "reveiw")


def test_a_busy_web_port_is_refused_in_one_line() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(UnusableError, match=f"127.0.0.1:{port} is in use"):
            check_web_port(StreamSettings(web_port=port))


@pytest.mark.parametrize(
    "target",
    [
        "recurrence_ledger.processor.stream.worker.app",
        "recurrence_ledger.processor.stream.worker.app:app",
        "recurrence_ledger.processor.stream.app",
    ],
)
def test_faust_own_command_line_says_in_one_line_which_command_starts_a_worker(target: str, tmp_path: Path) -> None:
    # No Faust app to load (``recurrence worker`` checks the port and topics first): exit 2, one line, no traceback.
    result = subprocess.run(
        [sys.executable, "-m", "faust", "-A", target, "worker"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "recurrence: there is no Faust app to load with 'faust -A'; start a worker with 'recurrence worker' "
        "(options: 'recurrence worker --help')"
    ]
    assert result.stdout == ""


def _inputs(**overrides: object) -> ProbeInputs:
    values: dict[str, object] = {
        "agent_crashed": False,
        "rebalancing": False,
        "recovered": True,
        "partitions": [0, 1],
        "ready_partitions": [0, 1],
        "lag": {0: 0, 1: 3},
        "max_lag": 10,
    }
    values.update(overrides)
    return ProbeInputs(**values)  # type: ignore[arg-type]


def test_liveness_stays_up_while_restoring_and_readiness_waits() -> None:
    restoring = _inputs(recovered=False, ready_partitions=[])
    assert liveness(restoring).ok and not readiness(restoring).ok
    assert readiness(restoring).body["status"] == "recovering"
    assert readiness(_inputs()).ok
    behind = readiness(_inputs(lag={0: 0, 1: 11}))
    assert not behind.ok and "lag above 10 on partitions [1]" in behind.body["reasons"]
    crashed = _inputs(agent_crashed=True)
    assert not liveness(crashed).ok and not readiness(crashed).ok
    assert readiness(_inputs(partitions=[], ready_partitions=[], lag={})).ok  # joined, nothing assigned


def test_metrics_exposition_parses_and_names_follow_prometheus_conventions() -> None:
    metrics = Metrics(
        live=LiveReadings(
            lag=lambda: {0: 2, 1: 0},
            restore=lambda: RestoreProgress({0: 5}, {0: 9}, 1),
            rebalances=lambda: 2,
            ready=lambda: True,
        )
    ).with_process_metrics()
    metrics.entries = 4
    metrics.records["match"] += 1
    metrics.dead_letters["invalid_json"] += 2
    metrics.outputs_acked([Entry(0, 0, b"", 1.0), Entry(0, 1, b"", None)])
    metrics.batch_duration.observe(0.01)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    for family in families.values():
        assert family.type != "gauge" or not family.name.endswith("_total"), family.name
    assert families["recurrence_entries_processed"].type == "counter"
    assert families["recurrence_entry_to_output_seconds"].type == "histogram"
    assert families["recurrence_batch_duration_seconds"].type == "histogram"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("recurrence_dead_letters_total", (("code", "invalid_json"),))] == 2
    assert samples[("recurrence_dead_letters_total", (("code", "position_conflict"),))] == 0
    assert samples[("recurrence_consumer_lag", (("partition", "0"),))] == 2
    assert samples[("recurrence_restore_remaining_records", (("role", "active"),))] == 4
    assert samples[("recurrence_rebalances_total", ())] == 2
    assert samples[("recurrence_entry_to_output_seconds_count", ())] == 1
    assert "process_cpu_seconds" in families


def test_every_dead_letter_code_is_exported_from_the_start() -> None:
    """A fresh worker exports ``recurrence_dead_letters_total`` for every code at 0, so a rate or an alert on
    the series works before the first dead letter (issue 28)."""
    families = {f.name: f for f in text_string_to_metric_families(Metrics().render().decode())}
    samples = {
        s.labels["code"]: s.value
        for s in families["recurrence_dead_letters"].samples
        if s.name == "recurrence_dead_letters_total"
    }
    assert samples == dict.fromkeys(CODES, 0)


def test_promtool_accepts_the_exposition(tmp_path: Path) -> None:
    from tests.support.tools import tool

    promtool = tool("promtool")
    metrics = Metrics(live=LiveReadings(lag=lambda: {0: 1})).with_process_metrics()
    metrics.records["observation"] += 3
    result = subprocess.run([promtool, "check", "metrics"], input=metrics.render(), capture_output=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_stream_cli_help_runs_without_faust_imported() -> None:
    code = (
        "import sys; from recurrence_ledger.processor.cli import build_parser as b; b(); print('faust' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_each_setting_is_read_in_one_place_its_section() -> None:
    settings = StreamSettings(topic_prefix="p", app_id="a", partitions=6, web_port=7001, review_threshold=4)
    assert (settings.layout.topic_prefix, settings.layout.group_id, settings.layout.partitions) == ("p", "a", 6)
    assert (settings.worker.web_port, settings.worker.review_threshold) == (7001, 4)
    for section in (KafkaConnection, TopicLayout, WorkerOptions):
        for name in section.model_fields:
            assert not hasattr(settings, name), f"{name} is read both from StreamSettings and its section"
