"""recurrence-ledger: did what we learned from a failure ever help?

The installed import name of the distribution ``recurrence-ledger``, whose command is
``recurrence`` (the name ``recurrence`` on the package index is an unrelated scheduler;
docs/decisions-operations.md, decision 94). Its parts keep the repository's
top-level folders: ``recurrence_ledger.schemas`` (the wire contract: models, RFC
constants, normalization, canonical JSON), ``recurrence_ledger.processor`` (the
engine, its state stores and both runners) and ``recurrence_ledger.topics`` (the
Kafka topics as code). One distinct name, so an application with its own
``schemas`` or ``topics`` package can install it beside them.
"""


def __getattr__(name: str) -> str:
    # Looked up on first use: importlib.metadata costs every command ~25 ms of start-up.
    if name != "__version__":
        raise AttributeError(f"module 'recurrence_ledger' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("recurrence-ledger")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without an install
        return "0.0.0+unknown"
