"""A Faust state table's data over each store backend, without a broker: what the table-store tests share."""

from pathlib import Path
from typing import Any

import faust

from recurrence_ledger.processor.stream.worker.tablestore import OFFSET_KEY, StateTable

BACKENDS = ["rocksdb://", "memory://"]


def state_table_data(backend: str, tmp_path: Path, app_prefix: str) -> Any:
    """A fresh two-partition state table's data (the ChangeSet store) on ``backend``."""
    app = faust.App(f"{app_prefix}-{tmp_path.name}", broker="kafka://127.0.0.1:1", store=backend, datadir=str(tmp_path))
    table = StateTable(app, name="state", key_type=bytes, value_type=bytes, partitions=2)
    return table.data


def table_rows(store: Any, partition: int) -> list[tuple[bytes, bytes]]:
    """A partition's rows, without the changelog offset row."""
    return [(k, v) for k, v in store.partition_state(partition).iterate_prefix(b"") if k != OFFSET_KEY]
