"""The filter bitmap unit: one per ConsumeQueue unit, stored beside the ConsumeQueue when
`enableCalcFilterBitMap=true` (RocketMQ's ConsumeQueueExt bit map, in a fixed-width file of its own here).

A unit is `bits` (a 64-bit bloom filter: the OR of the masks of every SQL92 group whose expression matched the
message when it was dispatched) and `computed_ms` (when: a group's bits are authoritative only for units
computed after its expression was registered). A group's mask is `HASHES` bit positions drawn from a hash of
`group@topic`; a unit without all of them set cannot match that group, so a pull skips it without reading the
CommitLog. A unit never computed reads as zeros (computed_ms 0): exact evaluation decides.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Final

UNIT: Final = struct.Struct(">Qq")  # bits, computed_ms
UNIT_SIZE: Final = UNIT.size  # 16
BITS: Final = 64
HASHES: Final = 3
# Apache's own layout, for reading its files back (bench/sql92_filter.py): a ConsumeQueueExt CqExtUnit is this head
# (size, tagsCode, msgStoreTime, bitMapSize) then bitMapSize bytes of bloom bits; a size of -1 pads a file's end
APACHE_CQ_EXT_UNIT_HEAD: Final = struct.Struct(">hqqh")


def group_mask(group: str, topic: str) -> int:
    """The bloom bits of a (group, topic) filter: HASHES positions in 0..BITS-1 (some may coincide)."""
    digest = hashlib.blake2b(f"{group}@{topic}".encode(), digest_size=HASHES * 2).digest()
    mask = 0
    for i in range(HASHES):
        mask |= 1 << (int.from_bytes(digest[2 * i:2 * i + 2], "big") % BITS)
    return mask
