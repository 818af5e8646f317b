"""A platform team's path on the secured node: the downstream services' own sets, ACLs applied by the
product itself, settings that say where they came from, and a worker that stops when told to.

* the example Review and statistics consumers as principals holding exactly the sets
  ``recurrence acls --role review|statistics --group G --apply`` created (every ACL used, nothing
  denied), after a refusal that names that command;
* ``--apply`` twice (the second creates nothing) and ``--remove``, checked against what the broker holds;
* a worker under exactly_once whose principal holds the at_least_once set: one line, exit 2;
* an exported ``KAFKA_BOOTSTRAP_SERVERS`` over the config file: said once, and ``--verbose`` says
  where the connection came from;
* SIGTERM to a worker whose broker is stopped: it exits with the ``--stop-timeout`` line;
* ``kafka.sh up secure`` naming a new user on the running node: the user can log in.
"""

import signal
import subprocess
import sys

import orjson

from devkit.deployment import write_journal
from devkit.localrun import free_port, recurrence_command, wait_for
from devkit.topologies import SecureBroker
from recurrence_ledger.processor.exceptions import EXIT_UNUSABLE
from recurrence_ledger.processor.synthetic import JournalSpec, generate

from . import acladmin
from .conftest import SecuredDeployment

CONSUMERS = "recurrence_ledger.processor.stream.clients"


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    return result


