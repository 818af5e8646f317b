"""A broker as a managed Kafka runs one: SASL_SSL with SCRAM-SHA-512, ACLs enforced, nothing allowed by default.

The whole path runs as least-privilege principals: the admin applies the topics, then a
publisher, an exactly_once worker and a reader each hold exactly what ``recurrence acls --json``
prints for their role, applied through another client (confluent-kafka's admin API). The outputs
equal the embedded ledger; the broker's authorizer log shows that nothing was denied to them
(the set is enough) and that every ACL of each set allowed a request for its own operation (none
is granted for nothing). Then each failure the commands tell apart, by its line and exit code, and
a worker whose ACL is revoked while it runs.
"""

import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import orjson
import pytest

from devkit.deployment import write_journal
from devkit.localrun import free_port, wait_for
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.records import identity_of
from recurrence_ledger.processor.exceptions import EXIT_UNUSABLE
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import compare

from . import acladmin
from .conftest import SecuredDeployment


def acl_set(secured: SecuredDeployment, principal: str, role: str, *flags: str) -> list[dict[str, str]]:
    result = secured.run("admin", "acls", "--principal", principal, "--role", role, "--json", *flags)
    assert result.returncode == 0, result.stderr
    acls: list[dict[str, str]] = orjson.loads(result.stdout)
    return acls


def grant(secured: SecuredDeployment, principal: str, role: str, *flags: str) -> list[dict[str, str]]:
    """Apply the role's set with confluent-kafka; the broker then holds exactly that set for the principal."""
    acls = acl_set(secured, principal, role, *flags)
    acladmin.apply(secured.broker, acls)
    held = acladmin.held(secured.broker, principal)
    assert sorted(map(acladmin.key, held)) == sorted(map(acladmin.key, acls)), "the broker holds another set"
    assert all(a["host"] == "*" and a["permission"] == "ALLOW" for a in held)
    return acls


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    return result


def lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def test_the_whole_path_as_principals_holding_exactly_their_sets(secured: SecuredDeployment, tmp_path: Path) -> None:
    deployment, broker = secured.deployment, secured.broker
    since = broker.authorizer_log.stat().st_size  # this test's decisions only (principals serve other tests too)
    journal = tmp_path / "journal.jsonl"
    write_journal(journal, generate(JournalSpec(entries=1500, scopes=20, seed=34, garbage_ratio=0.02)))
    oracle = Oracle.run(journal, tmp_path)
    ok(secured.run("admin", "topics", "apply"))
    sets = {
        "User:publisher": grant(secured, "User:publisher", "publish"),
        "User:worker": grant(secured, "User:worker", "worker", "--processing-guarantee", "exactly_once"),
        "User:reader": grant(secured, "User:reader", "read"),
    }
    deployment.guarantee = "exactly_once"
    deployment.extra_env["RECURRENCE_CONFIG"] = str(broker.config("worker"))
    # Snapshots every second: the worker writes and reads its snapshots topic within the test.
    worker = deployment.worker("w1", "--snapshot-interval", "1").start()
    worker.wait_ready(partitions=deployment.partitions, timeout=120)
    ok(secured.run("publisher", "publish", str(journal)))

    dumped = tmp_path / "outputs.jsonl"
    ok(secured.run("reader", "ledger-dump", "--until-caught-up", "--max-wait", "120", "--out", str(dumped)))
    comparison = compare(ledger=oracle.records, outputs=lines(dumped))
    assert comparison.equal, "\n".join(comparison.lines())
    # The reader's other commands: the group's progress, the statistics table, the pattern suggestions.
    status = orjson.loads(ok(secured.run("reader", "status", "--json")).stdout)
    assert status["inputs"][0]["lag"] == 0  # the journal's; the patterns agent may still be behind
    ok(secured.run("reader", "statistics-dump", "--out", str(tmp_path / "statistics.json")))
    ok(
        secured.run(
            "reader",
            "ledger-dump",
            "--kinds",
            "patterns",
            "--until-caught-up",
            "--out",
            str(tmp_path / "patterns.jsonl"),
        )
    )
    # The worker reads its output topics back for /explain: one record of each.
    for kind in ("ledger", "review", "dead-letters"):
        one = tmp_path / f"{kind}.jsonl"
        ok(secured.run("reader", "ledger-dump", "--kinds", kind, "--out", str(one)))
        first = lines(one)[0]
        identity, scope = identity_of(first), orjson.loads(first).get("scope_id")
        assert identity is not None
        query = f"?scope={urllib.parse.quote(scope, safe='')}" if isinstance(scope, str) else ""
        status_code, _ = worker.get(f"/explain/{urllib.parse.quote(identity, safe='')}{query}")
        assert status_code == 200, f"/explain of a {kind} record: {status_code}"
    # The snapshots topic is read only when a worker starts without local state: a clean stop ships a snapshot
    # of each partition that changed, and a start on an empty data directory loads them.
    wait_for(lambda: worker.log_path.read_text().count("shipped snapshot") >= 1, 30, what="a snapshot shipped")
    assert worker.stop() == 0
    shutil.rmtree(worker.datadir)
    worker.start().wait_ready(partitions=deployment.partitions, timeout=120)
    restarted = worker.log_path.read_text().split(f"===== start #{worker.starts} ")[-1]
    assert "loaded snapshot" in restarted, "the restarted worker loaded no snapshot"

    log = broker.authorizer_log
    for principal, acls in sets.items():
        assert acladmin.denied(log, principal, since) == [], f"{principal} was refused something its set allows"
        unused = set(map(acladmin.key, acls)) - acladmin.used(log, principal, since)
        assert not unused, f"{principal} holds ACLs that allowed nothing: {sorted(unused)}"
    print(
        f"\n[secured] {len(oracle.records)} records equal; ACLs per role: "
        + ", ".join(f"{p} {len(a)}" for p, a in sets.items())
    )


