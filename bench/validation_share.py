"""What the validation limit's own work costs inside a replay: goal 1's budget, measured.

Goal 1 asks a replay for at least a quarter of the validation limit's rate
(``bench/validate_only.py``: entry and content through the journal models and
nothing else). A replay does that same validation for every entry, so at the
goal it has four times the limit's time per entry, and the validation itself
takes its share of it. This runs one replay with exactly those two calls timed
(the journal union's ``validate_json`` and the content model's
``model_validate_json``, two clock reads each, about 0.2 µs) and prints, as
one JSON line, µs per entry for the whole run and for the validation in it:

    python bench/validation_share.py JOURNAL

Inside a replay the same calls cost more than in the limit's tight loop (the
replay's other work evicts the validator's caches between entries), and that
difference is part of what the rest of the engine would have to give up.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from recurrence_ledger.processor.cli import main as cli
from recurrence_ledger.processor.core import engine


class _Timed:
    """The journal union's adapter with its ``validate_json`` timed; the engine calls nothing else on it."""

    def __init__(self, adapter: Any, spent: list[float]) -> None:
        self._adapter = adapter
        self._spent = spent

    def validate_json(self, raw: bytes) -> Any:
        started = time.perf_counter()
        try:
            return self._adapter.validate_json(raw)
        finally:
            self._spent[0] += time.perf_counter() - started
            self._spent[1] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("journal", type=Path)
    args = parser.parse_args()
    spent = [0.0, 0]  # seconds in the two validations, entries validated
    engine.JOURNAL_ENTRY = _Timed(engine.JOURNAL_ENTRY, spent)  # type: ignore[assignment]
    # The engine's content validation is a private static method: timed here on purpose, nowhere else.
    parse = engine.Engine._parse  # noqa: SLF001

    def timed_parse(model: Any, content: str) -> Any:
        started = time.perf_counter()
        try:
            return parse(model, content)
        finally:
            spent[0] += time.perf_counter() - started

    engine.Engine._parse = staticmethod(timed_parse)  # type: ignore[method-assign,assignment]  # noqa: SLF001
    with tempfile.TemporaryDirectory(prefix="recurrence-share-") as tmp:
        started = time.perf_counter()
        code = cli(
            ["replay", str(args.journal), "--state", f"{tmp}/state", "--out", f"{tmp}/ledger.jsonl", "--jobs", "1"]
        )
        seconds = time.perf_counter() - started
    if code != 0 or not spent[1]:
        print(f"validation_share: the replay exited {code} after {spent[1]} entries", file=sys.stderr)
        return 1
    entries = int(spent[1])
    print(
        orjson.dumps(
            {
                "entries": entries,
                "replay_us_per_entry": round(seconds / entries * 1e6, 1),
                "validation_us_per_entry": round(spent[0] / entries * 1e6, 1),
            }
        ).decode()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