def consumer(secured: SecuredDeployment, user: str, module: str, group: str) -> subprocess.CompletedProcess[str]:
    """The example consumer as ``user`` until nothing new has come for 3 s."""
    env = {**secured.deployment.env(), "RECURRENCE_CONFIG": str(secured.broker.config(user))}
    return subprocess.run(
        [sys.executable, "-m", f"{CONSUMERS}.{module}", "--group", group, "--idle-exit", "3"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=secured.deployment.workdir,
    )


def test_consuming_services_and_acls_applied_by_the_product(secured: SecuredDeployment, tmp_path: object) -> None:
    deployment, broker = secured.deployment, secured.broker
    ok(secured.run("admin", "topics", "apply"))
    journal = deployment.workdir / "journal.jsonl"
    write_journal(journal, generate(JournalSpec(entries=300, scopes=8, seed=41)))
    deployment.extra_env["RECURRENCE_CONFIG"] = str(broker.config("admin"))  # the worker is not under test here
    worker = deployment.worker("w").start()
    worker.wait_ready(partitions=deployment.partitions, timeout=120)
    ok(secured.run("admin", "publish", str(journal)))
    wait_for(lambda: (worker.applied() or 0) >= 300, 60, what="the entries applied")

    # Groups are not under the topic prefix: each run its own, so a broker kept between runs holds none of them.
    review_group, stats_group = f"review-{deployment.prefix}", f"stats-{deployment.prefix}"
    # Without its set, the Review consumer's refusal names the command that prints it.
    refused = consumer(secured, "reviewer", "review_consumer", review_group)
    assert refused.returncode == EXIT_UNUSABLE and "Traceback" not in refused.stderr
    line = refused.stderr.strip()
    assert line.startswith("review_consumer: not authorized: User:reviewer may not ") and "\n" not in line
    assert line.endswith(
        f"'recurrence acls --principal User:reviewer --role review --group {review_group}' prints the ACLs "
        "a Review service needs"
    )
    print(f"\n[review refused] {line}")

    since = broker.authorizer_log.stat().st_size  # the decisions once the sets are there
    sets = {}
    for user, role, group in (("reviewer", "review", review_group), ("statsreader", "statistics", stats_group)):
        principal = f"User:{user}"
        args = ("acls", "--principal", principal, "--role", role, "--group", group)
        applied = ok(secured.run("admin", *args, "--apply"))
        assert "0 already there" in applied.stderr, applied.stderr
        again = ok(secured.run("admin", *args, "--apply"))
        assert " 0 created, " in again.stderr and all(
            s.startswith("already there\t") for s in again.stdout.splitlines()
        )
        wanted = orjson.loads(ok(secured.run("admin", *args, "--json")).stdout)
        # This deployment's (its topics and group carry the prefix; the broker may keep other runs' ACLs).
        held = [a for a in acladmin.held(broker, principal) if deployment.prefix in a["resource_name"]]
        assert sorted(map(acladmin.key, held)) == sorted(map(acladmin.key, wanted)), "the broker holds another set"
        sets[principal] = wanted
        print(f"[{role} --apply] {applied.stderr.strip()}")

    review = ok(consumer(secured, "reviewer", "review_consumer", review_group))
    assert review.stdout.strip() and "records handled" in review.stderr
    statistics = ok(consumer(secured, "statsreader", "statistics_consumer", stats_group))
    assert statistics.stdout.strip()
    log = broker.authorizer_log
    for principal, acls in sets.items():
        assert acladmin.denied(log, principal, since) == [], f"{principal} was refused something its set allows"
        unused = set(map(acladmin.key, acls)) - acladmin.used(log, principal, since)
        assert not unused, f"{principal} holds ACLs that allowed nothing: {sorted(unused)}"

    removed = ok(
        secured.run(
            "admin", "acls", "--principal", "User:reviewer", "--role", "review", "--group", review_group, "--remove"
        )
    )
    assert " removed, 0 were not there" in removed.stderr
    assert not [a for a in acladmin.held(broker, "User:reviewer") if deployment.prefix in a["resource_name"]]
    assert worker.stop() == 0


def test_an_exactly_once_worker_without_its_transactional_grant_stops_in_one_line(
    secured: SecuredDeployment,
) -> None:
    deployment = secured.deployment
    ok(secured.run("admin", "topics", "apply"))
    ok(secured.run("admin", "acls", "--principal", "User:worker4", "--role", "worker", "--apply"))  # at_least_once
    deployment.guarantee = "exactly_once"
    deployment.extra_env["RECURRENCE_CONFIG"] = str(secured.broker.config("worker4"))
    worker = deployment.worker("w").start()
    assert worker.proc is not None
    assert worker.proc.wait(timeout=90) == EXIT_UNUSABLE
    log = worker.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "KeyError" not in log
    stop = [line for line in log.splitlines() if "CRITICAL" in line]
    assert len(stop) == 1, stop
    assert f"not authorized: User:worker4 may not WRITE transactional id {deployment.group_id}-" in stop[0]
    assert "'recurrence acls --principal User:worker4 --role worker --processing-guarantee exactly_once'" in stop[0]
    print(f"\n[exactly_once without the grant] {stop[0].split('] ', 2)[-1]}")


def test_the_environment_over_the_config_file_is_said(secured: SecuredDeployment) -> None:
    closed = f"127.0.0.1:{free_port()}"
    result = secured.run("reader", "status", "-v", env={"KAFKA_BOOTSTRAP_SERVERS": closed, "RECURRENCE_TIMEOUT": "2"})
    assert result.returncode == EXIT_UNUSABLE
    said = [line for line in result.stderr.splitlines() if line.startswith("recurrence status:")]
    config = secured.broker.config("reader")
    assert said[0] == (
        f"recurrence status: KAFKA_BOOTSTRAP_SERVERS ({closed}) from the environment overrides bootstrap_servers "
        f"({secured.broker.bootstrap}) of [kafka] in {config}"
    )
    assert said[1].startswith(
        f"recurrence status: Kafka settings: bootstrap_servers {closed} (environment KAFKA_BOOTSTRAP_SERVERS); "
        "security_protocol SASL_SSL, sasl_mechanism SCRAM-SHA-512, sasl_username reader, sasl_password_file "
    )
    assert said[-1].startswith(f"recurrence status: cannot reach Kafka at {closed}")
    assert sum("overrides" in line for line in said) == 1
    print("\n[environment over config]\n" + "\n".join(said))


def test_kafka_sh_adds_a_user_to_the_running_secured_node(secure_broker: SecureBroker) -> None:
    added = f"late{free_port()}"
    more = SecureBroker((*secure_broker.users, added), env=secure_broker.env)
    up = more.script("up", "secure")
    assert up.returncode == 0, up.stderr
    assert f"added SCRAM-SHA-512 user(s) {added}" in up.stderr
    result = subprocess.run(
        [*recurrence_command(), "status"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**secure_broker.env, "RECURRENCE_CONFIG": str(secure_broker.config(added))},
    )
    # It logs in: the broker's refusal is an authorization, not an authentication failure.
    assert f"not authorized: User:{added} may not DESCRIBE" in result.stderr, result.stderr


def test_sigterm_ends_a_worker_whose_broker_is_stopped(secured: SecuredDeployment) -> None:
    deployment, broker = secured.deployment, secured.broker
    ok(secured.run("admin", "topics", "apply"))
    deployment.extra_env["RECURRENCE_CONFIG"] = str(broker.config("admin"))
    worker = deployment.worker("w", "--stop-timeout", "3").start()
    worker.wait_ready(partitions=deployment.partitions, timeout=120)
    stopped = broker.script("stop", "secure", "1")
    assert stopped.returncode == 0, stopped.stderr
    try:
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGTERM)
        code = worker.proc.wait(timeout=60)  # it ends by itself: no SIGKILL from here
        log = worker.log_path.read_text(errors="replace")
        ended = [line for line in log.splitlines() if "not stopped 3s after SIGTERM" in line]
        assert code == 0 or (code == 1 and len(ended) == 1), log[-2000:]
        print(f"\n[SIGTERM, broker stopped] exit {code}: {ended[0].split('] ', 2)[-1] if ended else 'a clean stop'}")
    finally:
        started = broker.script("start", "secure", "1")
        assert started.returncode == 0, started.stderr
