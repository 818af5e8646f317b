"""The reference the embedded replay is measured against: the project's own validation limit.

Reads a journal and does nothing but what the engine's boundary does: validate
each entry with the journal model and, for a Task Outcome or a Handoff
Receipt, its content with the content model. Prints entries/s. With
``--decode`` it only decodes entry and content with orjson (the JSON limit).

    python bench/validate_only.py JOURNAL [--decode]
"""

import argparse
import sys
import time

import orjson
from pydantic import ValidationError

from recurrence_ledger.schemas.journal import JOURNAL_ENTRY, SourceEntry
from recurrence_ledger.schemas.powercontext import HandoffReceipt, TaskOutcome

_CONTENT = {"task-outcome": TaskOutcome, "handoff-receipt": HandoffReceipt}


def validate(lines: list[bytes]) -> None:
    for line in lines:
        try:
            entry = JOURNAL_ENTRY.validate_json(line)
        except ValidationError:
            continue
        if isinstance(entry, SourceEntry):
            model = _CONTENT.get(entry.source.kind() or "")
            if model is not None:
                try:
                    model.model_validate_json(entry.source.content)
                except ValidationError:
                    continue


def decode(lines: list[bytes]) -> None:
    for line in lines:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        source = value.get("source") if isinstance(value, dict) else None
        if isinstance(source, dict) and isinstance(source.get("content"), str):
            try:
                orjson.loads(source["content"])
            except orjson.JSONDecodeError:
                continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("journal")
    parser.add_argument("--decode", action="store_true", help="orjson decode only")
    args = parser.parse_args()
    with open(args.journal, "rb") as handle:
        lines = [line.rstrip(b"\r\n") for line in handle if line.strip()]
    started = time.perf_counter()
    (decode if args.decode else validate)(lines)
    seconds = time.perf_counter() - started
    print(orjson.dumps({"entries": len(lines), "seconds": seconds, "entries_per_s": len(lines) / seconds}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
