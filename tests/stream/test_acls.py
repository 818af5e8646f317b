"""``recurrence acls``: the least ACL set of each role, derived from the topic definitions and the settings.

The sets are checked on a broker in tests/cluster (enough, and each ACL used); here what holds for
every layout: least privilege (no ALL, no wildcard, nothing on the cluster, a reader writes
nothing, a publisher writes the journal alone), every topic of the definitions covered, the
transactional ids as Faust names its producers, and the three output forms.
"""

import shlex
import subprocess
from types import SimpleNamespace

import orjson
import pytest
from faust.transport.consumer import TransactionManager

from devkit.localrun import recurrence_command
from recurrence_ledger.processor.exceptions import EXIT_UNUSABLE, SettingsError
from recurrence_ledger.processor.stream.acls import TRANSACTIONAL_ID_SEPARATOR, Grant, acl_set, as_json, render
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.topics.definitions import CONSUMER_GROUPS, ROLES, Role, topic_specs

LAYOUTS = [
    StreamSettings(),
    StreamSettings(topic_prefix="team.rec", app_id="rec-app", journal_topic="shared.entries", partitions=12),
    StreamSettings(topic_prefix="p", processing_guarantee="exactly_once"),
    StreamSettings(topic_prefix="p", create_topics=True, processing_guarantee="exactly_once"),
]
WRITES = {"WRITE", "CREATE", "DELETE", "ALTER", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALL"}


@pytest.mark.parametrize("settings", LAYOUTS, ids=["defaults", "named", "exactly_once", "create_topics"])
@pytest.mark.parametrize("role", ROLES)
def test_every_set_is_least_privilege(settings: StreamSettings, role: Role) -> None:
    acls = acl_set(settings, role, "User:alice")
    assert acls, "every role needs something"
    assert len({(a.resource, a.operation) for a in acls}) == len(acls), "an ACL twice"
    topics = {spec.name for spec in topic_specs(settings)}
    for acl in acls:
        assert acl.principal == "User:alice" and acl.host == "*" and acl.permission == "ALLOW"
        assert acl.operation != "ALL" and "*" not in acl.resource_name
        assert acl.resource_type in ("TOPIC", "GROUP", "TRANSACTIONAL_ID"), "nothing on the cluster"
        if acl.resource_type == "TOPIC":
            assert acl.resource_name in topics and acl.pattern_type == "LITERAL"
        if acl.resource_type == "GROUP":
            assert acl.resource_name == CONSUMER_GROUPS.get(role, settings.layout.group_id)
    operations = {a.operation for a in acls}
    if role in ("read", "review", "statistics"):
        assert not operations & WRITES, "a reader may write nothing"
    if role in CONSUMER_GROUPS:
        topic = {"review": settings.topics.review, "statistics": settings.topics.statistics}[role]
        assert [(a.resource_type, a.resource_name, a.operation) for a in acls] == [
            ("TOPIC", topic, "READ"),
            ("GROUP", CONSUMER_GROUPS[role], "READ"),
        ]
    if role == "publish":
        assert [(a.resource_type, a.resource_name, a.operation) for a in acls] == [
            ("TOPIC", settings.topics.journal, "WRITE")
        ]


@pytest.mark.parametrize("settings", LAYOUTS, ids=["defaults", "named", "exactly_once", "create_topics"])
def test_the_worker_set_follows_the_definitions_and_the_settings(settings: StreamSettings) -> None:
    acls = acl_set(settings, "worker", "User:w")
    by_topic: dict[str, set[str]] = {}
    for acl in acls:
        if acl.resource_type == "TOPIC":
            by_topic.setdefault(acl.resource_name, set()).add(acl.operation)
    for spec in topic_specs(settings):
        wanted = {*spec.uses.get("worker", ()), "DESCRIBE_CONFIGS"}  # every topic is checked at start
        if settings.worker.create_topics:
            wanted.add("CREATE")
        assert by_topic.pop(spec.name) == wanted, spec.name
    assert not by_topic
    names = settings.topics
    assert "WRITE" not in {a.operation for a in acls if a.resource_name == names.journal}, "a worker never writes it"
    assert ("GROUP", settings.layout.group_id, "LITERAL", "READ") in {(*a.resource, a.operation) for a in acls}
    transactional = [a for a in acls if a.resource_type == "TRANSACTIONAL_ID"]
    if settings.worker.processing_guarantee == "exactly_once":
        assert [(a.resource_name, a.pattern_type, a.operation) for a in transactional] == [
            (f"{settings.layout.group_id}-", "PREFIXED", "WRITE")
        ]
    else:
        assert transactional == []


def test_the_transactional_ids_are_the_ones_faust_gives_its_producers() -> None:
    settings = StreamSettings(topic_prefix="p", app_id="app-1", processing_guarantee="exactly_once")
    acls = acl_set(settings, "worker", "User:w")
    (prefix,) = [a.resource_name for a in acls if a.resource_type == "TRANSACTIONAL_ID"]
    for group, partition in ((0, 0), (0, 11), (1, 3)):
        made = TransactionManager.transactional_id_format.format(
            group_id=settings.layout.group_id, tpg=SimpleNamespace(group=group, partition=partition)
        )
        assert made.startswith(prefix) and prefix == settings.layout.group_id + TRANSACTIONAL_ID_SEPARATOR


def test_the_reader_describes_the_inputs_and_the_group() -> None:
    settings = StreamSettings(topic_prefix="p")
    described = {
        (a.resource_type, a.resource_name) for a in acl_set(settings, "read", "User:r") if a.operation == "DESCRIBE"
    }
    names = settings.topics
    assert described == {("TOPIC", names.journal), ("TOPIC", names.recurred), ("GROUP", settings.layout.group_id)}


def test_the_json_form_uses_kafkas_names() -> None:
    acls = orjson.loads(as_json(acl_set(StreamSettings(processing_guarantee="exactly_once"), "worker", "User:w")))
    assert {tuple(sorted(a)) for a in acls} == {
        ("host", "operation", "pattern_type", "permission", "principal", "resource_name", "resource_type")
    }
    assert {a["pattern_type"] for a in acls} == {"LITERAL", "PREFIXED"}


def test_the_text_form_is_one_kafka_acls_command_per_resource() -> None:
    settings = StreamSettings(topic_prefix="p", processing_guarantee="exactly_once")
    acls = acl_set(settings, "worker", "User:CN=w,O=x")
    text = render(Grant(settings, "worker", "User:CN=w,O=x"), "text", "/etc/admin.properties").decode()
    commands = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    assert len(commands) == len({a.resource for a in acls})
    granted = set()
    for words in commands:
        assert words[:7] == [
            "kafka-acls",
            "--bootstrap-server",
            settings.kafka.bootstrap_servers,
            "--command-config",
            "/etc/admin.properties",
            "--add",
            "--allow-principal",
        ]
        assert words[7] == "User:CN=w,O=x"
        operations = [words[i + 1] for i, w in enumerate(words) if w == "--operation"]
        kind = next(w for w in words if w in ("--topic", "--group", "--transactional-id"))
        name = words[words.index(kind) + 1]
        prefixed = "--resource-pattern-type" in words
        granted |= {(kind, name, prefixed, op) for op in operations}
    flags = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
    camel = {"READ": "Read", "WRITE": "Write", "DESCRIBE_CONFIGS": "DescribeConfigs", "DESCRIBE": "Describe"}
    assert granted == {
        (flags[a.resource_type], a.resource_name, a.pattern_type == "PREFIXED", camel[a.operation]) for a in acls
    }


def test_a_principal_that_is_not_one_is_refused_in_one_line() -> None:
    result = subprocess.run(
        [*recurrence_command(), "acls", "--principal", "alice", "--role", "read"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == EXIT_UNUSABLE
    assert result.stderr.strip().splitlines() == [
        "recurrence acls: --principal 'alice' is not a Kafka principal: write User:NAME (the SCRAM user name, or "
        "the name a client certificate maps to)"
    ]


def test_a_consuming_service_gets_its_own_group() -> None:
    settings = StreamSettings(topic_prefix="p")
    acls = acl_set(settings, "review", "User:r", group="review-service")
    assert ("GROUP", "review-service", "LITERAL", "READ") in {(*a.resource, a.operation) for a in acls}
    with pytest.raises(SettingsError, match="--group is for the roles"):
        acl_set(settings, "worker", "User:w", group="g")
    text = render(Grant(settings, "statistics", "User:s", "stats-svc"), "text").decode()
    assert "as a recurrence statistics service (app id p, topic prefix p, consumer group stats-svc)" in text
    assert "--group stats-svc" in text
