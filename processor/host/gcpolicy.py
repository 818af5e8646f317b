"""Full garbage collections on the runners' terms: not triggered by heap growth, run between batches.

CPython's cycle collector runs a *full* collection (every tracked object in
every generation) whenever the objects that survived into the oldest
generation since the last one reach a quarter of it. The runners' row caches
and per-scope summaries are exactly such survivors: rows enter and leave by
the thousand each batch, so full collections kept coming however stable the
memory was. Measured on this machine: a worker at half load paused for six
of them in a 30 s window, 83 ms each on average and up to 250 ms
(``recurrence_gc_pause_seconds{generation="2"}``), on the event loop in the
middle of batches; the worker's batch path over 50,000 entries spent 0.6 s
of 14 s in five of them.

Next to nothing the engine builds is part of a reference cycle: rows,
records and keys are freed by reference counting the moment they are
dropped, and the young collections, which keep running as before, still
collect the cycles that die young. So a runner turns off the growth trigger
and runs a full collection itself, between two batches, at most every
``FULL_COLLECTION_SECONDS``: cyclic garbage that reached the oldest
generation waits at most that long, and no batch is paused by one.
"""

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

#: Longest time between two full collections of a runner (seconds).
FULL_COLLECTION_SECONDS: Final = 300.0

# The oldest generation's threshold counts young collections since the last full one; CPython
# stores it in a C int, and this many young collections never happen.
_NEVER: Final = 2**31 - 1


class FullCollections:
    """Runs the full collections a runner deferred: call ``between_batches`` after each batch."""

    def __init__(self, every: float = FULL_COLLECTION_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self._clock = clock
        self._last = clock()
        self.collections = 0

    def between_batches(self) -> bool:
        """A full collection if the last one is ``every`` seconds old; whether one ran."""
        if self._clock() - self._last < self.every:
            return False
        gc.collect()
        self._last = self._clock()
        self.collections += 1
        return True


def defer_full_collections(every: float = FULL_COLLECTION_SECONDS) -> FullCollections:
    """For the rest of the process: no full collection unless ``between_batches`` runs one."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)
    return FullCollections(every)


def freeze_startup_objects(every: float = FULL_COLLECTION_SECONDS) -> FullCollections:
    """The worker's policy once it has started: what exists now is collected once and frozen (never
    scanned again), and full collections are deferred (``defer_full_collections``)."""
    gc.collect()
    gc.freeze()
    return defer_full_collections(every)


@contextmanager
def full_collections_between_batches(every: float = FULL_COLLECTION_SECONDS) -> Iterator[FullCollections]:
    """``defer_full_collections`` for a ``with`` block; the thresholds before it come back after it."""
    before = gc.get_threshold()
    try:
        yield defer_full_collections(every)
    finally:
        gc.set_threshold(*before)
