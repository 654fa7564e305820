"""The filter bitmap unit: one per ConsumeQueue unit, stored beside the ConsumeQueue when
`enableCalcFilterBitMap=true` (RocketMQ's ConsumeQueueExt bit map, in a fixed-width file of its own here).

A unit is `bits` (a 64-bit bloom filter: the OR of the masks of every SQL92 group whose expression matched the
message when it was dispatched) and `computed_ms` (when: a group's bits are authoritative only for units
computed after its expression was registered). A group's mask is `HASHES` bit positions drawn from a hash of
`group@topic`; a unit without all of them set cannot match that group, so a pull skips it without reading the
CommitLog. A unit never computed reads as zeros (computed_ms 0): exact evaluation decides.

Files: `<store>/filterbitmap/<topic>/<queueId>/<first unit, 20 digits>`, `units_per_file` units each (the broker's
`mappedFileSizeConsumeQueueExt` / UNIT_SIZE, Apache's ConsumeQueueExt file size key), unit n at byte
(n - first) * UNIT_SIZE of the file holding it; a file wholly
below the ConsumeQueue's min offset is deleted with it (retention), and a file's tail past the ConsumeQueue's max
offset or not `written` is cut when the broker starts.
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
FUTURE_SLACK_MS: Final = 86_400_000  # computed_ms may run ahead of the wall clock (strictly increasing ticks)


def file_name(first_unit: int) -> str:
    return f"{first_unit:020d}"


def file_start(unit: int, units_per_file: int) -> int:
    """The first unit of the file holding `unit`."""
    return unit - unit % units_per_file


def written(computed_ms: int, now_ms: int) -> bool:
    """Whether a unit read back is one the dispatcher wrote: never-written units are zeros; a torn or corrupt one
    shows an impossible time (not positive, or a day past the clock)."""
    return 0 < computed_ms <= now_ms + FUTURE_SLACK_MS


def group_mask(group: str, topic: str) -> int:
    """The bloom bits of a (group, topic) filter: HASHES positions in 0..BITS-1 (some may coincide)."""
    digest = hashlib.blake2b(f"{group}@{topic}".encode(), digest_size=HASHES * 2).digest()
    mask = 0
    for i in range(HASHES):
        mask |= 1 << (int.from_bytes(digest[2 * i:2 * i + 2], "big") % BITS)
    return mask
