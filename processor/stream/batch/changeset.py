"""One journal entry's state changes as ONE changelog record.

Faust's own table writes send one changelog record per key, fire-and-forget.
An entry touches several keys (scope meta, position digest, sources, heads,
groups), and a crash between two of those records would leave a changelog
that restores a half-applied entry: the position marked as applied but a group
counter not, or the reverse. So the stream path writes each entry's whole
change set as a single record: Kafka appends a record atomically, and the
store's ``apply_changelog_batch`` (recovery and standby replicas) expands it
into the individual keys with one RocksDB write batch.

Format (all integers big-endian)::

    b"RCS1" (magic) then per change:
        u32 key length, key bytes, i32 value length (-1 = delete), value bytes

A record without the magic is a plain Faust key/value changelog record and is
applied as such (so the table also reads ordinary Faust changelogs).

**Split change sets.** A batch's change set can outgrow what the broker accepts
in one record (``max.message.bytes``, 1 MiB by default: 1000 entries on one
partition make ~0.5 MB here, more with larger entries). Ending a batch early
would need the staged rows' encoded size while the batch runs (they are
encoded once, at ``prepare``), and would still fail on one entry or one row
that is large by itself; so instead the encoded change set is cut into byte
slices of at most ``max_bytes`` each, written as consecutive records of the
partition::

    b"RCP1" then u32 part index, u32 part count, the slice

``Assembler`` joins them back in offset order and hands out the whole change
set only with its last part; until then nothing of it is applied, and the
offset the local database records stays at the last *whole* change set, so a
restart reads the parts again. Under exactly_once the parts are in one
transaction (a read_committed reader sees all or none). Under at-least-once a
crash can leave the first parts of a batch without the rest; that batch runs
again and writes all its parts anew, and the orphaned parts are dropped when
the next change set starts (``Assembler.orphaned`` counts them).
"""

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from ...core.formats import CHANGESET_FORMAT
from ..settings import CHANGELOG_RECORD_BYTES

#: The digit is the format's version (``formats.CHANGESET_FORMAT``).
MAGIC: Final = b"RCS%d" % CHANGESET_FORMAT
PART_MAGIC: Final = b"RCP%d" % CHANGESET_FORMAT
#: Largest changelog record value by default: ``--changelog-record-bytes``, declared with the settings.
RECORD_BYTES: Final = CHANGELOG_RECORD_BYTES
_KEY_LEN = struct.Struct(">I")
_VALUE_LEN = struct.Struct(">i")
_PART = struct.Struct(">II")
#: What the magics start with; the digit after it is the format.
_FAMILY: Final = frozenset({MAGIC[:3], PART_MAGIC[:3]})
_DELETED: Final = _VALUE_LEN.pack(-1)
#: The smallest ``max_bytes`` that leaves a part room for payload.
MIN_RECORD_BYTES: Final = len(PART_MAGIC) + _PART.size + 1


class ChangeSetError(ValueError):
    """A changelog record starts with the magic but is truncated or malformed."""


def encode(changes: Mapping[bytes, bytes | None]) -> bytes:
    # Runs over every key a batch changed (thousands): the methods are bound once, and one extend per
    # key replaces four appends (0.60 -> 0.40 ms for a change set of 2,300 keys).
    parts = [MAGIC]
    extend, key_length, value_length = parts.extend, _KEY_LEN.pack, _VALUE_LEN.pack
    for key, value in changes.items():
        if value is None:
            extend((key_length(len(key)), key, _DELETED))
        else:
            extend((key_length(len(key)), key, value_length(len(value)), value))
    return b"".join(parts)


def is_changeset(value: bytes | None) -> bool:
    return value is not None and value.startswith(MAGIC)


def refuse_newer(value: bytes | None, partition: int, offset: int) -> None:
    """A change set (or part) of a newer format is refused, never applied as a plain record."""
    if value is None or value[:3] not in _FAMILY or not value[3:4].isdigit():
        return
    found = int(value[3:4])
    if found > CHANGESET_FORMAT:
        raise ChangeSetError(
            f"the changelog record at partition {partition} offset {offset} is a change set of format {found}, "
            f"written by a newer recurrence (this one reads {CHANGESET_FORMAT}): upgrade this worker"
        )


