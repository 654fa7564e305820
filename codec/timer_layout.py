"""The timer wheel's on-disk layouts, declared once (scheduled-messages.md §4.4; RocketMQ 5's TimerLog,
TimerWheel and TimerCheckpoint): the timerlog unit and its end-of-file blank, the wheel slot and the
timercheck fields. Sans-io: struct formats, sizes, magic bits and the numpy record of a unit.

timerlog unit (52 bytes, big-endian):
  0 size(=52) i32 | 4 prevPos i64 | 12 magic i32 | 16 currWriteTimeMs i64 | 24 delta i32
  | 28 offsetPy i64 | 36 sizePy i32 | 40 REAL_TOPIC hash i32 | 44 reserved i64
delaymq uses the reserved 8 bytes at offset 44 for the message's EXACT deliver time in epoch ms
(stock writes 0). A 16-byte blank `[i32 remaining][i64 0][i32 BLANK_MAGIC_CODE]` ends a file.

wheel slot (32 bytes, big-endian): 0 slotTime/precision i64 | 8 firstPos i64 | 16 lastPos i64
| 24 num i32 | 28 magic i32.

timercheck (int64 big-endian): 0 lastReadTimeMs, 8 lastTimerLogFlushPos, 16 lastTimerQueueOffset,
24 masterTimerQueueOffset, 32 dataVersion.stateVersion, 40 dataVersion.timestamp, 48 dataVersion.counter.
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

# ---- timerlog unit ----------------------------------------------------------------------------
UNIT = struct.Struct(">iqiqiqiiq")
UNIT_SIZE = UNIT.size  # 52
BLANK = struct.Struct(">iqi")
BLANK_SIZE = BLANK.size  # 16
BLANK_MAGIC_CODE = -875286124
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4
# delaymq: a delete marker that cancels nothing where it is linked (no live target in its slot, or a
# roll unit): it does not lower the slot's num, so timerCongestNum / delaymq_timer_pending stay true
MAGIC_UNCOUNTED = 8
# the same 52-byte layout as a numpy record (packed, big-endian), for reading runs of units at once
UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev", ">i8"), ("magic", ">i4"), ("write_ms", ">i8"), ("delta", ">i4"),
                       ("offset", ">i8"), ("size_py", ">i4"), ("topic_hash", ">i4"), ("exact", ">i8")])
# units as numpy records of UNIT_DTYPE (a run read at once, or a slot's chain)
UnitArray = npt.NDArray[np.void]
# one unit as UNIT.unpack_from gives it: (size, prevPos, magic, writeMs, delta, offsetPy, sizePy, topicHash,
# exactMs); read by unpacking into those names
UnitTuple = tuple[int, int, int, int, int, int, int, int, int]


def num_delta(magic: int) -> int:
    """What a unit adds to its slot's num: +1 a message, -1 a delete marker that cancels one, else 0."""
    if magic & MAGIC_DELETE:
        return 0 if magic & MAGIC_UNCOUNTED else -1
    return 1


def is_magic_ok(m: int) -> bool:
    return (m | 0xF) == 0xF


# ---- wheel slot -------------------------------------------------------------------------------
SLOT = struct.Struct(">qqqii")
SLOT_SIZE = SLOT.size  # 32
SLOT_DTYPE = ">i8"  # a slot read as four big-endian int64 (slotTime, firstPos, lastPos, num|magic)

# ---- timercheck -------------------------------------------------------------------------------
CHECK = struct.Struct(">qqqqqqq")
CHECK_FIELD = struct.Struct(">q")  # one field alone
