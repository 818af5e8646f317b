"""State stores behind one small interface (get / put / delete / iterate-by-prefix).

The engine never sees a backend: it reads and writes through a ``Transaction``
that buffers changes, so a whole journal entry (or a batch of them) becomes
visible atomically with ``commit`` — after the caller has made the outputs
durable. Backends: ``MemoryStore`` for tests and one-shot runs, ``RocksStore``
(rocksdict) for everything that must survive a restart, and the Faust table
adapter in ``processor.stream``.
"""

import bisect
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict, WriteBatch


class StateStore(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Yield (key, value) for keys starting with ``prefix``, in byte order."""
        ...

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        """Write all changes atomically; ``None`` deletes."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        start = bisect.bisect_left(self._keys, prefix)
        for key in self._keys[start:]:
            if not key.startswith(prefix):
                break
            yield key, self._data[key]

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                if self._data.pop(key, None) is not None:
                    del self._keys[bisect.bisect_left(self._keys, key)]
            else:
                if key not in self._data:
                    bisect.insort(self._keys, key)
                self._data[key] = value

    def close(self) -> None:
        return None


class StateDirError(RuntimeError):
    """The --state directory cannot be used (locked by another process, not a DB, ...)."""


# RocksDB's resident memory is memtables plus the block cache; both are capped
# so a long replay's footprint stays flat. Index and filter blocks live in that
# cache too instead of growing with the number of SST files. Most engine reads
# are misses (a new Source, revision or group is looked up before it is
# written), which bloom filters answer without touching the SST levels.
_WRITE_BUFFER_BYTES = 8 * 2**20
_MAX_WRITE_BUFFERS = 2
_BLOCK_CACHE_BYTES = 32 * 2**20
_BLOOM_BITS_PER_KEY = 10


def _rocks_options() -> Options:
    table = BlockBasedOptions()
    table.set_bloom_filter(_BLOOM_BITS_PER_KEY, False)
    table.set_block_cache(Cache(_BLOCK_CACHE_BYTES))
    table.set_cache_index_and_filter_blocks(True)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(_WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(_MAX_WRITE_BUFFERS)
    options.set_block_based_table_factory(table)
    return options


def write_batch(changes: Mapping[bytes, bytes | None]) -> WriteBatch:
    """One atomic RocksDB batch for a change set; ``None`` deletes."""
    batch = WriteBatch(raw_mode=True)
    for key, value in changes.items():
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    return batch


class RocksStore:
    def __init__(self, path: Path, read_only: bool = False) -> None:
        if not read_only:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StateDirError(f"cannot create state directory {path}: {error.strerror}") from error
        access = AccessType.read_only() if read_only else AccessType.read_write()
        try:
            self._db = Rdict(str(path), options=_rocks_options(), access_type=access)
        except Exception as error:  # rocksdict raises plain Exception subclasses
            raise StateDirError(f"cannot open state directory {path}: {error}") from error

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self._db.items(from_key=prefix):
            raw_key = bytes(key)  # type: ignore[arg-type]  # raw mode: keys and values are bytes
            if not raw_key.startswith(prefix):
                break
            yield raw_key, bytes(value)

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        self._db.write(write_batch(changes))

    def close(self) -> None:
        self._db.close()


class Transaction:
    """Read-your-writes overlay over a store; nothing reaches the store before ``commit``."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.pending: dict[bytes, bytes | None] = {}
        # Sorted pending keys, so a prefix read costs O(log n + k), not O(pending).
        self._pending_keys: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        if key in self.pending:
            return self.pending[key]
        return self.store.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._stage(key, value)

    def delete(self, key: bytes) -> None:
        self._stage(key, None)

    def _stage(self, key: bytes, value: bytes | None) -> None:
        if key not in self.pending:
            bisect.insort(self._pending_keys, key)
        self.pending[key] = value

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        start = bisect.bisect_left(self._pending_keys, prefix)
        overlay: dict[bytes, bytes | None] = {}
        for key in self._pending_keys[start:]:
            if not key.startswith(prefix):
                break
            overlay[key] = self.pending[key]
        if not overlay:
            yield from self.store.iterate_prefix(prefix)
            return
        merged: dict[bytes, bytes | None] = dict(self.store.iterate_prefix(prefix))
        merged.update(overlay)
        for key in sorted(merged):
            value = merged[key]
            if value is not None:
                yield key, value

    def commit(self) -> None:
        if self.pending:
            self.store.apply(self.pending)
        self.rollback()

    def rollback(self) -> None:
        self.pending = {}
        self._pending_keys = []
