"""No function of the product takes more than six parameters (decision 145).

What travels together is one parameter object named for what it is (``records.OutcomeAt``,
``batch.types.Outgoing``, ``processing.BatchIO``, ``processing.BatchLimits``); a signature then reads
as the list of what the function works on. The embedded runner keeps to five (issue 43). ``self`` and
``cls`` are not counted; ``*args`` and ``**kwargs`` are.
"""

import ast
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[2]
WIDEST: Final = 6
WIDEST_EMBEDDED: Final = 5


def _signatures() -> list[tuple[int, str]]:
    found = []
    for path in sorted((ROOT / "processor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                count = len([n for n in names if n not in ("self", "cls")]) + bool(args.vararg) + bool(args.kwarg)
                found.append((count, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return found


def test_no_function_takes_more_than_six_parameters() -> None:
    signatures = _signatures()
    assert len(signatures) > 500  # the walk saw the product
    assert sorted(where for count, where in signatures if count > WIDEST) == []


def test_no_function_of_the_embedded_runner_takes_more_than_five() -> None:
    embedded = [(count, where) for count, where in _signatures() if where.startswith("processor/embedded/")]
    assert embedded
    assert sorted(where for count, where in embedded if count > WIDEST_EMBEDDED) == []
