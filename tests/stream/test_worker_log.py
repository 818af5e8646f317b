"""The worker's log at --loglevel info holds its own lines; the framework's start-up chatter is kept for debug."""

import logging
import os

import mode.services

from recurrence_ledger.processor.stream.worker import app as worker_app
from recurrence_ledger.processor.stream.worker.frameworklog import FrameworkAtDebug, quiet_framework


def _record(name: str, level: int, pathname: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, pathname, 1, "message", None, None)


def test_the_frameworks_records_below_warning_are_for_debug() -> None:
    keep = FrameworkAtDebug()
    ours = worker_app.__file__
    services = mode.services.__file__
    # Faust's and aiokafka's own loggers, and mode's service lines logged under the worker's module names.
    assert not keep.filter(_record("faust.tables.recovery", logging.INFO, "/anywhere.py"))
    assert not keep.filter(_record("aiokafka.consumer", logging.INFO, "/anywhere.py"))
    assert not keep.filter(_record("recurrence_ledger.processor.stream.worker.workerapp", logging.INFO, services))
    # Warnings and errors always; the worker's own lines always.
    assert keep.filter(_record("faust.app.base", logging.WARNING, services))
    assert keep.filter(_record("aiokafka.consumer", logging.ERROR, "/anywhere.py"))
    assert keep.filter(_record("recurrence.stream", logging.INFO, ours))
    assert all(folder.endswith(os.sep) for folder in keep.folders) and len(keep.folders) >= 3


def test_at_debug_nothing_is_held_back() -> None:
    root = logging.getLogger("recurrence-test-root")
    handler = logging.NullHandler()
    root.addHandler(handler)
    try:
        quiet_framework(root, logging.DEBUG)
        assert handler.filters == []
        quiet_framework(root, logging.INFO)
        assert [type(f) for f in handler.filters] == [FrameworkAtDebug]
    finally:
        root.removeHandler(handler)
