"""The docs, checked without a broker: their runnable blocks run as written, and every link and
file path they name is in the repository (``tests/kafka/test_docs.py`` runs the blocks that need a broker)."""

import re
import subprocess
from pathlib import Path
from typing import Final

import pytest

from tests.support.docblocks import DOCS, REPO, Block, blocks, not_ignored, run_verbatim, runnable, written

LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE: Final = re.compile(r"`([^`\n]+)`")
# A code span naming a file or folder of the repository starts with one of its top-level folders;
# what the runs write (git-ignored folders such as out/ and bench/results/) need not exist yet.
TOP: Final = ("processor/", "schemas/", "topics/", "src/", "dev/", "tests/", "bench/", "deploy/", "docs/", "examples/")
# ...or it is a relative path to a file of a kind the repository holds.
FILE: Final = re.compile(r"[\w-]+/[\w./-]*\.(py|md|sh|txt|toml|yaml|jsonl?)")
GENERATED: Final = tuple(
    line.strip("/") + "/" for line in (REPO / ".gitignore").read_text().splitlines() if line.startswith("/")
)


@pytest.mark.parametrize("block", runnable(""), ids=lambda b: b.where)
def test_a_runnable_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    run_verbatim(block, tmp_path / "scratch")
    # Pasted into a checkout, it leaves nothing git would list as untracked (.gitignore names what it writes).
    assert not_ignored(written(tmp_path / "scratch")) == []


def test_the_quick_starts_are_marked_runnable_with_and_without_a_broker() -> None:
    # The README's first steps run without a broker; the Kafka quick start (docs/kafka.md) with one.
    marked = {(b.doc.relative_to(REPO).as_posix(), b.runnable) for b in blocks()}
    assert ("README.md", "") in marked and ("docs/kafka.md", "kafka") in marked
    # A marker names a kind the tests know, and stands right before an ``sh`` fence.
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if "runnable" in line and line.lstrip().startswith("<!--"):
                assert re.fullmatch(r"<!-- runnable(: kafka|: secure)? -->", line.strip()), f"{doc.name}:{number + 1}"
                assert lines[number + 1] == "```sh", f"{doc.name}:{number + 1}: no sh block right after the marker"


def _repository_paths() -> set[str]:
    skip = {".git", ".venv", ".cache", "build", "dist", "out", "__pycache__"}
    found = set()
    for path in REPO.rglob("*"):
        parts = path.relative_to(REPO).parts
        if not skip & set(parts) and not any(part.endswith(".egg-info") for part in parts):
            found.add("/".join(parts) + ("/" if path.is_dir() else ""))
    return found


PATHS: Final = _repository_paths()


def _in_repository(candidate: str) -> bool:
    """A path from the repository's root, or the tail of one (docs shorten ``processor/stream/worker/app.py``
    to ``worker/app.py`` where the folder is clear)."""
    forms = {candidate, candidate.rstrip("/") + "/"}  # a folder may be named with or without its slash
    return any(path in forms or any(path.endswith("/" + form) for form in forms) for path in PATHS)


def _links(doc: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(doc.read_text(encoding="utf-8"))
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_link_and_path_points_into_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = []
    for target in _links(doc):
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(REPO) or not path.exists():
            missing.append(f"link {target}")
    for span in CODE.findall(text):
        candidate = re.sub(r"(::|:\d).*$", "", span.strip())
        named = candidate.startswith(TOP) or FILE.fullmatch(candidate)
        if " " in candidate or not named or candidate.startswith(GENERATED):
            continue
        if re.search(r"[*<>{}$]", candidate):
            continue
        if not _in_repository(candidate):
            missing.append(f"path `{span}`")
    outside = [word for word in ("../shared", "/work/") if word in text]
    assert missing + outside == [], f"{doc.name}: missing {missing}, outside the repository {outside}"


def test_the_settings_table_names_every_environment_variable() -> None:
    from recurrence_ledger.processor.stream.settings import KafkaConnection, TopicLayout, WorkerOptions

    text = (REPO / "docs" / "kafka.md").read_text()
    for model in (KafkaConnection, TopicLayout, WorkerOptions):
        for name in model.model_fields:
            assert model.env_name(name) in text or name.startswith("ssl_"), name


def _timeless(line: str) -> str:
    return re.sub(r"in [0-9.]+s \([0-9,]+ entries/s\)", "in Ts (R entries/s)", line)


def test_the_readmes_make_run_sample_is_what_make_run_prints(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sample = readme.split("counted (the times differ from run to run", 1)[1].split("```text\n", 1)[1]
    sample_lines = sample.split("\n```", 1)[0].splitlines()
    out = tmp_path / "example"
    # make run's own commands, into a scratch folder (-o: the installed venv is taken as it is).
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "run", f"OUT={out}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # in the order a terminal shows them
        text=True,
        timeout=300,
        check=True,
    )
    real = [_timeless(line.replace(str(out), "out/example")) for line in done.stdout.splitlines()]
    # Each line of the sample is the next line printed; "…" stands for any lines left out.
    at, skipping = 0, False
    for line in sample_lines:
        if line.strip() == "…":
            skipping = True
            continue
        wanted = _timeless(line)
        found = real.index(wanted, at) if skipping else at
        assert found < len(real) and real[found] == wanted, (line, real[at : at + 3])
        at, skipping = found + 1, False
    assert at == len(real), real[at:]  # the sample ends where the output ends
