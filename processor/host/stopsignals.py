"""SIGINT/SIGTERM as a request to stop a replay cleanly (the first) or at once (the second)."""

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Final, Self


class StopNow(BaseException):
    """A stop requested while the runner waits for input: nothing is half done there.

    A BaseException, like KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


class Abandon(BaseException):
    """Raised by a second signal wherever the runner is: the batch in progress is dropped."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


class StopSignals:
    """SIGINT/SIGTERM as a request to stop cleanly, for the ``with`` block (main thread only).

    The first signal lets the entry in progress finish and the batch so far
    become durable; while the runner is blocked reading input it ends the read
    at once. A second signal abandons the batch immediately: whatever part of
    it reached the ledger is cut by the next run.
    """

    SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self.waiting: Callable[[], bool] = lambda: False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.received is not None:
            self._restore()  # a third signal gets the default behaviour, wherever it lands
            raise Abandon(number)
        self.received = number  # no logging here: a handler may interrupt a log call in progress
        if self.waiting():
            raise StopNow

    def check(self) -> None:
        """Before blocking on input: a stop already requested ends the run here."""
        if self.received is not None:
            raise StopNow
