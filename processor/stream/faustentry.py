"""What Faust's own command line finds as ``app`` here: one line saying which command starts a worker.

``faust -A <module> worker`` imports the module and takes its ``app``. The worker has
no app to take: ``recurrence worker`` checks the web port and the topics and builds the
app from the settings (``worker.build.build_worker``), and the ``faust -A`` entry point it
once had skipped those checks and answered differently. Without an ``app`` Faust ended
in an AttributeError traceback; with this one, Faust's first call on it (``finalize``,
before anything starts) prints the command to use and exits 2 ("cannot proceed").
"""

import sys
from typing import Final, NoReturn

from ..exceptions import UnusableError

USE_INSTEAD: Final = (
    "recurrence: there is no Faust app to load with 'faust -A'; start a worker with 'recurrence worker' "
    "(options: 'recurrence worker --help')"
)


class NotAFaustApp:
    """Stands where ``faust -A`` looks for an app; any use of it by Faust ends the command with ``USE_INSTEAD``."""

    def finalize(self) -> NoReturn:
        print(USE_INSTEAD, file=sys.stderr)
        raise SystemExit(UnusableError.exit_code)

    def __repr__(self) -> str:
        return "<not a Faust app: use 'recurrence worker'>"


#: What ``faust -A recurrence_ledger.processor.stream.worker.app`` (and the older ``...stream.app``) finds.
NOT_A_FAUST_APP: Final = NotAFaustApp()
