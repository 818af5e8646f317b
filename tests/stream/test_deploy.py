"""The deployment examples: the Kubernetes StatefulSet (kubeconform, offline schemas), compose, Dockerfile.

kubeconform and the schemas come from ``make tools``; without them the
schema check skips with the reason, and the structural checks still run.
"""

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.localrun import recurrence_command
from recurrence_ledger.processor.stream.acls import acl_set
from recurrence_ledger.processor.stream.settings import StreamSettings
from recurrence_ledger.topics.definitions import Role
from tests.support.tools import K8S_SCHEMAS, REPO, tool

K8S = REPO / "deploy" / "k8s" / "recurrence.yaml"
COMPOSE = REPO / "deploy" / "compose.yaml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
K8S_VERSION = "v1.33.0"


def _documents() -> dict[str, Any]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(K8S.read_text()) if doc}


def test_kubeconform_accepts_the_statefulset_example() -> None:
    kubeconform = tool("kubeconform")
    schemas = K8S_SCHEMAS / f"{K8S_VERSION}-local-strict"
    if not (schemas / "statefulset-apps-v1.json").is_file():
        pytest.skip("Kubernetes schemas are not installed: `make tools` extracts them into .cache/k8s-schemas")
    location = f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json"
    result = subprocess.run(
        [kubeconform, "-strict", "-summary", "-schema-location", location, str(K8S)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(f"\n[kubeconform] {result.stdout.strip()}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in result.stdout


def test_statefulset_has_stable_ids_probes_and_a_volume_per_pod() -> None:
    docs = _documents()
    sts = docs["StatefulSet"]["spec"]
    container = sts["template"]["spec"]["containers"][0]
    assert "--instance-id=$(POD_NAME)" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sts["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert docs["Service"]["spec"]["clusterIP"] == "None" and sts["serviceName"] == docs["Service"]["metadata"]["name"]
    assert sts["podManagementPolicy"] == "Parallel"
    # The layout is declared once, in the ConfigMap both the Job and the workers read.
    assert "partitions = 12" in docs["ConfigMap"]["data"]["recurrence.toml"]
    assert "--config" in docs["Job"]["spec"]["template"]["spec"]["containers"][0]["command"]


def test_compose_publishes_ports_and_gives_each_worker_an_id_and_a_volume() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    workers = {name: s for name, s in services.items() if name.startswith("worker")}
    assert len(workers) >= 2
    ports, volumes = set(), set()
    for name, service in workers.items():
        assert service["command"][-2:] == ["--instance-id", name]
        ports.add(service["ports"][0])
        volumes.add(service["volumes"][0].split(":")[0])
        assert service["environment"] == services["topics"]["environment"]  # one layout for all
    assert len(ports) == len(workers) == len(volumes)


def test_dockerfile_exposes_the_port_checks_readiness_and_sets_the_data_directory() -> None:
    text = DOCKERFILE.read_text()
    assert "EXPOSE 6066" in text and "/readyz" in text and "HEALTHCHECK" in text
    assert "RECURRENCE_DATADIR=/var/lib/recurrence/data" in text
    for path in ("COPY src ./src", "LICENSE", "processor", "schemas", "topics"):
        assert path in text


def test_the_web_port_takes_its_token_from_a_secret_and_admits_only_the_workers_and_readers() -> None:
    docs = _documents()
    pod = docs["StatefulSet"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    token_file = env["RECURRENCE_HTTP_TOKEN_FILE"]["value"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    secret = volumes["http-token"]["secret"]
    assert secret["secretName"] == "recurrence-http-token" and "optional" not in secret  # no Secret: no pod
    (item,) = secret["items"]
    assert token_file == f"{mounts['http-token']['mountPath']}/{item['path']}" and item["key"] == "token"
    assert "RECURRENCE_HTTP_TOKEN" not in env  # the token is never a plain value in the manifest
    # The probes need no token; nothing scrapes /metrics without one.
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "prometheus.io/scrape" not in pod["metadata"].get("annotations", {})
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"] == docs["StatefulSet"]["spec"]["selector"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6066}]
    peers = rule["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "recurrence"}}} in peers
    assert all(peer.get("podSelector", {}).get("matchLabels") for peer in peers), "no peer admits every pod"
    # The image reads the token from the secret file compose mounts for each worker.
    text = DOCKERFILE.read_text()
    assert "RECURRENCE_HTTP_TOKEN_FILE=/run/secrets/recurrence-http-token" in text
    compose = yaml.safe_load(COMPOSE.read_text())
    assert compose["secrets"]["recurrence-http-token"]["file"] == "./http-token"
    for name, service in compose["services"].items():
        if name.startswith("worker"):
            assert service["secrets"] == ["recurrence-http-token"]
            assert all(port.startswith("127.0.0.1:") for port in service["ports"])


# -- Strimzi KafkaUsers: the least ACLs of each role (deploy/k8s/kafka-users.yaml) -----------------------------
#
# No Strimzi CRD schema is available offline (no package registry ships one), so kubeconform cannot
# check these. Instead: the file is regenerated from `recurrence acls --strimzi` and compared, its
# shape is checked against the KafkaUser v1beta2 fields it uses (the enums below are Strimzi's), and
# its ACLs read back equal the set `recurrence acls` derives.

KAFKA_USERS = REPO / "deploy" / "k8s" / "kafka-users.yaml"
USERS: tuple[tuple[str, Role], ...] = (
    ("recurrence-worker", "worker"),
    ("recurrence-publish", "publish"),
    ("recurrence-read", "read"),
)
STRIMZI_OPERATIONS = {
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "AlterConfigs",
    "DescribeConfigs",
    "IdempotentWrite",
    "All",
}
STRIMZI_RESOURCES = {"topic", "group", "cluster", "transactionalId"}


def _layout_file(tmp_path: Path) -> Path:
    path = tmp_path / "recurrence.toml"
    path.write_text(_documents()["ConfigMap"]["data"]["recurrence.toml"])
    return path


def test_the_kafka_users_are_what_recurrence_acls_generates(tmp_path: Path) -> None:
    config = _layout_file(tmp_path)
    header = KAFKA_USERS.read_text().split("\n---\n", 1)[0]
    generated = [
        subprocess.run(
            [
                *recurrence_command(),
                "acls",
                "--config",
                str(config),
                "--principal",
                f"User:{name}",
                "--role",
                role,
                "--strimzi",
                "kafka",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for name, role in USERS
    ]
    assert KAFKA_USERS.read_text() == header + "\n" + "".join(f"---\n{text}" for text in generated), (
        "deploy/k8s/kafka-users.yaml is stale: regenerate it with the commands in its header"
    )


def test_the_kafka_users_have_strimzis_shape_and_hold_the_derived_sets(tmp_path: Path) -> None:
    users = [doc for doc in yaml.safe_load_all(KAFKA_USERS.read_text()) if doc]
    assert [u["metadata"]["name"] for u in users] == [name for name, _ in USERS]
    settings = StreamSettings(**tomllib.loads(_layout_file(tmp_path).read_text())["topics"])
    for user, (name, role) in zip(users, USERS, strict=True):
        assert set(user) == {"apiVersion", "kind", "metadata", "spec"}
        assert user["apiVersion"] == "kafka.strimzi.io/v1beta2" and user["kind"] == "KafkaUser"
        assert set(user["metadata"]["labels"]) == {"strimzi.io/cluster"}
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
        authorization = user["spec"]["authorization"]
        assert set(authorization) == {"type", "acls"} and authorization["type"] == "simple"
        found = set()
        for rule in authorization["acls"]:
            assert set(rule) == {"resource", "operations", "host"} and rule["host"] == "*"
            assert set(rule["resource"]) == {"type", "name", "patternType"}
            assert rule["resource"]["type"] in STRIMZI_RESOURCES
            assert rule["resource"]["patternType"] in ("literal", "prefix")
            assert set(rule["operations"]) <= STRIMZI_OPERATIONS and "All" not in rule["operations"]
            kind = {"topic": "TOPIC", "group": "GROUP", "transactionalId": "TRANSACTIONAL_ID"}[rule["resource"]["type"]]
            pattern = {"literal": "LITERAL", "prefix": "PREFIXED"}[rule["resource"]["patternType"]]
            found |= {
                (kind, rule["resource"]["name"], pattern, re.sub(r"(?<!^)([A-Z])", r"_\1", op).upper())
                for op in rule["operations"]
            }
        wanted = {(*a.resource, a.operation) for a in acl_set(settings, role, f"User:{name}")}
        assert found == wanted, role
