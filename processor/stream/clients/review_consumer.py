"""An example downstream consumer for a Review service: ``<prefix>.review``, deduplicated, offsets committed.

    python -m recurrence_ledger.processor.stream.clients.review_consumer --group review-service [--idle-exit 10]

It reads ``review_proposal`` and ``admission`` records in its own consumer group and prints each
new one as a JSON line (``outputconsumer``: read_committed, a record whose id it has already
handled skipped, offsets committed after each poll). The worker itself may write a record twice
after a crash; both copies carry the same id. Its principal's ACLs:
``recurrence acls --principal User:NAME --role review --group review-service``.
"""

import sys
from typing import Final

from .outputconsumer import ServiceCommand, print_value

COMMAND: Final = ServiceCommand(
    "recurrence_ledger.processor.stream.clients.review_consumer",
    "review",
    lambda names: names.review,
    print_value,
    "Example Review consumer: <prefix>.review as deduplicated JSON lines, offsets committed.",
)


def main(argv: list[str] | None = None) -> int:
    return COMMAND.main(argv)


if __name__ == "__main__":
    sys.exit(main())
