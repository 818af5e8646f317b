"""recurrence: did what we learned from a failure ever help?

The installed import name of the project. Its parts keep the repository's
top-level folders: ``recurrence.schemas`` (the wire contract: models, RFC
constants, normalization, canonical JSON), ``recurrence.processor`` (the
engine, its state stores and both runners) and ``recurrence.topics`` (the
Kafka topics as code). One distinct name, so an application with its own
``schemas`` or ``topics`` package can install it beside them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("recurrence")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without an install
    __version__ = "0.0.0+unknown"
