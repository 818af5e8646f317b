"""An example downstream consumer for a statistics service: ``<prefix>.statistics``, offsets committed.

    python -m recurrence_ledger.processor.stream.clients.statistics_consumer --group stats-service [--idle-exit 10]

The statistics topic is a table (compacted, keyed by scope): each record is a scope's
``RecurrenceStatistics`` after a batch, and the last one per key is current. It prints each as a
JSON line in its own consumer group (``outputconsumer``: read_committed, offsets committed after
each poll); a real service upserts by the key. Its principal's ACLs:
``recurrence acls --principal User:NAME --role statistics --group stats-service``.
"""

import sys
from typing import Final

from .outputconsumer import ServiceCommand, print_value

COMMAND: Final = ServiceCommand(
    "recurrence_ledger.processor.stream.clients.statistics_consumer",
    "statistics",
    lambda names: names.statistics,
    print_value,
    "Example statistics consumer: <prefix>.statistics as JSON lines (last value per scope wins), offsets committed.",
    dedupe=False,
)


def main(argv: list[str] | None = None) -> int:
    return COMMAND.main(argv)


if __name__ == "__main__":
    sys.exit(main())
