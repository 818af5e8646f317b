"""The worker's log at its default level says what the worker does, not how Faust starts.

At ``--loglevel info`` Faust, mode and aiokafka log about 90 lines before the
worker is ready: every service's "Starting...", the recovery's highwater
tables, each partition opened. They are the framework's, and they go to the
log only at ``--loglevel debug``: a filter on the root logger's handlers drops
their records below WARNING. A record is the framework's when its logger is
one of theirs, or when it was logged from their code (mode logs every
service's start and stop, the worker's own services included, through the
service's logger, named after the worker's module). Warnings and errors are
never dropped.
"""

import logging
import os
import sys
import threading
from typing import Any, Final

import faust

#: Packages whose records below WARNING are kept for debug.
FRAMEWORK: Final = ("faust", "mode", "aiokafka", "kafka", "aiohttp", "venusian", "yarl")


def _folders() -> tuple[str, ...]:
    """Where the framework's code is: a record logged from there is the framework's."""
    import aiohttp  # noqa: PLC0415
    import aiokafka  # noqa: PLC0415
    import mode  # noqa: PLC0415

    return tuple(os.path.dirname(module.__file__ or "") + os.sep for module in (faust, mode, aiokafka, aiohttp))


class FrameworkAtDebug(logging.Filter):
    """Drops the framework's records below WARNING (see the module docstring)."""

    def __init__(self, folders: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self.folders = _folders() if folders is None else folders

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.name.split(".", 1)[0] in FRAMEWORK:
            return False
        return not record.pathname.startswith(self.folders)


def quiet_framework(root: logging.Logger, level: int) -> None:
    """Below debug, the framework's chatter leaves the root logger's handlers (at debug, everything shows)."""
    if level <= logging.DEBUG:
        return
    keep = FrameworkAtDebug()
    for handler in root.handlers:
        handler.addFilter(keep)


#: Exit code of a worker that did not stop cleanly within ``--stop-timeout`` of the signal.
EXIT_STOP_TIMEOUT: Final = 1


class Worker(faust.Worker):
    """``faust.Worker`` whose log keeps the framework's start-up lines for ``--loglevel debug``, and whose
    stop on SIGTERM or SIGINT is bounded: with the broker gone, Faust's stop waits on requests nobody
    answers (a worker was still running 7 s after SIGTERM and needed SIGKILL). A timer started by the
    first signal ends the process ``stop_timeout`` seconds later if the clean stop has not."""

    def __init__(self, *args: Any, stop_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop_timeout = stop_timeout
        self._deadline: threading.Timer | None = None

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        quiet_framework(logger, level)

    def _on_sigterm(self) -> None:
        self._bound_stop("SIGTERM")
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._bound_stop("SIGINT")
        super()._on_sigint()

    def _bound_stop(self, signal_name: str) -> None:
        if self._deadline is not None:
            return
        self._deadline = threading.Timer(self._stop_timeout, _stop_now, (signal_name, self._stop_timeout))
        self._deadline.daemon = True
        self._deadline.start()


def _stop_now(signal_name: str, seconds: float) -> None:
    logging.getLogger(__name__).critical(
        "not stopped %gs after %s (is the broker gone?); exiting without a clean stop (--stop-timeout); "
        "a restart resumes from the last durable batch",
        seconds,
        signal_name,
    )
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_STOP_TIMEOUT)
