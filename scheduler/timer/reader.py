"""The SlotReader (scheduled-messages.md §4.5 step 3): due slot → ordered chunks of units.

The reader finds the next non-empty slot (wheel occupancy search), sleeps until its time with
loop.call_at (woken early through the ReaderAlarm when the Enqueuer links an earlier slot), walks the slot's unit chain
(lastPos → prevPos), collects cancel keys from the delete markers, orders the units by their exact
deliver ms (timerlog reserved field) and hands chunks to the Putter (scheduler.timer.dequeue) through
a bounded asyncio.Queue, then the slot's end (the read clock may move there once it is put).
"""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt
import structlog

from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes
from codec.timer_layout import MAGIC_DELETE, MAGIC_ROLL, UNIT_DTYPE, UnitArray
from scheduler.store_port import StorePort
from scheduler.timer.config import TimerConfig
from scheduler.timer.state import NEVER, ReaderAlarm, SlotResume, TimerClocks, TimerFiles, now_ms, sleep_until

log = structlog.get_logger(__name__)

CHUNK = 4096
TIMER_DEL_UNIQKEY = MessageConst.TIMER_DEL_UNIQKEY


I64 = npt.NDArray[np.int64]
# which units of a chunk to keep: a boolean mask, an index array or a slice
Selector = npt.NDArray[np.bool_] | npt.NDArray[np.intp] | slice


def _index_of_uniq(store: StorePort, c: SlotChunk, uniq: str, start: int) -> int:
    """The index (from `start` on, in due order) of the first unit of `c` whose record has UNIQ_KEY
    `uniq`, else -1. Reads the records one by one: only at a promotion."""
    for i in range(start, len(c)):
        rec = store.read_record(int(c.offset[i]), int(c.size[i]))
        if rec is not None and parse_properties(read_properties_bytes(rec, 0)).get(MessageConst.UNIQ_KEY) == uniq:
            return i
    return -1


class SlotChunk:
    """Units of one slot in delivery order (due ms, then timerlog position), as parallel int64 numpy
    arrays (no object per message). `last_pos`: the slot's chain end when it was loaded."""

    __slots__ = ("slot", "due", "exact", "offset", "size", "magic", "write_ms", "cancel", "base", "done", "pos",
                 "last_pos")

    def __init__(self, slot: int, cancel: set[str], due: I64, exact: I64, offset: I64, size: I64, magic: I64,
                 write_ms: I64, base: int = 0, pos: I64 | None = None, last_pos: int = -1) -> None:
        self.slot = slot
        self.base = base  # index of the chunk's first unit in the slot's due order
        self.cancel = cancel
        self.due = due  # the exact deliver ms (a roll unit: its slot)
        self.exact = exact
        self.offset = offset  # the timer record's CommitLog offset and size
        self.size = size
        self.magic = magic
        self.write_ms = write_ms
        self.done = 0  # units already put (a restarted putter goes on from here)
        self.pos: I64 = pos if pos is not None else np.full(len(due), -1, dtype=np.int64)  # timerlog positions
        self.last_pos = last_pos

    def __len__(self) -> int:
        return len(self.due)

    def take(self, keep: Selector, base: int | None = None) -> SlotChunk:
        """The units selected by a boolean or index array, same slot (`base`: the first one's index in
        the slot's due order, default unchanged)."""
        return SlotChunk(self.slot, self.cancel, self.due[keep], self.exact[keep], self.offset[keep], self.size[keep],
                         self.magic[keep], self.write_ms[keep], self.base if base is None else base, self.pos[keep],
                         self.last_pos)


def already_put(c: SlotChunk, done_due: int, done_pos: int, last_pos: int) -> npt.NDArray[np.bool_]:
    """Which units of a reloaded slot scheduleProgress says were put before: units the slot held when
    it was loaded then (timerlog position <= last_pos) ordered at or before (done_due, done_pos)."""
    put: npt.NDArray[np.bool_] = (c.pos <= last_pos) & ((c.due < done_due) | ((c.due == done_due) & (c.pos <= done_pos)))
    return put


# what the Putter takes from the SlotReader: a chunk of a slot's units, or the slot's end (the slot is fully
# queued: the read clock may move there)
PutItem = SlotChunk | int


def walk_slot(files: TimerFiles, s: int) -> tuple[int, list[UnitArray]]:
    """(the slot's chain end, the chain's units) without yielding (recovery)."""
    _first, last, _num = files.wheel.get_slot(s)
    return last, [step.units for step in files.timerlog.walk_chain(last)]


