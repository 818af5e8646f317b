"""Which partition a journal entry belongs to: its ``scope_id`` through Kafka's default partitioner.

A scope is the unit of ordering and of state (scopes never share a row), so
both runners split work by scope: the Kafka journal topic is keyed by
``scope_id`` and partitioned by the producer's default partitioner
(murmur2 of the key's bytes, made positive, modulo the partition count), and
the embedded runner's state holds a fixed number of partitions assigned the
same way, so ``replay --jobs N`` can give each process a disjoint set of them.

``Router.partition`` reads the scope from a raw line without decoding it when
the line is plain (``scope_id`` its first key and the only ``"scope_id"`` in
it, no ``\\u00`` escape anywhere, the value without a backslash); anything else is decoded with orjson (same
last-key-wins rule as the validating parser), and a line orjson refuses but
the validating parser might accept (big integers, say) is validated. A line
with no readable scope changes no state whatever partition runs it (it is a
dead letter), and goes to ``UNKEYED_PARTITION``.
"""

import re
from typing import Any, Final

import orjson
from pydantic import ValidationError

from ...schemas.journal import JOURNAL_ENTRY

#: Where an entry without a readable scope goes (the producer sends it unkeyed to this partition).
UNKEYED_PARTITION: Final = 0
_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF
_FIELD: Final = b'"scope_id"'
_FIRST_FIELD: Final = b'{"scope_id":"'
#: Any key that decodes to "scope_id" without being spelled so escapes one of its (ASCII) letters:
#: ``\u00XX``. Searched for by a compiled pattern: journal lines hold many backslashes (escaped quotes
#: of nested JSON), which slow ``bytes.__contains__`` down to twice the pattern's time.
_ASCII_ESCAPE: Final = re.compile(rb"\\u00").search


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (what the Java and aiokafka default partitioners hash keys with)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    base = length - tail
    if tail >= 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(scope_id: str, partitions: int) -> int:
    """The Java/aiokafka default partitioner: the partition of a scope among ``partitions``."""
    return (murmur2(scope_id.encode()) & 0x7FFFFFFF) % partitions


def scope_key(line: bytes) -> bytes | None:
    """The scope of a journal line as the key a producer sends it with (None: no readable scope)."""
    try:
        value: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _validated_scope(line)
    if isinstance(value, dict):
        scope = value.get("scope_id")
        if isinstance(scope, str) and scope:
            return scope.encode()
    return None


def _validated_scope(line: bytes) -> bytes | None:
    try:
        return JOURNAL_ENTRY.validate_json(line).scope_id.encode()
    except (ValidationError, UnicodeEncodeError):
        return None


class Router:
    """The partition of raw journal lines, with each scope's partition computed once."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._known: dict[bytes, int] = {}

    def partition(self, line: bytes) -> int:
        scope = None
        # The top-level object's first key, plain: the scope unless another top-level key decodes to
        # "scope_id" too (the last one wins), which takes a second plain occurrence or a \u escape.
        if line.startswith(_FIRST_FIELD):
            end = line.find(b'"', len(_FIRST_FIELD))
            if end > len(_FIRST_FIELD):
                token = line[len(_FIRST_FIELD) : end]
                if b"\\" not in token and line.find(_FIELD, end) == -1 and _ASCII_ESCAPE(line) is None:
                    scope = token
        if scope is None:
            scope = scope_key(line)
            if scope is None:
                return UNKEYED_PARTITION
        known = self._known.get(scope)
        if known is None:
            known = self._known[scope] = (murmur2(scope) & 0x7FFFFFFF) % self.partitions
        return known


#: Placements the exact search may try before it settles for the best found so far (a few dozen suffice
#: for the default 8 partitions; the bound keeps a state created with many partitions cheap to start).
ASSIGN_SEARCH_LIMIT: Final = 100_000


def assign(weights: dict[int, int], partitions: int, shards: int) -> list[list[int]]:
    """Partitions to shards, the busiest shard as light as can be found.

    Longest-processing-time first (heaviest onto the lightest) is the start; a bounded branch-and-bound
    search over the placements then looks for a lighter busiest shard. Greedy alone can be far off with
    few partitions: the 40-scope bench journal's 8 partitions gave one of two processes 52.4% of the
    lines, where 50.1% was possible, and the run waits for its busiest process.
    """
    weight = [weights.get(p, 0) for p in range(partitions)]
    order = sorted(range(partitions), key=lambda p: (-weight[p], p))
    loads = [0] * shards
    owned: list[list[int]] = [[] for _ in range(shards)]
    for partition in order:
        target = min(range(shards), key=lambda s: (loads[s], len(owned[s]), s))
        owned[target].append(partition)
        loads[target] += weight[partition]
    best = _Best(max(loads), owned)
    if shards > 1 and best.load > 0:
        _improve(order, weight, [0] * shards, [[] for _ in range(shards)], 0, best)
    return [sorted(parts) for parts in best.owned]


class _Best:
    def __init__(self, load: int, owned: list[list[int]]) -> None:
        self.load, self.owned, self.tries = load, [list(parts) for parts in owned], 0


def _improve(
    order: list[int], weight: list[int], loads: list[int], owned: list[list[int]], index: int, best: _Best
) -> None:
    """Place ``order[index:]`` (heaviest first) so that no shard reaches ``best.load``; keep any better."""
    best.tries += 1
    if best.tries > ASSIGN_SEARCH_LIMIT:
        return
    if index == len(order):
        best.load, best.owned = max(loads), [list(parts) for parts in owned]
        return
    partition = order[index]
    placed_on_empty = False
    for shard in sorted(range(len(loads)), key=lambda s: (loads[s], s)):
        if loads[shard] + weight[partition] >= best.load:
            break  # this placement cannot beat the best found, nor can any on a heavier shard
        if not owned[shard]:
            if placed_on_empty:
                continue  # empty shards are interchangeable: trying one is trying them all
            placed_on_empty = True
        loads[shard] += weight[partition]
        owned[shard].append(partition)
        _improve(order, weight, loads, owned, index + 1, best)
        owned[shard].pop()
        loads[shard] -= weight[partition]
