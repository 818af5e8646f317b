"""The embedded runner: the engine over a ``.jsonl`` journal, RocksDB state, a ledger file.

This is the product's default mode and the oracle the Kafka path is tested
against. Durability order per batch: ledger lines are written and fsync'ed,
then the state transaction (which records the ledger's new length) commits.
A crash in between leaves ledger lines whose state never committed; the next
run truncates the ledger back to the recorded length and regenerates exactly
those lines, so the ledger never holds a line twice and never loses one.
"""

import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from recurrence.processor.engine import Engine, EngineConfig
from recurrence.processor.exceptions import ConfigMismatchError, StateDirError
from recurrence.processor.journalfile import JournalReader, Progress
from recurrence.processor.state import FORMAT_KEY, STATE_FORMAT, key, row_cache
from recurrence.processor.store.base import StateStore, Transaction
from recurrence.processor.store.rocksdb import RocksStore

log = logging.getLogger("recurrence.embedded")

DEFAULT_BATCH = 1000
_CONFIG_KEY = key("config")


def check_format(store: StateStore) -> None:
    """Refuse a state written in another row layout; stamp a new one."""
    stamped = store.get(FORMAT_KEY)
    if stamped == STATE_FORMAT:
        return
    if stamped is not None or next(store.iterate_prefix(b""), None) is not None:
        raise StateDirError(
            f"the state was written by another version of recurrence (layout {stamped!r}, this one reads "
            f"{STATE_FORMAT!r}); rebuild it: replay the journal into a fresh --state with a fresh --out"
        )
    store.apply({FORMAT_KEY: STATE_FORMAT})


def bind_config(store: StateStore, config: EngineConfig | None) -> EngineConfig:
    """Pin the engine configuration to the state: derived views depend on it."""
    raw = store.get(_CONFIG_KEY)
    stored = EngineConfig(**orjson.loads(raw)) if raw else None
    if config is None:
        return stored or EngineConfig()
    if stored is not None and stored.review_threshold != config.review_threshold:
        raise ConfigMismatchError(
            f"state was built with review_threshold={stored.review_threshold}, "
            f"not {config.review_threshold}; use a fresh --state directory to change it"
        )
    if stored is None:
        store.apply({_CONFIG_KEY: orjson.dumps({"review_threshold": config.review_threshold})})
    return config


@dataclass
class RunSummary:
    entries: int = 0
    blank_lines: int = 0
    records: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    truncated_bytes: int = 0

    def line(self) -> str:
        rate = self.entries / self.seconds if self.seconds > 0 else 0.0
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.records.items())) or "none"
        dead = sum(self.dead_letters.values())
        codes = ", ".join(f"{k}={v}" for k, v in sorted(self.dead_letters.items()))
        return (
            f"recurrence replay: {self.entries} entries in {self.seconds:.2f}s ({rate:,.0f} entries/s); "
            f"records: {kinds}; dead letters: {dead}{f' ({codes})' if codes else ''}"
        )


def _ledger_key(out: Path) -> bytes:
    return key("ledger", str(out.resolve()))


def _recover_ledger(store: StateStore, out: Path) -> int:
    """Cut ledger lines whose state change never committed (they will be regenerated)."""
    raw = store.get(_ledger_key(out))
    if raw is None or not out.exists():
        return 0
    committed = int(orjson.loads(raw))
    size = out.stat().st_size
    if size <= committed:
        return 0
    with out.open("r+b") as handle:
        handle.truncate(committed)
    log.warning("ledger recovery: truncated %d uncommitted bytes from the ledger", size - committed)
    return size - committed


def replay(
    journal: str,
    store: StateStore,
    out: Path,
    config: EngineConfig | None = None,
    batch_size: int = DEFAULT_BATCH,
    progress_stream: IO[str] | None = None,
) -> RunSummary:
    check_format(store)
    config = bind_config(store, config)
    summary = RunSummary(truncated_bytes=_recover_ledger(store, out))
    started = time.monotonic()
    reader = JournalReader(journal)
    progress = Progress(reader.total_bytes, progress_stream)
    cache = row_cache()
    txn = Transaction(store, cache)
    engine = Engine(txn, config)
    pending: list[bytes] = []
    in_batch = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with reader, out.open("ab") as ledger:

            def flush() -> None:
                nonlocal in_batch, txn, engine
                if pending:
                    ledger.write(b"".join(pending))
                    pending.clear()
                ledger.flush()
                os.fsync(ledger.fileno())
                txn.put(_ledger_key(out), orjson.dumps(ledger.tell()))
                txn.commit()
                txn = Transaction(store, cache)
                engine = Engine(txn, config)
                in_batch = 0

            for line_number, entry in reader:
                summary.entries += 1
                for record in engine.process(entry, {"line": line_number}):
                    pending.append(record.line + b"\n")
                    summary.records[record.record] += 1
                    if record.error is not None:
                        summary.dead_letters[record.error] += 1
                        log.debug("dead letter %s at line %d", record.error, line_number)
                in_batch += 1
                if in_batch >= batch_size:
                    flush()
                progress.update(summary.entries, reader.read_bytes)
            flush()
    finally:
        summary.blank_lines = reader.blank_lines
        progress.update(summary.entries, reader.read_bytes, force=True)
        progress.close()
    summary.seconds = time.monotonic() - started
    return summary


def statistics(store: StateStore, scope_id: str | None, top: int | None) -> list[dict[str, Any]]:
    if store.get(FORMAT_KEY) not in (None, STATE_FORMAT):
        raise StateDirError("the state was written by another version of recurrence; rebuild it")
    config = bind_config(store, None)
    engine = Engine(Transaction(store), config)
    return [s.model_dump(mode="json") for s in engine.statistics(scope_id, top)]


def open_state(path: Path, must_exist: bool = False, read_only: bool = False) -> RocksStore:
    if must_exist and not path.is_dir():
        raise StateDirError(f"no state directory at {path}; run 'recurrence replay' first")
    return RocksStore.open(path, read_only=read_only)
