"""What RocksDB wrote about a database's options: the tests that check a store's settings read it."""

from pathlib import Path


def latest_options(path: Path) -> str:
    """The newest ``OPTIONS-<n>`` file of the database at ``path`` (RocksDB writes one per open for writing)."""
    latest = max(path.glob("OPTIONS-*"), key=lambda f: int(f.name.split("-")[1]))
    return latest.read_text()
