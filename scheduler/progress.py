"""SchedulerProgress: how far this node's scheduled-message delivery has got, as one named,
serialisable record (the state a master hands its slaves at least every 50 ms, seed 003).

- `delay_offsets`: per delay level, the next SCHEDULE_TOPIC_XXXX ConsumeQueue offset whose delivery
  is not confirmed (everything below was put into its real topic).
- `timer`: the time wheel's progress: `read_ms` (every slot below it fully put), `queue_offset` (timer
  topic ConsumeQueue units enqueued into the wheel), `cursor_ms` (the slot the reader loaded last), and
  for the slot in progress (`slot_ms` = read_ms) `put_in_slot` (seed 003's localIndex: how many of its
  units, in due order, were put) and the due order key of the last one put (`last_due_ms`,
  `last_phys`), which a new master uses to skip exactly those units.
- `commitlog_offset`: the master's CommitLog end when the record was taken; every delivery the record
  claims is below it, so a slave applies a record only once its replica reached that offset.

`to_bytes` / `from_bytes` (msgpack, versioned) are the only encoding; the transport treats it as opaque.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from codec.buffers import BytesLike

VERSION = 1


@dataclass(slots=True)
class TimerProgress:
    read_ms: int = 0
    queue_offset: int = 0
    cursor_ms: int = 0
    slot_ms: int = 0
    put_in_slot: int = 0
    last_due_ms: int = -1
    last_phys: int = -1
    # (enqueued timer-queue offset, reader cursor) each time the master's reader cursor moved: a unit at
    # timer-queue offset x was linked no earlier than the cursor of the last entry with offset <= x,
    # so a slave links every unit into exactly the master's slot
    cursor_history: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class SchedulerProgress:
    taken_ms: int = 0
    commitlog_offset: int = 0
    delay_offsets: dict[int, int] = field(default_factory=dict)
    timer: TimerProgress | None = None

    def to_bytes(self) -> bytes:
        t = self.timer
        data: bytes = msgpack.packb([
            VERSION, self.taken_ms, self.commitlog_offset, sorted(self.delay_offsets.items()),
            None if t is None else [t.read_ms, t.queue_offset, t.cursor_ms, t.slot_ms, t.put_in_slot,
                                    t.last_due_ms, t.last_phys, [list(h) for h in t.cursor_history]]])
        return data

    @classmethod
    def from_bytes(cls, data: BytesLike) -> SchedulerProgress:
        try:
            v = msgpack.unpackb(bytes(data), strict_map_key=False)
            if not isinstance(v, list) or not v or v[0] != VERSION:
                raise ValueError(f"unknown scheduler progress record {v[:1] if isinstance(v, list) else v!r}")
            _ver, taken, cl_off, delay, timer = v[:5]
            tp = None
            if timer is not None:
                read_ms, queue_offset, cursor_ms, slot_ms, put_in_slot, last_due_ms, last_phys = map(int, timer[:7])
                tp = TimerProgress(read_ms, queue_offset, cursor_ms, slot_ms, put_in_slot, last_due_ms, last_phys)
                if len(timer) > 7:
                    tp.cursor_history = [(int(q), int(c)) for q, c in timer[7]]
            return cls(int(taken), int(cl_off), {int(lv): int(off) for lv, off in delay}, tp)
        except (msgpack.UnpackException, TypeError, ValueError) as e:
            raise ValueError(f"bad scheduler progress record: {e}") from None
