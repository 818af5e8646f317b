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
"""

import struct
from collections.abc import Mapping
from typing import Final

MAGIC: Final = b"RCS1"
_KEY_LEN = struct.Struct(">I")
_VALUE_LEN = struct.Struct(">i")


class ChangeSetError(ValueError):
    """A changelog record starts with the magic but is truncated or malformed."""


def encode(changes: Mapping[bytes, bytes | None]) -> bytes:
    parts = [MAGIC]
    for key, value in changes.items():
        parts.append(_KEY_LEN.pack(len(key)))
        parts.append(key)
        if value is None:
            parts.append(_VALUE_LEN.pack(-1))
        else:
            parts.append(_VALUE_LEN.pack(len(value)))
            parts.append(value)
    return b"".join(parts)


def is_changeset(value: bytes | None) -> bool:
    return value is not None and value.startswith(MAGIC)


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
