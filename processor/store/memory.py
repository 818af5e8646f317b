"""An in-memory ``StateStore``: tests, one-shot runs and the Kafka path's broker-less tests."""

import bisect
from collections.abc import Iterator, Mapping


class MemoryStore:
    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted, so a prefix scan is O(log n + k)

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

    def sync(self) -> None:
        """Nothing to make durable (the partitioned runner asks every store)."""

    def close(self) -> None:
        return None
