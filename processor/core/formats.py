"""Every format recurrence persists, with the version this release writes and the oldest it reads.

Formats and the wire contract are the public API (docs/upgrading.md): a release that writes a new
version of any of them says so in CHANGELOG.md, reads every older version listed here (``oldest``),
and refuses a newer one with one line. The owning modules take their numbers from here, so this
table, ``recurrence --version`` and what is written cannot disagree.
"""

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    writes: int
    oldest: int  # the oldest version this release reads (or migrates)
    where: str


#: The embedded state directory: 1 = one RocksDB store directly in ``--state`` (every release before
#: ``replay --jobs``); 2 = a main store and partition stores (``embedded/statedir``). Stamped in the main
#: store (``["state_format"]``) since 1.0.0; a state of 0.1.0 without the stamp is format 2 by its layout.
STATE_FORMAT: Final = 2
OLDEST_STATE_FORMAT: Final = 1
#: The engine's rows (``core/state``), both runners: the ``["format"]`` row of every store holding them,
#: embedded partitions and Kafka partition states (so it travels in the changelog).
ROW_LAYOUT: Final = 2
#: A changelog record holding one batch's change set (``RCS<n>``) or a part of one (``RCP<n>``).
CHANGESET_FORMAT: Final = 1
#: A partition snapshot's manifest ``format`` field (1: every chunk held whole rows; 2: chunks are
#: slices of the row stream).
SNAPSHOT_FORMAT: Final = 2
OLDEST_SNAPSHOT_FORMAT: Final = 1
#: The wire contract (docs/spec/contract.md): journal entries, output records on the topics and in the
#: ledger file, statistics. Records carry no version field (the contract forbids unknown fields); a
#: change to their shape is a new major release.
CONTRACT: Final = 1

FORMATS: Final = (
    Format("state format", STATE_FORMAT, OLDEST_STATE_FORMAT, "the embedded --state directory"),
    Format("row layout", ROW_LAYOUT, ROW_LAYOUT, "engine rows: embedded partitions, Kafka partition states"),
    Format("changelog change sets", CHANGESET_FORMAT, CHANGESET_FORMAT, "the changelog topics' records"),
    Format("snapshots", SNAPSHOT_FORMAT, OLDEST_SNAPSHOT_FORMAT, "the snapshots topic's manifests"),
    Format("contract", CONTRACT, CONTRACT, "journal entries, output records, the ledger file"),
)


def version_lines(version: str) -> list[str]:
    """What ``recurrence --version`` prints: the release, then each format it writes and reads."""

    def reads(found: Format) -> str:
        return f"reads {found.oldest}" if found.oldest == found.writes else f"reads {found.oldest} to {found.writes}"

    state = FORMATS[0]
    lines = [
        f"recurrence {version}",
        f"state format {state.writes} ({reads(state)}; 'recurrence migrate --state DIR' upgrades an older state)",
    ]
    lines.append(", ".join(f"{found.name} {found.writes} ({reads(found)})" for found in FORMATS[1:]))
    return lines
