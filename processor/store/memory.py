"""An in-memory ``StateStore``: tests, one-shot runs (``recurrence tune``) and the Kafka path's broker-less tests."""

import bisect
from collections.abc import Iterator, Mapping


class MemoryStore:
    """A dict, and its keys sorted when a prefix scan needs them.

    Keys added since the last scan wait in an unsorted list and join the sorted
    ones at the next scan (one sort of two runs: linear), so writing a key
    costs O(1) however large the store: a journal's worth of rows (``tune``)
    would be quadratic with a sorted insert per key.
    """

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted at the last scan
        self._added: list[bytes] = []  # new keys since then
        self._deleted = False  # keys were deleted since then (still listed in _keys)

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def _sorted(self) -> list[bytes]:
        if self._deleted:
            self._keys = sorted({*self._keys, *self._added} & self._data.keys())
        elif self._added:
            # A new list, never sorted in place: a scan in progress keeps iterating its own.
            self._keys = sorted(self._keys + self._added)
        self._added, self._deleted = [], False
        return self._keys

    def iterate_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        keys = self._sorted()
        for index in range(bisect.bisect_left(keys, prefix), len(keys)):
            key = keys[index]
            if not key.startswith(prefix):
                break
            value = self._data.get(key)
            if value is not None:  # deleted while this scan ran
                yield key, value

    def apply(self, changes: Mapping[bytes, bytes | None]) -> None:
        data = self._data
        for key, value in changes.items():
            if value is None:
                if data.pop(key, None) is not None:
                    self._deleted = True
            else:
                if key not in data:
                    self._added.append(key)
                data[key] = value

    def close(self) -> None:
        return None
