"""The RocksDB ``StateStore`` (rocksdict): the embedded runner's state, and the Kafka path's partitions.

``RocksStore`` opens a database directory it owns, or wraps a handle someone
else owns (Faust's per-partition databases), so both runners read and scan
RocksDB through the same code.
"""

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict, WriteBatch, WriteOptions

from ..exceptions import StateDirError

# RocksDB's resident memory is memtables plus the block cache; both are capped
# so a long replay's footprint stays flat. Index and filter blocks stay out of
# the block cache: with them inside, a large compacted file's index was
# evicted and re-read (and decompressed) on every get past ~150k entries,
# which made each get cost ~240 µs; held by the table readers they cost a few
# MiB per GiB of data. Bloom filters answer the many misses (a new Source,
# revision or group is looked up before it is written) without reading data.
_WRITE_BUFFER_BYTES = 8 * 2**20
_MAX_WRITE_BUFFERS = 2
_BLOCK_CACHE_BYTES = 32 * 2**20
_BLOOM_BITS_PER_KEY = 10
_TARGET_FILE_BYTES = 8 * 2**20


def rocks_options(cache: Cache | None = None) -> Options:
    """Options for a state store; ``cache``: a block cache shared with the process's other stores."""
    table = BlockBasedOptions()
    table.set_bloom_filter(_BLOOM_BITS_PER_KEY, False)
    table.set_block_cache(cache if cache is not None else Cache(_BLOCK_CACHE_BYTES))
    table.set_cache_index_and_filter_blocks(False)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(_WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(_MAX_WRITE_BUFFERS)
    options.set_target_file_size_base(_TARGET_FILE_BYTES)
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
    #: Whether this process has opened a database: RocksDB's background threads then exist, and a
    #: forked child must not use RocksDB (``workers`` starts fresh interpreters instead).
    opened_in_process = False

    def __init__(self, db: Any, owned: bool = True, durable: bool = False, scratch: Path | None = None) -> None:
        self._db = db
        self._owned = owned
        # a follower's own directory (its RocksDB info log), removed on close
        self._scratch = scratch
        # durable: every apply reaches the disk before it returns (the WAL is fsync'ed). The
        # embedded runner needs it (its state is the only record of what the ledger holds);
        # the Kafka path does not (its changelog is the source of truth).
        self._write_options = WriteOptions()
        self._write_options.sync = durable

    @classmethod
    def open(
        cls, path: Path, read_only: bool = False, durable: bool = False, options: Options | None = None
    ) -> "RocksStore":
        if not read_only:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StateDirError(f"cannot create state directory {path}: {error.strerror}") from error
        access = AccessType.read_only() if read_only else AccessType.read_write()
        options = options if options is not None else rocks_options()
        RocksStore.opened_in_process = True
        try:
            # The options go in twice on purpose: given only ``options``, rocksdict reopens an existing
            # database with the column family options it reloads from the OPTIONS file, where the
            # table options (bloom filter, block cache) come back as defaults: every get then read a
            # data block, misses included (7 µs instead of under 1 µs at a million entries).
            db = Rdict(str(path), options=options, column_families={"default": options}, access_type=access)
        except Exception as error:  # rocksdict raises plain Exception subclasses
            raise StateDirError(f"cannot open state directory {path}: {error}") from error
        return cls(db, durable=durable)

    @classmethod
    def open_follower(cls, path: Path) -> "RocksStore":
        """A read view of a database another process may be writing: everything committed when it opens.

        A RocksDB secondary instance: it takes no lock and writes nothing of RocksDB's into ``path`` (its
        info log goes to a scratch directory of its own), so the writer is never blocked. Every table file
        is opened at once (``max_open_files=-1``): files the writer compacts away later stay readable
        through the open handles. The view is never caught up in place (see ``processor/web/follow.py``):
        whoever follows opens a new one.
        """
        options = rocks_options()
        options.create_if_missing(False)
        options.set_max_open_files(-1)
        RocksStore.opened_in_process = True
        scratch = Path(tempfile.mkdtemp(prefix="recurrence-follow-"))
        try:
            db = Rdict(
                str(path),
                options=options,
                column_families={"default": options},
                access_type=AccessType.secondary(str(scratch)),
            )
        except Exception as error:  # rocksdict raises plain Exception subclasses
            shutil.rmtree(scratch, ignore_errors=True)
            raise StateDirError(f"cannot open state directory {path}: {error}") from error
        return cls(db, scratch=scratch)

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self._db.items(from_key=prefix):
            raw_key = bytes(key)
            if not raw_key.startswith(prefix):
                break
            yield raw_key, bytes(value)

    def estimated_rows(self) -> int:
        """RocksDB's estimate of the rows in the store (exact for one that was never overwritten)."""
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        self.write(write_batch(changes))

    def write(self, batch: WriteBatch) -> None:
        try:
            self._db.write(batch, self._write_options)
        except Exception as error:  # a full or failing disk: the batch did not land
            raise StateDirError(f"cannot write the state: {error}") from error

    def sync(self) -> None:
        """Make every write so far durable (the WAL fsync'ed), for a store written without ``durable``."""
        try:
            self._db.flush_wal(True)
        except Exception as error:
            raise StateDirError(f"cannot write the state: {error}") from error

    def close(self) -> None:
        if self._owned:
            self._db.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
