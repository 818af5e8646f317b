"""The main store's rows, each named once: what the embedded runner keeps beside its partitions.

A state directory's main store holds the rows outside every scope: the run's own (where the
journal and the ledger stand, the epoch, the clean mark, the state's identity and format) and the
engine's unscoped namespaces (the record index, dead-letter counts, patterns) plus the runner's
dead-letter diagnoses. ``MAIN_NAMESPACES`` is built from these names, so a row's home
(``statedir.home``) follows from the key that writes it.
"""

from typing import Final

import orjson

from ..core.patterns import PATTERNS
from ..core.recordindex import DEAD_LETTER_COUNTS, RECORD_INDEX
from ..core.stateheader import CONFIG_KEY, FORMAT_KEY

PARTITIONS_KEY: Final = b'["partitions"]'
EPOCH_KEY: Final = b'["epoch"]'
#: The ledger's mark (``ledgerfile.LedgerMark``) and the journal's position as of the last committed batch.
LEDGER_KEY: Final = b'["ledger"]'
JOURNAL_KEY: Final = b'["journal"]'
#: When the last batch committed (the writer's clock, milliseconds since the epoch): what a follower shows as
#: "written at" (``recurrence serve``, processor/web/follow.py), never read by the engine.
WRITTEN_KEY: Final = b'["written"]'
#: [epoch, position] when a run ended with every partition durable at that position.
CLEAN_KEY: Final = b'["clean"]'
#: The names of the single store's files a migration found beside it (JSON list): the only files beside the main
#: store a run removes (``remove_leftovers``); anything else there is not the state's, and stays.
MIGRATED_KEY: Final = b'["migrated"]'
#: Where ``recurrence explain`` reads records and entries back (``archive``): the paths last written and read.
LEDGER_PATH_KEY: Final = b'["ledger_path"]'
JOURNAL_PATH_KEY: Final = b'["journal_path"]'
#: The state directory's format (``stateformat``).
STATE_FORMAT_KEY: Final = b'["state_format"]'
#: Main: {"id": the state's id, "since": "created" | "upgraded"}; a partition: {"id": its state's id, "partition": n}.
IDENTITY_KEY: Final = b'["identity"]'
#: Main: the partitions it has committed journal lines to (a sorted JSON list).
COMMITTED_KEY: Final = b'["committed"]'
#: The runner's dead-letter diagnoses, one row per dead-lettered journal line (``coordinator``).
DIAGNOSED: Final = "dl"

_RUN_ROWS: Final = (
    FORMAT_KEY,
    CONFIG_KEY,
    PARTITIONS_KEY,
    EPOCH_KEY,
    CLEAN_KEY,
    WRITTEN_KEY,
    LEDGER_KEY,
    JOURNAL_KEY,
    LEDGER_PATH_KEY,
    JOURNAL_PATH_KEY,
    STATE_FORMAT_KEY,
    MIGRATED_KEY,
    IDENTITY_KEY,
    COMMITTED_KEY,
)
#: The namespaces whose rows live in the main store, never in a partition: written in ledger order by the one
#: process that writes the ledger.
MAIN_NAMESPACES: Final = frozenset(
    {*(orjson.loads(row)[0] for row in _RUN_ROWS), RECORD_INDEX, DEAD_LETTER_COUNTS, DIAGNOSED, PATTERNS}
)