def test_the_text_form_is_what_kafka_acls_grants(secured: SecuredDeployment) -> None:
    """The pasteable commands, run through Kafka's own kafka-acls, grant exactly the JSON set."""
    text = ok(
        secured.run(
            "admin",
            "acls",
            "--principal",
            "User:reader2",
            "--role",
            "read",
            "--command-config",
            str(secured.broker.admin_properties),
        )
    ).stdout
    commands = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert commands and all(line.startswith("kafka-acls ") for line in commands)
    for command in commands:
        args = command.split()[1:]  # every word is shell-safe here: topic names, a principal, a path
        result = secured.broker.kafka_acls(*args)
        assert result.returncode == 0, result.stdout + result.stderr
    held = acladmin.held(secured.broker, "User:reader2")
    wanted = acl_set(secured, "User:reader2", "read")
    assert sorted(map(acladmin.key, held)) == sorted(map(acladmin.key, wanted))


def diagnosis(
    secured: SecuredDeployment, user: str, *args: str, env: dict[str, str] | None = None, timeout: float = 5.0
) -> str:
    """The command's one line on stderr, after checking it failed with exit 2, in time, without a traceback."""
    began = time.monotonic()
    result = secured.run(user, *args, env={"RECURRENCE_TIMEOUT": str(timeout), **(env or {})}, timeout=120)
    seconds = time.monotonic() - began
    assert result.returncode == EXIT_UNUSABLE, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr
    # A variable of ``env`` over the config file is said first (decision 111): the test sets one on purpose.
    text = [line for line in result.stderr.strip().splitlines() if " from the environment overrides " not in line]
    assert len(text) == 1, result.stderr
    assert secured.broker.password(user) not in result.stderr
    assert seconds < timeout + 10, f"{seconds:.1f}s"  # the command's timeout and its own start, not a retry loop
    return text[0]


def test_each_failure_is_told_apart(secured: SecuredDeployment, tmp_path: Path) -> None:
    broker, prefix = secured.broker, secured.deployment.prefix
    ok(secured.run("admin", "topics", "apply"))
    journal = tmp_path / "j.jsonl"
    write_journal(journal, generate(JournalSpec(entries=5, scopes=2, seed=1)))
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    localhost = broker.bootstrap.replace("127.0.0.1", "localhost")
    closed = f"127.0.0.1:{free_port()}"
    seen: dict[str, str] = {}

    seen["authentication"] = line = diagnosis(secured, "worker", "status", env={"KAFKA_SASL_PASSWORD_FILE": str(wrong)})
    assert line.startswith("recurrence status: authentication failed: Kafka at ")
    assert "refused the SCRAM-SHA-512 login of user 'worker'" in line and "not-the-password" not in line
    seen["mechanism"] = line = diagnosis(secured, "worker", "status", env={"KAFKA_SASL_MECHANISM": "PLAIN"})
    assert "authentication failed" in line and "does not offer SASL mechanism PLAIN for user 'worker'" in line

    for user, args, role, operation, resource in (
        ("nobody", ("status",), "read", "DESCRIBE", "topics"),
        ("nobody", ("ledger-dump", "--out", str(tmp_path / "x.jsonl")), "read", "DESCRIBE", "topics"),
        ("nobody", ("publish", str(journal)), "publish", "WRITE", f"topic {prefix}.journal"),
        (
            "nobody",
            ("worker", "--datadir", str(tmp_path / "wd"), "--web-port", str(free_port())),
            "worker",
            "DESCRIBE",
            "topics",
        ),
    ):
        line = diagnosis(secured, user, *args)
        assert line.startswith(f"recurrence {args[0]}: not authorized: User:{user} may not {operation} {resource}")
        assert line.endswith(
            f"'recurrence acls --principal User:{user} --role {role}' prints the ACLs "
            f"{ {'read': 'a reader', 'publish': 'a publisher', 'worker': 'a worker'}[role] } needs"
        )
        seen[f"not authorized ({args[0]})"] = line
    seen["not authorized (topics apply)"] = line = diagnosis(secured, "nobody", "topics", "apply")
    assert "not authorized: User:nobody may not DESCRIBE topics" in line and "super user" in line

    other_ca = str(_other_ca(tmp_path))
    seen["untrusted"] = line = diagnosis(secured, "worker", "status", env={"KAFKA_SSL_CAFILE": other_ca})
    assert line.startswith(f"recurrence status: TLS: the certificate of Kafka at {broker.bootstrap} is not trusted")
    seen["host name"] = line = diagnosis(secured, "worker", "status", env={"KAFKA_BOOTSTRAP_SERVERS": localhost})
    assert line.startswith(
        f"recurrence status: TLS: the certificate of Kafka at {localhost} is not valid for the host name 'localhost'"
    )
    seen["client certificate"] = line = diagnosis(
        secured,
        "worker",
        "status",
        env={"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{broker.mtls_port}", "KAFKA_SECURITY_PROTOCOL": "SSL"},
    )
    assert line.startswith(
        f"recurrence status: TLS: Kafka at 127.0.0.1:{broker.mtls_port} refused the client certificate (none was given"
    )
    seen["protocol"] = line = diagnosis(secured, "worker", "status", env={"KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"})
    assert "hung up at the first request" in line and "set --security-protocol" in line
    seen["unreachable"] = line = diagnosis(secured, "worker", "status", env={"KAFKA_BOOTSTRAP_SERVERS": closed})
    assert line.startswith(f"recurrence status: cannot reach Kafka at {closed} (ConnectionRefusedError")
    assert "is the broker up" in line
    seen["missing"] = line = diagnosis(secured, "admin", "status", env={"RECURRENCE_TOPIC_PREFIX": f"{prefix}-none"})
    assert line.startswith(f"recurrence status: topics {prefix}-none.journal, ") and "not found on" in line
    # Only the unreachable broker is asked whether it is up.
    assert [k for k, v in seen.items() if "is the broker up" in v] == ["unreachable"]
    print("\n[diagnoses]\n" + "\n".join(f"{k}: {v}" for k, v in seen.items()))


