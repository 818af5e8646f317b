"""The one writer of docs/performance.md's generated tables, shared by every benchmark script."""

from pathlib import Path

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
