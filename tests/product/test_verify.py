"""``recurrence verify`` and the one rule behind it: outputs deduplicated by id equal the ledger, scope by scope.

The Kafka side is made from the embedded ledger the way the topics change it:
scopes interleaved differently (partitions), records repeated (a crash re-emits
a batch), dead letters whose origin is a topic offset (so another id).
"""

import random
import subprocess
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from devkit.deployment import write_journal
from devkit.localrun import recurrence_command, run_recurrence
from devkit.oracle import Oracle
from recurrence_ledger.processor.core.records import dead_letter
from recurrence_ledger.processor.synthetic import JournalSpec, generate
from recurrence_ledger.processor.verify import compare, distinct, record_id

EXIT_DIFFERENT = 4


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    folder = tmp_path_factory.mktemp("verify")
    journal = folder / "journal.jsonl"
    write_journal(journal, generate(JournalSpec(entries=600, scopes=6, seed=4, garbage_ratio=0.05)))
    records = Oracle.run(journal, folder).records
    kinds = {orjson.loads(r)["record"] for r in records}
    assert {"match", "observation", "dead_letter"} <= kinds
    return records


def _as_on_kafka(records: list[bytes], seed: int) -> list[bytes]:
    """The same records as a dump of the topics may hold them: dead letters re-originated at topic offsets,
    scopes interleaved in another order (each scope's own order kept), a stretch of them written twice."""
    rng = random.Random(seed)
    by_scope: dict[str | None, list[bytes]] = defaultdict(list)
    for offset, value in enumerate(records):
        record = orjson.loads(value)
        if record["record"] == "dead_letter":
            origin: dict[str, str | int] = {"topic": "t.journal", "partition": 0, "offset": offset}
            by_scope[record["scope_id"]].append(
                dead_letter(
                    origin, record["scope_id"], record["position"], record["error"], record["detail"], record["raw"]
                ).line
            )
        else:
            by_scope[record.get("scope_id")].append(value)
    queues = [list(q) for q in by_scope.values()]
    out: list[bytes] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        out.append(queue.pop(0))
    return out + out[len(out) // 3 : len(out) // 2]  # a crash re-emitted these


def test_the_same_records_interleaved_repeated_and_re_originated_are_equal(ledger: list[bytes]) -> None:
    outputs = _as_on_kafka(ledger, seed=1)
    assert outputs != ledger
    result = compare(ledger=ledger, outputs=outputs)
    assert result.equal, result.lines()
    assert result.outputs_records == len(outputs) > result.outputs_distinct == result.ledger_distinct


def test_a_missing_a_changed_and_a_reordered_record_each_make_their_scope_differ(ledger: list[bytes]) -> None:
    def scope_of(value: bytes) -> str | None:
        scope: str | None = orjson.loads(value).get("scope_id")
        return scope

    def ledger_records(scope: str) -> list[bytes]:  # matches and observations: one id each
        return [r for r in distinct(ledger) if scope_of(r) == scope and orjson.loads(r)["record"] != "dead_letter"]

    one, two, three = sorted({s for s in map(scope_of, ledger) if s}, key=lambda s: -len(ledger_records(s)))[:3]
    assert len(ledger_records(three)) > 2
    lost, changed, (x, y) = ledger_records(one)[-1], ledger_records(two)[2], ledger_records(three)[:2]
    outputs = list(ledger)
    outputs.remove(lost)
    outputs[outputs.index(changed)] = orjson.dumps({**orjson.loads(changed), "extra": 1})  # same id, other content
    i, j = outputs.index(x), outputs.index(y)
    outputs[i], outputs[j] = y, x
    result = compare(ledger=ledger, outputs=outputs)
    found = {d.scope_id: d for d in result.differing}
    assert not result.equal and set(found) == {one, two, three}
    in_scope = [r for r in distinct(ledger) if scope_of(r) == one]
    assert found[one].first == in_scope.index(lost) and found[one].ledger_record == record_id(lost)
    assert found[two].first == [r for r in distinct(ledger) if scope_of(r) == two].index(changed)
    assert found[two].ledger_record == found[two].outputs_record == record_id(changed)
    assert found[three].first == [r for r in distinct(ledger) if scope_of(r) == three].index(x)


def test_a_dead_letter_is_compared_by_everything_but_its_origin_and_id(ledger: list[bytes]) -> None:
    index = next(i for i, r in enumerate(ledger) if orjson.loads(r)["record"] == "dead_letter")
    record = orjson.loads(ledger[index])
    other = dead_letter(
        {"line": 10**6}, record["scope_id"], record["position"], "position_conflict", record["detail"], record["raw"]
    ).line
    outputs = [*ledger[:index], other, *ledger[index + 1 :]]
    result = compare(ledger=ledger, outputs=outputs)
    (difference,) = result.differing
    assert difference.outputs_record is not None and "(position_conflict, position" in difference.outputs_record
    # Named by id, code and position: never the entry's text.
    assert record["raw"] not in "\n".join(result.lines())


def _verify(tmp_path: Path, ledger: bytes, outputs: bytes, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ledger.jsonl").write_bytes(ledger)
    (tmp_path / "dump.jsonl").write_bytes(outputs)
    return subprocess.run(
        [*recurrence_command(), "verify", "--ledger", "ledger.jsonl", "--outputs", "dump.jsonl", *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _lines(records: list[bytes]) -> bytes:
    return b"".join(r + b"\n" for r in records)


def test_the_command_exits_0_when_equal_and_4_naming_the_scopes_when_not(ledger: list[bytes], tmp_path: Path) -> None:
    equal = _verify(tmp_path, _lines(ledger), _lines(_as_on_kafka(ledger, seed=2)))
    assert equal.returncode == 0, equal.stderr
    assert equal.stdout.startswith("equal: ") and equal.stderr == ""

    differ = _verify(tmp_path, _lines(ledger), _lines(ledger[:-1]))
    assert differ.returncode == EXIT_DIFFERENT
    assert differ.stderr.strip().startswith("recurrence verify: the outputs differ from the ledger in 1 of ")
    assert len(differ.stderr.strip().splitlines()) == 1
    assert "first difference at #" in differ.stdout

    as_json = _verify(tmp_path, _lines(ledger), _lines(ledger[:-1]), "--json")
    assert as_json.returncode == EXIT_DIFFERENT
    report = orjson.loads(as_json.stdout)
    assert report["equal"] is False and len(report["differing"]) == 1
    assert report["ledger"]["records"] == len(ledger) and report["outputs"]["records"] == len(ledger) - 1


def test_outputs_from_stdin(ledger: list[bytes], tmp_path: Path) -> None:
    (tmp_path / "ledger.jsonl").write_bytes(_lines(ledger))
    done = subprocess.run(
        [*recurrence_command(), "verify", "--ledger", "ledger.jsonl", "--outputs", "-"],
        input=_lines(list(reversed(ledger))),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    # Reversed: every scope's order is wrong, so every scope with two or more distinct records differs.
    assert done.returncode == EXIT_DIFFERENT, done.stderr


@pytest.mark.parametrize(
    ("outputs", "why"),
    [
        (b"\x1f\x8b\x08\x00binary\n", "line 1 is not an output record"),
        (b'{"record": "match", "match_digest": "x"}\n[1, 2]\n', "line 2 is not an output record"),
        (b'{"record": "pattern", "signature_key": "k"}\n', "holds 1 pattern records"),
    ],
)
def test_what_is_not_a_dump_is_refused_in_one_line(
    ledger: list[bytes], tmp_path: Path, outputs: bytes, why: str
) -> None:
    done = _verify(tmp_path, _lines(ledger), outputs)
    assert done.returncode == 2, done.stderr
    assert why in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_missing_file_and_two_stdins_are_refused_in_one_line(tmp_path: Path) -> None:
    missing = run_recurrence("verify", "--ledger", "nope.jsonl", "--outputs", "-", timeout=60, cwd=tmp_path, input="")
    assert missing.returncode == 2 and "cannot read --ledger nope.jsonl" in missing.stderr
    both = run_recurrence("verify", "--ledger", "-", "--outputs", "-", timeout=60, cwd=tmp_path, input="")
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1
