"""Kubernetes JSON schemas for kubeconform, offline: from PyPI's kubernetes-validate wheel.

kubeconform downloads schemas from the web by default; this machine (and CI)
reaches only package registries, so the schemas come from the wheel. Their
``$id`` (a kubernetes.io URL) would make kubeconform resolve every reference on
the web, and their references are absolute (``/api/_definitions.json``): both
are rewritten so references resolve to the file next to each schema.

    python deploy/k8s/fetch_schemas.py WHEEL OUT_DIR [VERSION]
"""

import json
import sys
import zipfile
from pathlib import Path

PREFIX = "kubernetes_validate/kubernetes-json-schema/"


def extract(wheel: Path, out: Path, version: str) -> int:
    target = out / f"{version}-local-strict"
    target.mkdir(parents=True, exist_ok=True)
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(f"{PREFIX}{version}-local-strict/") and name.endswith(".json"):
                schema = json.loads(archive.read(name))
                schema.pop("$id", None)
                text = json.dumps(schema).replace('"/api/_definitions.json', '"_definitions.json')
                (target / Path(name).name).write_text(text, encoding="utf-8")
                count += 1
    return count


if __name__ == "__main__":
    found = extract(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "v1.33.0")
    print(f"{found} schemas", file=sys.stderr)
    sys.exit(0 if found else 1)