def order_slot(store: StorePort, s: int, last: int, parts: list[UnitArray],
               markers_upto: int | None = None) -> SlotChunk:
    """The walked chain (newest first) of slot s as one SlotChunk: delete markers set aside (their
    keys), units in due order, ties oldest first (lower timerlog position): the walk is reversed
    before the stable sort, as RocketMQ 5's dequeue puts each unit at the front of its
    normal-message list. So the order is by (due, timerlog position)."""
    chain = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, dtype=UNIT_DTYPE)
    # a unit's own position: the chain's start for the first, else the prevPos of the one before it
    where: I64 = np.empty(len(chain), dtype=np.int64)
    if len(chain):
        where[0] = last
        where[1:] = chain["prev"][:-1]
    units, where = chain[::-1], where[::-1]
    magic: I64 = units["magic"].astype(np.int64)
    marker = ((magic & MAGIC_DELETE) != 0) & ((magic & MAGIC_ROLL) == 0)
    cancel: set[str] = set()
    if marker.any():
        seen = marker if markers_upto is None else marker & (where <= markers_upto)
        for off, sz in zip(units["offset"][seen].tolist(), units["size_py"][seen].tolist(), strict=True):
            rec = store.read_record(off, sz)
            if rec is not None:
                key = parse_properties(read_properties_bytes(rec, 0)).get(TIMER_DEL_UNIQKEY)
                if key:
                    cancel.add(key)
        keep = ~marker
        units, magic, where = units[keep], magic[keep], where[keep]
    exact: I64 = units["exact"].astype(np.int64)
    due: I64 = np.where((magic & MAGIC_ROLL) != 0, s, exact)
    order = np.argsort(due, kind="stable")
    return SlotChunk(s, cancel, due[order], exact[order], units["offset"].astype(np.int64)[order],
                     units["size_py"].astype(np.int64)[order], magic[order],
                     units["write_ms"].astype(np.int64)[order], 0, where[order], last)


class SlotReader:
    """Sleeps to the next non-empty slot, walks its chain and hands its units, in due order, to the
    Putter through `put_queue` (`run`: the supervised task). It moves the reader cursor
    (`TimerClocks.move_cursor`); `resume` says what of a slot was already put (after a kill -9 or a
    promotion)."""

    def __init__(self, store: StorePort, config: TimerConfig, files: TimerFiles, clocks: TimerClocks,
                 alarm: ReaderAlarm, put_queue: asyncio.Queue[PutItem], resume: SlotResume) -> None:
        self.store = store
        self.config = config
        self.files = files
        self.clocks = clocks
        self.alarm = alarm
        self.put_queue = put_queue
        self.resume = resume
        self.running = False  # the facade's switch: `run` returns once it is off

    async def run(self) -> None:
        prec = self.config.precision_ms
        wheel = self.files.wheel
        put_queue, clocks, alarm = self.put_queue, self.clocks, self.alarm
        while self.running:
            s = wheel.next_nonempty(clocks.read_cursor_ms)
            now = now_ms()
            if s is None or s > now:
                floor_now = now - now % prec
                target = floor_now if s is None else min(s, floor_now)
                if target > clocks.read_cursor_ms:  # empty slots passed: let the read clock follow time
                    clocks.move_cursor(target)
                    await put_queue.put(target)
                alarm.target = s if s is not None else NEVER
                # idle: wake at least every quarter ring so the cursor never falls a ring behind
                await sleep_until(s if s is not None else now + wheel.ring // 8 * prec, alarm)
                alarm.target = NEVER
                continue
            if wheel.get_slot(s)[1] < 0:  # stale occupancy mark (slot holds another time)
                wheel.release(s)
                continue
            clocks.move_cursor(s + prec)
            try:
                chunks = await self._load_slot(s)
            except Exception:  # nothing of the slot was queued: a restarted reader loads it again
                wheel.reoccupy(s)
                clocks.move_cursor(s)
                raise
            for chunk in chunks:
                await put_queue.put(chunk)
            await put_queue.put(s + prec)

    async def _load_slot(self, s: int) -> list[SlotChunk]:
        """Walk the chain of slot s (yielding to the loop between steps of a long chain), then
        `order_slot`; split into chunks of CHUNK units."""
        wheel, tl = self.files.wheel, self.files.timerlog
        _first, last, _num = wheel.get_slot(s)
        wheel.release(s)
        parts = []
        for step in tl.walk_chain(last):
            parts.append(step.units)
            if step.bad is not None:
                log.error("timer.bad_unit", pos=step.bad, slot=s)
            elif step.more:
                await asyncio.sleep(0)  # yield to the loop between steps of a long chain
        tl.forget_read_pages()
        c = order_slot(self.store, s, last, parts)
        skipped = 0
        after = self.resume.after_promotion
        if after is not None and after.slot_ms == s:
            # a promoted slave: the old master had put this slot's units up to (due, phys)
            self.resume.after_promotion = None
            done = (c.due < after.due_ms) | ((c.due == after.due_ms) & (c.offset <= after.phys))
            if after.last_uniq is not None:  # and, after its record, up to its last delivery replicated
                last = _index_of_uniq(self.store, c, after.last_uniq, int(done.sum()))
                if last >= 0:
                    done[:last + 1] = True
            skipped = int(done.sum())
            c = c.take(~done)
            log.info("timer.resume_slot", slot=s, skipped=skipped, remaining=len(c))
        resume = self.resume.after_kill
        if resume is not None and resume.slot_ms == s:  # the slot a kill interrupted: what was put stays put
            self.resume.after_kill = None
            done = already_put(c, resume.done_due, resume.done_pos, resume.last_pos)
            skipped += int(done.sum())
            c = c.take(~done)
            log.info("timer.slot_resumed", slot=s, done_due=resume.done_due, done_pos=resume.done_pos, left=len(c))
        return [c.take(slice(i, i + CHUNK), skipped + i) for i in range(0, len(c), CHUNK)]
