"""The RocksDB ``StateStore`` (rocksdict): the embedded runner's state, and the Kafka path's partitions.

``RocksStore`` opens a database directory it owns, or wraps a handle someone
else owns (Faust's per-partition databases), so both runners read and scan
RocksDB through the same code.

A storage error is never data: every get and every scan verifies block
checksums, and a scan asks the iterator's ``status()`` when it runs out,
because an iterator that meets a corrupt block simply stops being ``valid()``
(rocksdict's ``items()`` then ends early without a word: half the rows, no
error). Whatever RocksDB reports (a checksum mismatch, a truncated or missing
table file) becomes ``StorageError`` naming the file RocksDB names, with what
to do; the engine lets it stop the run (``core.engine``).
"""

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBRecoveryMode,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from ..exceptions import REBUILD, StateDirError, StorageError

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
    options.set_paranoid_checks(True)  # RocksDB's default, said here: a damaged file fails the open, not a read
    # RocksDB's default (point in time) stops replaying the write-ahead log at the first damaged record and opens
    # with the writes before it, silently. Only a record cut short at the very end (a write a crash interrupted,
    # never acknowledged) is dropped; any other damage fails the open.
    options.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
    options.set_write_buffer_size(_WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(_MAX_WRITE_BUFFERS)
    options.set_target_file_size_base(_TARGET_FILE_BYTES)
    options.set_block_based_table_factory(table)
    return options


#: What to do about a state store that cannot be read back (the embedded runner's; the Kafka worker says its own).
RESTORE_OR_REBUILD: Final = f"restore the whole state folder from one backup, or rebuild it: {REBUILD}"


def verifying_reads() -> ReadOptions:
    """Read options that verify every block's checksum (RocksDB's default, made explicit: reads rely on it)."""
    read = ReadOptions()
    read.set_verify_checksums(True)
    return read


#: The files of a store a reader links into its own folder (``_linked_view``): not the ones RocksDB or rocksdict
#: write while they open a store (the info log, the lock, rocksdict's config).
_WRITTEN_AT_OPEN: Final = re.compile(r"LOG(\.old\.\d+)?|LOCK|rocksdict-config\.json")

Alias = tuple[str, str] | None


def _linked_view(path: Path, into: Path) -> Path:
    """A folder of links to ``path``'s files, for a reader to open instead of ``path``.

    rocksdict writes its ``rocksdict-config.json`` into the folder it opens, and RocksDB may write its info
    log there, even for a read-only open: every ``stats`` rewrote a file of the state, and a state on read-only
    media (a backup mounted read-only, a snapshot) could not be read at all. Opened through the links, RocksDB
    reads the store's own files and whatever it writes lands in ``into``, removed on close.
    """
    view = into / "view"
    view.mkdir()
    try:
        names = os.listdir(path)
    except OSError as error:
        raise StateDirError(f"cannot read state directory {path}: {error.strerror}") from error
    for name in names:
        if not _WRITTEN_AT_OPEN.fullmatch(name):
            os.symlink(path.resolve() / name, view / name)
    return view


def _remove_scratch(scratch: Path) -> None:
    """A reader's own folder, removed: links and RocksDB's files, never the store's (links are removed, not
    followed). ``os.remove`` rather than ``shutil.rmtree``'s ``os.unlink``: the crash kit counts the unlinks of
    state files (tests/embedded/test_migrate_crash.py), and these are none."""
    for folder, folders, files in os.walk(scratch, topdown=False):
        for name in files + [f for f in folders if os.path.islink(os.path.join(folder, f))]:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def storage_error(error: BaseException, where: str, advice: str, alias: Alias = None) -> StorageError:
    """RocksDB's error (it names the damaged file) as one line: what cannot be read, and what to do.
    ``alias``: (linked view, store) -- the file is named where it is, not by the link RocksDB read it through."""
    detail = re.sub(r"\s+", " ", str(error)).strip() or type(error).__name__
    if alias is not None:
        detail = detail.replace(*alias)
    return StorageError(f"{where} cannot be read back ({detail}); {advice}")


def write_batch(changes: Mapping[bytes, bytes | None]) -> WriteBatch:
    """One atomic RocksDB batch for a change set; ``None`` deletes."""
    batch = WriteBatch(raw_mode=True)
    for key, value in changes.items():
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    return batch


def verified_rows(
    source: Any, prefix: bytes, where: str, advice: str, read: ReadOptions | None = None, alias: Alias = None
) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of ``source`` (a database or a snapshot of one) under ``prefix``, in key order, every block
    verified; a block that cannot be read ends the scan with ``StorageError``, never early (module docstring)."""
    try:
        rows = source.iter(read if read is not None else verifying_reads())
        rows.seek(prefix)
        valid, key, value, step = rows.valid, rows.key, rows.value, rows.next
        while valid():
            raw_key = bytes(key())
            if not raw_key.startswith(prefix):
                return
            yield raw_key, bytes(value())
            step()
        # Not valid any more: the end of the rows, or a block it could not read. Only status() tells.
        rows.status()
    except Exception as error:  # rocksdict raises plain Exception
        raise storage_error(error, where, advice, alias) from error


def _open_error(error: BaseException, path: Path, alias: Alias = None) -> StateDirError:
    """A store that does not open: damaged (a corrupt, truncated or missing file) or held (locked) or absent."""
    text = re.sub(r"\s+", " ", str(error)).strip()
    if alias is not None:
        text = text.replace(*alias)
    if "LOCK" in text and ("lock" in text.lower()):
        return StateDirError(
            f"the state store {path} is in use by another recurrence process (a replay or a migrate): wait for it "
            "to end, or stop it"
        )
    if text.startswith(("Corruption", "IO error: No such file")):
        return storage_error(error, f"the state store {path}", RESTORE_OR_REBUILD, alias)
    return StateDirError(f"cannot open state directory {path}: {text}")


#: Links made again when a follower's open meets a file the writer added after the links were made.
_FOLLOW_TRIES: Final = 5


class RocksStore:
    #: Whether this process has opened a database: RocksDB's background threads then exist, and a
    #: forked child must not use RocksDB (``workers`` starts fresh interpreters instead).
    opened_in_process = False

    def __init__(
        self,
        db: Any,
        owned: bool = True,
        durable: bool = False,
        scratch: Path | None = None,
        where: str = "the state store",
        advice: str = RESTORE_OR_REBUILD,
    ) -> None:
        self._db = db
        self._owned = owned
        self._alias: Alias = None  # a reader's linked view: (its folder, the store's)
        # Named in a storage error (the path RocksDB gives names the damaged file itself).
        self.where = where
        self.advice = advice
        self._read = verifying_reads()
        if owned:
            db.set_read_options(self._read)
        # a reader's own folder (the links it opened the store through, what RocksDB writes), removed on close
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
        scratch = Path(tempfile.mkdtemp(prefix="recurrence-read-")) if read_only else None
        opened = path if scratch is None else _linked_view(path, scratch)
        alias: Alias = None if scratch is None else (str(opened), str(path))
        try:
            # The options go in twice on purpose: given only ``options``, rocksdict reopens an existing
            # database with the column family options it reloads from the OPTIONS file, where the
            # table options (bloom filter, block cache) come back as defaults: every get then read a
            # data block, misses included (7 µs instead of under 1 µs at a million entries).
            db = Rdict(str(opened), options=options, column_families={"default": options}, access_type=access)
        except Exception as error:  # rocksdict raises plain Exception subclasses
            if scratch is not None:
                _remove_scratch(scratch)
            raise _open_error(error, path, alias) from error
        store = cls(db, durable=durable, scratch=scratch, where=f"the state store {path}")
        store._alias = alias
        return store

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
        failure: Exception | None = None
        for _ in range(_FOLLOW_TRIES):
            scratch = Path(tempfile.mkdtemp(prefix="recurrence-follow-"))
            own = scratch / "own"
            own.mkdir()
            view = _linked_view(path, scratch)
            alias = (str(view), str(path))
            try:
                db = Rdict(
                    str(view),
                    options=options,
                    column_families={"default": options},
                    access_type=AccessType.secondary(str(own)),
                )
            except Exception as error:  # rocksdict raises plain Exception subclasses
                # The writer may have written a new file after the links were made: link again.
                _remove_scratch(scratch)
                failure = error
                continue
            store = cls(db, scratch=scratch, where=f"the state store {path}")
            store._alias = alias
            return store
        assert failure is not None
        raise _open_error(failure, path, alias) from failure

    def get(self, key: bytes) -> bytes | None:
        try:
            value = self._db.get(key)
        except Exception as error:  # rocksdict raises plain Exception: a corrupt block, an unreadable file
            raise storage_error(error, self.where, self.advice, self._alias) from error
        return None if value is None else bytes(value)

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return verified_rows(self._db, prefix, self.where, self.advice, self._read, self._alias)

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
            _remove_scratch(self._scratch)
