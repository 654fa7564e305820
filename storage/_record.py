"""The record-layout facts storage uses, from `codec.record` (message-format.md §1), plus the
END-OF-FILE blank. Storage never fully decodes a record on the put path: it patches QUEUEOFFSET,
PHYSICALOFFSET and STORETIMESTAMP in place and reads TOTALSIZE/MAGIC."""

from __future__ import annotations

import mmap
import struct

from codec.buffers import BytesLike
from codec.errors import CodecError
from codec.properties import parse_properties
from codec.record import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    POS_QUEUE_OFFSET,
    TOTAL_AND_MAGIC,
    read_properties_bytes,
    read_queue_id,
    read_store_timestamp,
    read_topic,
    store_timestamp_pos,
    verify_record,
)
from codec.record_rewrite import patch_append_fields

__all__ = ["BLANK_MAGIC_CODE", "MAGIC_CODE", "patch_append_fields", "read_properties_bytes", "read_queue_id",
           "read_store_timestamp", "read_topic", "store_timestamp_pos", "parse_properties", "RECORD_MAGICS",
           "BLANK_LEN", "BLANK", "MIN_RECORD", "read_head", "read_queue_offset", "valid_record_size"]

RECORD_MAGICS = frozenset({MAGIC_CODE})
BLANK_LEN = 8  # END_FILE_MIN_BLANK_LENGTH
BLANK = TOTAL_AND_MAGIC  # END-OF-FILE: [int32 remaining][int32 BLANK_MAGIC_CODE]
MIN_RECORD = 91  # IPv4 hosts, empty body/topic/properties

_I64 = struct.Struct(">q")


def read_head(buf: BytesLike | mmap.mmap, pos: int) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) at pos."""
    return TOTAL_AND_MAGIC.unpack_from(buf, pos)


def read_queue_offset(buf: BytesLike | mmap.mmap, pos: int = 0) -> int:
    v: int
    (v,) = _I64.unpack_from(buf, pos + POS_QUEUE_OFFSET)
    return v


def valid_record_size(buf: BytesLike, pos: int, limit: int) -> int | None:
    """Size of the well-formed record (magic, lengths, BODYCRC) at pos; 0 for an END-OF-FILE blank;
    None if neither (torn or garbage)."""
    try:
        return verify_record(buf, pos, limit)
    except (CodecError, struct.error, IndexError):
        return None
