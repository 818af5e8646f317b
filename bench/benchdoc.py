"""What the benchmark scripts report: a JSON line per measured phase (``emit``) on stdout, and
docs/performance.md's generated tables (``update_doc``, their one writer)."""

import json
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"


def update_doc(section: str, text: str) -> None:
    """Replace what stands between ``<!-- bench:SECTION:start -->`` and its end marker (absent: nothing)."""
    start, end = f"<!-- bench:{section}:start -->", f"<!-- bench:{section}:end -->"
    doc = DOC.read_text(encoding="utf-8")
    if start not in doc:
        return
    before, rest = doc.split(start, 1)
    _, after = rest.split(end, 1)
    DOC.write_text(f"{before}{start}\n{text}{end}{after}", encoding="utf-8")


def emit(phase: str, **values: Any) -> dict[str, Any]:
    """Print one phase's figures as a JSON line (``{"phase": PHASE, ...}``) and return them."""
    line = {"phase": phase, **values}
    print(json.dumps(line), flush=True)
    return line
