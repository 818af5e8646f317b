"""The deployment examples: the Kubernetes StatefulSet (kubeconform, offline schemas), compose, Dockerfile.

kubeconform and the schemas come from ``make tools``; without them the
schema check skips with the reason, and the structural checks still run.
"""

import subprocess
from typing import Any

import pytest
import yaml

from tests.tools import K8S_SCHEMAS, REPO, tool

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
        capture_output=True, text=True, timeout=120, check=False,
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
