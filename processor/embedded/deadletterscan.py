"""The dead letters of a code, read back from the ledger file: what ``serve``'s ``/dead-letters/{code}`` lists.

The state counts dead letters by code (``recordindex``) and indexes every
record by id, but keeps no list per code: the records are in the ledger. So
the listing reads the ledger, once: a scan keeps where it stopped and, when
the state has moved, reads only the bytes appended since (the ledger only
grows up to the length the state committed; a shorter one, or another file,
starts the scan again). Per code it keeps the first ``KEPT`` dead letters in
ledger (journal) order, their raw entries cut to what a listing shows, and
counts the rest.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import orjson

from ..exceptions import UnusableError
from ..host.printable import shown
from ..host.regularfile import open_regular

#: Dead letters kept per code: as many as a listing shows at most.
KEPT: Final = 1000
#: What is kept of a dead-letter record (the read surface's listing item).
Shape = Callable[[dict[str, Any]], dict[str, Any]]
_MARKER: Final = b'"record":"dead_letter"'
_CHUNK: Final = 1 << 20


@dataclass
class DeadLetterScan:
    """Dead letters by code from one ledger file, as far as it has been read."""

    path: Path | None = None
    scanned: int = 0  # ledger bytes read so far (always a line boundary)
    kept: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def update(self, ledger: Path | None, length: int, shape: Shape) -> None:
        """Read the ledger up to ``length`` (the bytes the state committed); ``shape`` turns a record into what
        is kept of it. UnusableError when the ledger cannot be read."""
        if ledger is None:
            raise UnusableError("the state names no ledger file; serve --out names the one it wrote")
        if ledger != self.path or length < self.scanned:
            self.path, self.scanned, self.kept, self.counts = ledger, 0, {}, {}
        if length == self.scanned:
            return
        try:
            with open_regular(ledger, "the ledger") as handle:
                handle.seek(self.scanned)
                self._read(handle, length - self.scanned, shape)
        except OSError as error:
            raise UnusableError(
                f"cannot read the ledger {shown(ledger)}: {error.strerror or error}; serve --out "
                "names the ledger the state wrote"
            ) from None

    def _read(self, handle: IO[bytes], budget: int, shape: Shape) -> None:
        tail = b""
        while budget > 0:
            chunk = handle.read(min(_CHUNK, budget))
            if not chunk:
                break  # shorter than the state says: what is there is listed (explain refuses such a ledger)
            budget -= len(chunk)
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                self.scanned += len(line) + 1
                if _MARKER in line:
                    record = orjson.loads(line)
                    if isinstance(record, dict) and record.get("record") == "dead_letter":
                        self._keep(record, shape)

    def _keep(self, record: dict[str, Any], shape: Shape) -> None:
        code = str(record.get("error"))
        self.counts[code] = self.counts.get(code, 0) + 1
        kept = self.kept.setdefault(code, [])
        if len(kept) < KEPT:
            kept.append(shape(record))