def decode(value: bytes) -> dict[bytes, bytes | None]:
    if not value.startswith(MAGIC):
        raise ChangeSetError("not a change set")
    view = memoryview(value)
    changes: dict[bytes, bytes | None] = {}
    at = len(MAGIC)
    end = len(value)
    try:
        while at < end:
            (key_len,) = _KEY_LEN.unpack_from(view, at)
            at += _KEY_LEN.size
            key = bytes(view[at : at + key_len])
            at += key_len
            (value_len,) = _VALUE_LEN.unpack_from(view, at)
            at += _VALUE_LEN.size
            if value_len < 0:
                changes[key] = None
            else:
                changes[key] = bytes(view[at : at + value_len])
                at += value_len
            if at > end or len(key) != key_len:
                raise ChangeSetError("change set is truncated")
    except struct.error as error:
        raise ChangeSetError(f"change set is truncated: {error}") from None
    return changes


def encode_records(changes: Mapping[bytes, bytes | None], max_bytes: int = RECORD_BYTES) -> list[bytes]:
    """The change set as one record value, or split into parts when it is larger than ``max_bytes``."""
    whole = encode(changes)
    if len(whole) <= max_bytes:
        return [whole]
    if max_bytes < MIN_RECORD_BYTES:
        raise ValueError(f"a changelog record of at most {max_bytes} bytes leaves no room for a part")
    room = max_bytes - len(PART_MAGIC) - _PART.size
    count = -(-len(whole) // room)
    return [PART_MAGIC + _PART.pack(index, count) + whole[index * room : (index + 1) * room] for index in range(count)]


def is_part(value: bytes | None) -> bool:
    return value is not None and value.startswith(PART_MAGIC)


@dataclass
class _Pending:
    first: int  # changelog offset of part 0
    last: int  # offset of the last part taken
    count: int
    pieces: list[bytes] = field(default_factory=list)


class Held(Enum):
    """``Assembler.take``: the record is a part of a change set not complete yet (nothing to apply)."""

    HELD = 0


class Assembler:
    """Joins split change sets back, per changelog partition, from records read in offset order."""

    def __init__(self) -> None:
        self._pending: dict[int, _Pending] = {}
        self.orphaned = 0  # parts dropped: a change set whose remaining parts never came (a crash)

    def forget_through(self, partition: int, offset: int) -> None:
        """The partition's state already holds everything up to ``offset``: a pending start there is stale."""
        pending = self._pending.get(partition)
        if pending is not None and pending.first <= offset:
            del self._pending[partition]

    def take(self, partition: int, offset: int, value: bytes | None) -> bytes | Held | None:
        """The record's value to apply (a whole change set or a plain value), or ``Held.HELD``.

        A record read again (at or below the last part taken) is ``Held.HELD`` as well: it
        is already among the pending parts.
        """
        refuse_newer(value, partition, offset)
        pending = self._pending.get(partition)
        if pending is not None and offset <= pending.last:
            return Held.HELD
        if not is_part(value):
            self._drop(partition)
            return value
        assert value is not None
        index, count = _PART.unpack_from(value, len(PART_MAGIC))
        piece = value[len(PART_MAGIC) + _PART.size :]
        if index == 0:
            self._drop(partition)
            pending = self._pending[partition] = _Pending(offset, offset, count)
        elif pending is None or index != len(pending.pieces) or count != pending.count:
            self._drop(partition)  # a part without its predecessors: the rest of an orphan
            self.orphaned += 1
            return Held.HELD
        pending.pieces.append(piece)
        pending.last = offset
        if len(pending.pieces) < count:
            return Held.HELD
        del self._pending[partition]
        whole = b"".join(pending.pieces)
        if not whole.startswith(MAGIC):
            raise ChangeSetError(f"the {count} parts ending at changelog offset {offset} are not a change set")
        return whole

    def _drop(self, partition: int) -> None:
        pending = self._pending.pop(partition, None)
        if pending is not None:
            self.orphaned += len(pending.pieces)
