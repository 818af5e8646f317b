"""Where each setting came from: recorded by ``load``, said by ``--verbose``, an override said once, a secret once."""

import argparse
import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.localrun import free_port
from recurrence_ledger.processor.cli import build_parser, main
from recurrence_ledger.processor.exceptions import SettingsError
from recurrence_ledger.processor.stream.clients.diagnosis import connection_failure
from recurrence_ledger.processor.stream.cliflags import load
from recurrence_ledger.processor.stream.origins import Origin
from recurrence_ledger.processor.stream.settings import KafkaConnection


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("KAFKA_", "RECURRENCE_")):
            monkeypatch.delenv(name)
    yield


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def secured_file(tmp_path: Path) -> Path:
    password = tmp_path / "svc.password"
    password.write_text("from-the-file\n")
    config = tmp_path / "secured.toml"
    config.write_text(
        '[kafka]\nbootstrap_servers = "secured:9093"\nsecurity_protocol = "SASL_SSL"\n'
        f'sasl_username = "svc"\nsasl_password_file = "{password}"\n'
    )
    return config


def test_each_setting_knows_its_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECURRENCE_CONFIG", str(secured_file(tmp_path)))
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "other")
    settings = load(parse("status", "--app-id", "a"), program="t")
    file = f"{tmp_path / 'secured.toml'} [kafka]"
    assert settings.origin("kafka", "bootstrap_servers") == Origin("config file", file)
    assert settings.origin("kafka", "sasl_username") == Origin("environment", "KAFKA_SASL_USERNAME")
    assert settings.origin("layout", "app_id") == Origin("flag", "--app-id")
    assert settings.origin("layout", "partitions") == Origin("default")
    assert settings.connection_sources() == (
        f"bootstrap_servers secured:9093, security_protocol SASL_SSL, sasl_password_file {tmp_path / 'svc.password'} "
        f"(config file {file}); sasl_mechanism PLAIN (default); sasl_username other (environment KAFKA_SASL_USERNAME)"
    )


def test_the_environment_over_the_config_file_is_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RECURRENCE_CONFIG", str(secured_file(tmp_path)))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "plaintext:9092")
    for _ in range(3):
        assert load(parse("status"), program="recurrence status").kafka.bootstrap_servers == "plaintext:9092"
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "recurrence status: KAFKA_BOOTSTRAP_SERVERS (plaintext:9092) from the environment overrides "
        f"bootstrap_servers (secured:9093) of [kafka] in {tmp_path / 'secured.toml'}"
    ]


def test_two_sources_of_one_secret_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RECURRENCE_CONFIG", str(secured_file(tmp_path)))
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-the-environment")
    with pytest.raises(SettingsError, match=r"SASL password is given twice: sasl_password \(environment"):
        load(parse("status"))
    monkeypatch.delenv("RECURRENCE_CONFIG")
    monkeypatch.setenv("RECURRENCE_HTTP_TOKEN", "t" * 32)
    monkeypatch.setenv("RECURRENCE_HTTP_TOKEN_FILE", str(tmp_path / "token"))
    assert main(["worker"]) == 2
    err = capsys.readouterr().err
    assert "web port's token is given twice" in err and "t" * 32 not in err and "from-the-environment" not in err


def test_verbose_says_where_the_connection_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("RECURRENCE_TIMEOUT", "0.5")
    assert main(["status", "-v"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("recurrence status:")]
    assert lines[0] == (
        "recurrence status: Kafka settings: bootstrap_servers 127.0.0.1:1 (environment KAFKA_BOOTSTRAP_SERVERS); "
        "security_protocol PLAINTEXT (default)"
    )


def test_acls_prints_offline_without_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    assert main(["acls", "--principal", "User:r", "--role", "read"]) == 0
    assert "kafka-acls" in capsys.readouterr().out
    assert main(["status"]) == 2  # a command that connects still asks for them
    assert "needs a SASL username" in capsys.readouterr().err


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_a_tls_client_that_meets_a_listener_without_tls_gets_the_protocol_line(protocol: str) -> None:
    """A PLAINTEXT Kafka listener reads the ClientHello as a request of absurd size and hangs up."""

    async def scenario() -> str:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(4)
            writer.transport.abort()  # a reset, as the broker's socket server closes it

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = KafkaConnection(
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol=protocol,
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="u",
            sasl_password="p",
            timeout=3,
        )
        async with server:
            return str(await connection_failure(connection, None, 3))

    line = asyncio.run(scenario())
    assert line.startswith("Kafka at 127.0.0.1:") and "hung up at the TLS handshake" in line, line
    assert f"another security protocol than {protocol}" in line and "is the broker up" not in line


def test_a_refused_worker_start_leaves_no_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # nothing listens: the topic check is refused
    monkeypatch.setenv("RECURRENCE_TIMEOUT", "0.5")
    datadir = tmp_path / "new" / "data"
    port = str(free_port())
    assert main(["worker", "--datadir", str(datadir), "--web-port", port]) == 2
    assert "cannot reach Kafka" in capsys.readouterr().err
    assert not (tmp_path / "new").exists(), "the refused start left the folder it created"
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main(["worker", "--datadir", str(kept), "--web-port", port]) == 2
    assert [p.name for p in kept.iterdir()] == [".recurrence.lock"]  # a folder that was there stays, as it was


def test_the_default_data_folder_is_under_the_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert load(parse("worker")).worker.datadir == tmp_path / "recurrence" / "worker-data"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load(parse("worker")).worker.datadir == tmp_path / ".local" / "state" / "recurrence" / "worker-data"
