"""The release's version, its changelog section and its formats agree (issue 35, docs/upgrading.md)."""

import json
import re
import tomllib
from pathlib import Path

from devkit.fixtures import FIXTURES
from devkit.releases import PREVIOUS
from recurrence_ledger.processor.core.formats import FORMATS
from tests.support.embedded_cli import cli

REPO = Path(__file__).resolve().parents[2]


def _sections() -> list[tuple[str, str]]:
    """(version, body) per ``## <version>`` section of CHANGELOG.md, newest first."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    parts = re.split(r"^## (\S+)\s*$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_the_newest_changelog_section_is_the_version_recurrence_prints() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    newest, body = _sections()[0]
    assert newest == version
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.decode().splitlines()[0] == f"recurrence {version}"
    for heading in ("Added", "Changed", "Fixed", "Formats", "Upgrade steps"):
        assert f"\n### {heading}\n" in body, heading
    assert re.search(r"\*\*rolling upgrade: (yes|no)\*\*", body, re.I), "say whether a rolling upgrade works"


def test_the_changelog_lists_the_formats_this_release_writes() -> None:
    _, body = _sections()[0]
    formats = body.split("\n### Formats\n", 1)[1].split("\n### ", 1)[0]
    for found in FORMATS:
        assert re.search(rf"^\| {found.name} \| {found.writes}\b", formats, re.M), found.name


def test_versions_only_move_forward() -> None:
    versions = [tuple(int(n) for n in v.split(".")) for v, _ in _sections()]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)


def test_the_previous_release_has_a_fixture() -> None:
    releases = {json.loads(path.read_text())["release"] for path in FIXTURES.glob("*/fixture.json")}
    assert PREVIOUS in releases
