"""One exception root for the processor, and the exit code each kind means.

Every error the product raises on purpose derives from ``RecurrenceError``
and carries the exit code the command line returns for it (docs/usage.md, contract
section 4); ``exit_code`` is the one mapping from whatever stopped a command (or
a ``replay --jobs`` worker process) to its code. Messages are written for the operator:
what went wrong, with which path or broker, and what to do about it; they
never carry Experience or Task Outcome text.
"""

from typing import ClassVar, Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1  # an unexpected internal error (a bug): report it
EXIT_UNUSABLE: Final = 2  # the run cannot proceed: inputs, state, ledger, broker, settings
EXIT_DRIFT: Final = 3  # topics exist but differ from their definitions
EXIT_DIFFERENT: Final = 4  # ``recurrence verify``: the outputs differ from the ledger
EXIT_BATCH_ABORTED: Final = 70  # a worker stopped mid-batch without acknowledging it; restart resumes
EXIT_INTERRUPTED: Final = 130  # SIGINT: stopped cleanly, run again to resume
EXIT_TERMINATED: Final = 143  # SIGTERM: stopped cleanly, run again to resume

#: What a refusal of a damaged or foreign embedded state or ledger offers when nothing can be kept.
REBUILD: Final = "replay the journal into a fresh --state with a fresh --out"


class RecurrenceError(Exception):
    """Root of every error the processor raises on purpose."""

    exit_code: ClassVar[int] = EXIT_FAILED


class UnusableError(RecurrenceError):
    """The run cannot proceed: the operator has to change an input, a path or a setting."""

    exit_code: ClassVar[int] = EXIT_UNUSABLE


class StateDirError(UnusableError):
    """The state directory cannot be used (locked, not a database, unwritable, full)."""


class StorageError(StateDirError):
    """A store could not read back what it holds (a corrupt block, a truncated or missing file): never data."""


class ConfigMismatchError(UnusableError):
    """The state was built with a different engine configuration."""


class LedgerMismatchError(UnusableError):
    """The ledger file is not the one the state recorded (missing, shorter, different, foreign)."""


class JournalError(UnusableError):
    """The journal cannot be read."""


class SettingsError(UnusableError):
    """A setting is invalid."""


class BrokerError(UnusableError):
    """Kafka cannot be reached or refuses the request."""


class TopicDriftError(RecurrenceError):
    """Existing topics differ from their definitions."""

    exit_code: ClassVar[int] = EXIT_DRIFT


class OutputsDifferError(RecurrenceError):
    """``recurrence verify`` compared both sides and found a difference: a result, not a failure to run."""

    exit_code: ClassVar[int] = EXIT_DIFFERENT


class TransactionStateError(RecurrenceError):
    """A transaction was used out of order (a bug, never an input problem)."""


class PositionRegressionError(TransactionStateError):
    """A batch tried to record a tracking position below the one the store holds."""


class Interrupted(RecurrenceError):  # noqa: N818 - a stop, not a failure
    """A signal asked the run to stop; what was durable stays, a rerun resumes."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(f"stopped by signal {signal_number}")
        self.signal_number = signal_number

    @property
    def code(self) -> int:
        return 128 + self.signal_number


def exit_code(error: BaseException) -> int:
    """The exit code for what stopped a command (docs/usage.md, contract section 4)."""
    if isinstance(error, Interrupted):
        return error.code
    if isinstance(error, RecurrenceError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, BrokenPipeError):
        return EXIT_OK  # the reader went away (``| head``): not a failure
    if isinstance(error, OSError):
        return EXIT_UNUSABLE  # an unreadable or unwritable path: the run cannot proceed
    return EXIT_FAILED
