"""The committed JSON Schemas are exactly what the models generate (downstream reads them)."""

import json

import pytest

from recurrence_ledger.schemas.export import OUT_DIR, SCHEMAS, render


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_matches_model(name: str) -> None:
    path = OUT_DIR / f"{name}.schema.json"
    assert path.exists(), f"{path} missing: run 'make schemas'"
    assert path.read_text(encoding="utf-8") == render(name), f"{path} drifted from the model: run 'make schemas'"


def test_no_stale_schema_files() -> None:
    on_disk = {p.name.removesuffix(".schema.json") for p in OUT_DIR.glob("*.schema.json")}
    assert on_disk == set(SCHEMAS)


def test_record_schemas_forbid_unknown_fields() -> None:
    schema = json.loads(render("record-observation"))
    assert schema["additionalProperties"] is False
