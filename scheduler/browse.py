"""Browse and cancel what is scheduled: pending delay-level messages and timers, by page.

Reads only what a page needs, through the MessageStore facade and the timer service's wheel and
timerlog: delay levels from each level's delivered offset in SCHEDULE_TOPIC_XXXX (ConsumeQueue units
in order, tagsCode = due time, so `due_before` ends a level's scan), timers slot by slot from the
wheel's read cursor (each slot's timerlog chain, newest first). At most `scan_budget` units are looked
at per call; the returned cursor resumes where the call stopped. Nothing is held between calls.

Cancel by UNIQ_KEY: the scheduled record is found with the key index (SCHEDULE_TOPIC_XXXX and
rmq_sys_wheel_timer records are indexed by their keys under those topics). A delay-level message goes
into the level's cancel table (scheduler.delay_cancel; the delivery pass skips it); a timer gets a
TIMER_DEL_UNIQKEY marker for its slot through `put_marker` (the timer wheel's own cancel).
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codec.codes import SCHEDULE_TOPIC, TIMER_TOPIC
from codec.consume_queue_unit import UNIT, UNIT_SIZE
from codec.msgid import offset_msg_id
from codec.properties import MessageConst
from codec.record import decode_record
from codec.timer_layout import MAGIC_DELETE
from scheduler.due import level_due_ms
from scheduler.timer.cancel import CancelState

if TYPE_CHECKING:
    from codec.record import MessageRecord
    from scheduler.delay_deliver import LevelDeliverer
    from scheduler.delay_service import DelayLevelService
    from scheduler.store_port import StorePort
    from scheduler.timer import TimerMessageStore

Row = dict[str, Any]  # one listed message (JSON object)
PutMarker = Callable[[str, str, int], Awaitable[str | None]]

MAX_LIMIT = 1000
DEFAULT_SCAN_BUDGET = 20000


@dataclass(slots=True)
class Query:
    topic: str | None = None
    level: int | None = None      # only this level
    timers_only: bool = False
    levels_only: bool = False
    due_before: int | None = None  # epoch ms, exclusive
    key: str | None = None         # KEYS entry or UNIQ_KEY
    limit: int = 100
    cursor: str | None = None      # "L<level>:<offset>" or "T<slotMs>:<chainPos>"


@dataclass(slots=True)
class CancelResult:
    status: str   # "cancelled" | "unknown" | "delivered" | "already_cancelled" | "failed"
    kind: str = ""
    level: int = 0
    topic: str = ""
    due_ms: int = 0
    msg_id: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "kind": self.kind, "level": self.level, "topic": self.topic,
                "dueMs": self.due_ms, "msgId": self.msg_id, "detail": self.detail}


def _row(rec: MessageRecord, props: dict[str, str], kind: str, level: int, due_ms: int) -> Row:
    host, port = rec.store_host
    return {"msgId": offset_msg_id(host, port, rec.commitlog_offset), "uniqKey": props.get(MessageConst.UNIQ_KEY) or "",
            "topic": props.get(MessageConst.REAL_TOPIC) or rec.topic, "tags": props.get(MessageConst.TAGS) or "",
            "keys": props.get(MessageConst.KEYS) or "", "kind": kind, "level": level, "dueMs": int(due_ms),
            "storeMs": rec.store_timestamp, "bornMs": rec.born_timestamp}


def _matches(q: Query, props: dict[str, str], due_ms: int) -> bool:
    if q.topic and (props.get(MessageConst.REAL_TOPIC) or "") != q.topic:
        return False
    if q.key and q.key != props.get(MessageConst.UNIQ_KEY) and q.key not in (props.get(MessageConst.KEYS) or "").split():
        return False
    return q.due_before is None or due_ms < q.due_before


class ScheduledBrowser:
    def __init__(self, store: StorePort, delay_service: DelayLevelService | None,
                 timer_service: TimerMessageStore | None, put_marker: PutMarker | None = None) -> None:
        """`await put_marker(topic, uniq_key, deliver_ms)` stores a timer cancel marker (the broker's put
        path) and returns None, or a problem text."""
        self.store = store
        self.delay = delay_service
        self.timer = timer_service
        self.put_marker = put_marker
        self.timer_cancels: dict[str, int] = {}  # uniq key -> due ms, cancels placed since start

    # ---- listing -------------------------------------------------------------------------
    def list(self, q: Query, scan_budget: int = DEFAULT_SCAN_BUDGET) -> tuple[builtins.list[Row], str | None, int]:
        """(rows, next cursor or None when everything was looked at, units scanned)."""
        limit = max(1, min(q.limit, MAX_LIMIT))
        rows: builtins.list[Row] = []
        budget = [scan_budget]
        cur = q.cursor or ""
        if not q.timers_only and self.delay is not None and not cur.startswith("T"):
            start_level, start_off = 1, -1
            if cur.startswith("L"):
                lv, _, off_text = cur[1:].partition(":")
                start_level, start_off = int(lv), int(off_text)
            for d in self.delay.levels:
                if d.level < start_level or (q.level is not None and d.level != q.level):
                    continue
                off = max(d.offset, start_off if d.level == start_level else -1)
                nxt = self._scan_level(d, off, q, rows, limit, budget)
                if nxt is not None:
                    return rows, f"L{d.level}:{nxt}", scan_budget - budget[0]
        if q.levels_only or q.level is not None or self.timer is None:
            return rows, None, scan_budget - budget[0]
        slot, pos = None, None
        if cur.startswith("T"):
            s, _, p = cur[1:].partition(":")
            slot, pos = int(s), int(p)
        cursor = self._scan_timers(slot, pos, q, rows, limit, budget)
        return rows, cursor, scan_budget - budget[0]

    def _scan_level(self, d: LevelDeliverer, off: int, q: Query, rows: builtins.list[Row], limit: int,
                    budget: builtins.list[int]) -> int | None:
        """Rows of one level from `off`; the offset to resume at, or None when the level is done."""
        assert self.delay is not None  # list() scans levels only with a delay service
        store, cancels = self.store, self.delay.cancels
        hi = store.max_offset(SCHEDULE_TOPIC, d.queue_id)
        while off < hi:
            if len(rows) >= limit or budget[0] <= 0:
                return off
            n = min(256, hi - off, budget[0])
            units = store.read_units(SCHEDULE_TOPIC, d.queue_id, off, n)
            if not units:
                return None
            cnt = len(units) // UNIT_SIZE
            for i in range(cnt):
                phys, size, due = UNIT.unpack_from(units, i * UNIT_SIZE)
                budget[0] -= 1
                if q.due_before is not None and level_due_ms(due) >= q.due_before:
                    return None  # due times grow along a level
                if cancels.is_cancelled(d.level, off + i):
                    continue
                raw = store.read_record(phys, size)
                if raw is None:
                    continue
                rec, _ = decode_record(raw)
                if _matches(q, rec.properties, level_due_ms(due)):
                    rows.append(_row(rec, rec.properties, "level", d.level, level_due_ms(due)))
                    if len(rows) >= limit:
                        return off + i + 1 if off + i + 1 < hi else None
            off += cnt
        return None

    def _scan_timers(self, slot: int | None, pos: int | None, q: Query, rows: builtins.list[Row], limit: int,
                     budget: builtins.list[int]) -> str | None:
        t = self.timer
        assert t is not None  # list() scans timers only with a timer service
        wheel, tl, prec = t.wheel, t.timerlog, t.config.precision_ms
        assert wheel is not None and tl is not None  # a timer service is loaded before it is browsed
        start = max(t.read_cursor_ms, t.commit_read_ms)
        end = start + wheel.ring * prec  # one turn of the wheel: later slot times are its first turn again
        s = slot if slot is not None else start
        while True:
            found = wheel.next_nonempty(s)
            if found is None or found >= end or (q.due_before is not None and found >= q.due_before):
                return None
            s = found
            if pos is not None and s != slot:  # the cursor's slot was delivered meanwhile
                pos = None
            if pos is None:
                _first, pos, _num = wheel.get_slot(s)
                if pos < 0:  # a stale mark: the slot holds another time
                    pos = None
                    s += prec
                    continue
            min_pos = tl.min_pos
            while pos is not None and pos >= min_pos and pos >= 0:
                if len(rows) >= limit or budget[0] <= 0:
                    return f"T{s}:{pos}"
                units, nxt, bad = tl.read_chain(pos, min_pos, min(256, budget[0]))
                budget[0] -= max(1, len(units))
                here = pos  # the position of the unit about to be looked at
                for u in units:
                    if len(rows) >= limit:  # the next page starts at this unit
                        return f"T{s}:{here}"
                    here = int(u["prev"])
                    if int(u["magic"]) & MAGIC_DELETE:
                        continue
                    raw = self.store.read_record(int(u["offset"]), int(u["size_py"]))
                    if raw is None:
                        continue
                    rec, _ = decode_record(raw)
                    uniq = rec.properties.get(MessageConst.UNIQ_KEY) or ""
                    if uniq and uniq in self.timer_cancels:
                        continue
                    due = int(u["exact"]) or s
                    if _matches(q, rec.properties, due):
                        rows.append(_row(rec, rec.properties, "timer", 0, due))
                pos = nxt if bad is None else None
            pos = None
            s += prec
        return None

    # ---- cancel --------------------------------------------------------------------------
    def _find(self, topic: str, uniq_key: str) -> MessageRecord | None:
        res = self.store.query_by_key(topic, uniq_key, 8)
        best = None
        for buf in res.buffers:
            rec, _ = decode_record(buf)
            if rec.properties.get(MessageConst.UNIQ_KEY) == uniq_key and (best is None or rec.commitlog_offset >
                                                                best.commitlog_offset):
                best = rec
        return best

    async def cancel(self, uniq_key: str, now_ms: int) -> CancelResult:
        if self.delay is not None:
            rec = self._find(SCHEDULE_TOPIC, uniq_key)
            if rec is not None:
                return self._cancel_level(rec, uniq_key)
        if self.timer is not None:
            rec = self._find(TIMER_TOPIC, uniq_key)
            if rec is not None:
                return await self._cancel_timer(rec, uniq_key, now_ms)
        return CancelResult("unknown", detail=f"no scheduled message with UNIQ_KEY {uniq_key} (never scheduled, "
                                              "or its record left the CommitLog)")

    def _cancel_level(self, rec: MessageRecord, uniq_key: str) -> CancelResult:
        assert self.delay is not None  # cancel() calls it only with a delay service
        level = rec.queue_id + 1
        d = self.delay.levels[rec.queue_id] if rec.queue_id < len(self.delay.levels) else None
        topic = rec.properties.get(MessageConst.REAL_TOPIC) or ""
        host, port = rec.store_host
        res = CancelResult("cancelled", "level", level, topic, rec.store_timestamp + (d.delay_ms if d else 0),
                           offset_msg_id(host, port, rec.commitlog_offset))
        if d is None or rec.queue_offset < max(d.scan_offset, d.claimed_offset):
            res.status, res.detail = "delivered", f"delay level {level} already delivered it"
            return res
        if not self.delay.cancels.add(level, rec.queue_offset, uniq_key):
            res.status, res.detail = "already_cancelled", "cancelled before; it will not be delivered"
            return res
        res.detail = f"delay level {level} will skip it"
        return res

    async def _cancel_timer(self, rec: MessageRecord, uniq_key: str, now_ms: int) -> CancelResult:
        assert self.timer is not None  # cancel() calls it only with a timer service
        p = rec.properties
        topic = p.get(MessageConst.REAL_TOPIC) or ""
        slot = int(p.get(MessageConst.TIMER_OUT_MS) or 0)
        due = int(p.get(MessageConst.TIMER_DELIVER_MS) or 0) or slot + 1
        host, port = rec.store_host
        res = CancelResult("cancelled", "timer", 0, topic, due, offset_msg_id(host, port, rec.commitlog_offset))
        if slot < self.timer.commit_read_ms or slot < self.timer.read_cursor_ms:
            res.status, res.detail = "delivered", "its time slot was already read by the timer wheel"
            return res
        if uniq_key in self.timer_cancels:
            res.status, res.detail = "already_cancelled", "a cancel marker is already in its slot"
            return res
        state, why = self.timer.cancel_verdict(slot, f"{topic}+{uniq_key}", topic)  # the wheel itself (restarts)
        if state is CancelState.ALREADY:
            res.status, res.detail = "already_cancelled", "a cancel marker is already in its slot"
            return res
        if state is CancelState.DUE or state is CancelState.NOT_FOUND:
            res.status, res.detail = "delivered" if state is CancelState.DUE else "unknown", why or ""
            return res
        if self.put_marker is None:
            res.status, res.detail = "unknown", "timer cancel is not available on this broker"
            return res
        problem = await self.put_marker(topic, uniq_key, due)
        if problem:
            res.status, res.detail = "failed", f"the cancel marker was not stored: {problem}"
            return res
        self.timer_cancels[uniq_key] = due
        if len(self.timer_cancels) > 100_000:  # bounded: the oldest answers 'already cancelled' no more
            self.timer_cancels.pop(next(iter(self.timer_cancels)))
        res.detail = "cancel marker placed in its time slot" + (
            "; due within one slot: it may still be delivered" if due - now_ms < self.timer.config.precision_ms
            else "")
        return res