def _other_ca(tmp_path: Path) -> Path:
    """A CA that did not sign the broker's certificate (the operator's wrong bundle)."""
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-days",
            "1",
            "-keyout",
            str(tmp_path / "other-ca.key"),
            "-out",
            str(tmp_path / "other-ca.pem"),
            "-subj",
            "/CN=another CA",
        ],
        check=True,
        capture_output=True,
    )
    return tmp_path / "other-ca.pem"


@pytest.mark.parametrize(
    ("user", "guarantee", "revoked"),
    [
        ("worker2", "exactly_once", {"resource_type": "TOPIC", "suffix": ".ledger", "operation": "WRITE"}),
        ("worker3", "at_least_once", {"resource_type": "GROUP", "suffix": "", "operation": "READ"}),
    ],
    ids=["ledger-write-exactly-once", "group-read-at-least-once"],
)
def test_a_worker_whose_acl_is_revoked_stops_with_the_line(
    secured: SecuredDeployment, tmp_path: Path, user: str, guarantee: str, revoked: dict[str, str]
) -> None:
    deployment = secured.deployment
    ok(secured.run("admin", "topics", "apply"))
    acls = grant(secured, f"User:{user}", "worker", "--processing-guarantee", guarantee)
    deployment.guarantee = guarantee
    deployment.extra_env["RECURRENCE_CONFIG"] = str(secured.broker.config(user))
    worker = deployment.worker("w").start()
    worker.wait_ready(partitions=deployment.partitions, timeout=120)
    lines_ = list(generate(JournalSpec(entries=400, scopes=10, seed=35)))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    write_journal(first, lines_[:200])
    write_journal(second, lines_[200:])
    ok(secured.run("admin", "publish", str(first)))  # the publisher's set is not what is under test here
    wait_for(lambda: (worker.applied() or 0) >= 200, 60, what="the first entries applied")

    name = deployment.prefix + revoked["suffix"]
    (target,) = [
        a
        for a in acls
        if a["resource_type"] == revoked["resource_type"]
        and a["resource_name"] == name
        and a["operation"] == revoked["operation"]
    ]
    acladmin.revoke(secured.broker, target)
    ok(secured.run("admin", "publish", str(second)))
    assert worker.proc is not None
    code = worker.proc.wait(timeout=60)
    assert code == EXIT_UNUSABLE
    log = worker.log_path.read_text(errors="replace")
    kind = {"TOPIC": "topic", "GROUP": "group"}[revoked["resource_type"]]
    stop = [line for line in log.splitlines() if "CRITICAL" in line]
    assert len(stop) == 1, stop  # the one line it stops with: not Faust's crash, no retry loop
    assert log.rstrip().endswith(stop[0].strip())
    assert f"not authorized: User:{user} may not {revoked['operation']} {kind} {name} " in stop[0]
    assert f"'recurrence acls --principal User:{user} --role worker'" in stop[0]
    print(f"\n[revoked {guarantee}] {stop[0].split('] ', 2)[-1]}")
