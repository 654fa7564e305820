"""The ConsumeQueue unit (message-format.md §7; RocketMQ's CQ_STORE_UNIT_SIZE): 20 bytes, big-endian,
[int64 CommitLog offset][int32 size][int64 tagsCode]. A schedule queue's tagsCode is the deliver time
(store time + level delay); otherwise the TAGS hash. The one declaration of the layout: storage writes
units, the scheduler, the server's pop/offset/admin paths and bench read them."""

from __future__ import annotations

import struct

UNIT = struct.Struct(">qiq")  # phys offset, size, tagsCode
UNIT_SIZE = UNIT.size  # 20
UNIT_HEAD = struct.Struct(">qi")  # a unit's first 12 bytes: phys offset, size (readers that skip tagsCode)
UNIT_PHYS_SIZE = struct.Struct(">qi8x")  # a whole unit read as (phys offset, size): iter_unpack over many units
BLANK_SIZE = 0x7FFFFFFF  # the size field of a blank unit (a hole left by a repair): not a message
BLANK_UNIT = UNIT.pack(0, BLANK_SIZE, 0)
