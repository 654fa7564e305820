"""Cancelling a timer (delaymq's answer to a TIMER_DEL_UNIQKEY delete marker): whether a slot holds the
live timer a marker names (`slot_cancel_state`, used by the Enqueuer when it links a marker), and the
put hook's verdict before a marker is stored (`CancelCheck`)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from codec.codes import TIMER_TOPIC
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes
from codec.tags import java_hash
from codec.timer_layout import MAGIC_DELETE, MAGIC_ROLL
from scheduler.store_port import StorePort
from scheduler.timer.config import TimerConfig
from scheduler.timer.state import TimerClocks, TimerFiles

REAL_TOPIC, UNIQ_KEY, TIMER_DEL_UNIQKEY = MessageConst.REAL_TOPIC, MessageConst.UNIQ_KEY, MessageConst.TIMER_DEL_UNIQKEY
CANCEL_CATCH_UP = 4096  # enqueue lag up to which a cancel's check first enqueues what precedes it


class CancelState(enum.Enum):
    LIVE = "LIVE"  # the slot holds the live timer
    ALREADY = "ALREADY_CANCELLED"  # a delete marker for it is linked there already
    NOT_FOUND = "NOT_FOUND"
    DUE = "DUE"  # the slot was read: delivered or being delivered
    UNDECIDED = "UNDECIDED"  # no definite answer now (a roll may bring it back, a long enqueue backlog)


def slot_cancel_state(files: TimerFiles, store: StorePort, slot: int, key: str, topic_hash: int) -> CancelState:
    """Whether slot `slot` holds a live timer `key` (REAL_TOPIC+UNIQ_KEY): LIVE, or ALREADY (a delete
    marker for it is linked there already), or NOT_FOUND. Walks the slot's chain; only records whose
    topic hash matches are read (cancels are rare)."""
    _first, last, _num = files.wheel.get_slot(slot)
    found = False
    for step in files.timerlog.walk_chain(last):
        if step.bad is not None:
            break
        units = step.units
        hit = units[(units["topic_hash"] == topic_hash) & ((units["magic"] & MAGIC_ROLL) == 0)]
        for off, sz, mg in zip(hit["offset"].tolist(), hit["size_py"].tolist(), hit["magic"].tolist(), strict=True):
            rec = store.read_record(off, sz)
            if rec is None:
                continue
            props = parse_properties(read_properties_bytes(rec, 0))
            if mg & MAGIC_DELETE:
                if props.get(TIMER_DEL_UNIQKEY) == key:
                    return CancelState.ALREADY
            elif f"{props.get(REAL_TOPIC)}+{props.get(UNIQ_KEY)}" == key:
                found = True
    return CancelState.LIVE if found else CancelState.NOT_FOUND


class CancelCheck:
    """The put hook's answer to a delete marker, on a running master's wheel. `catch_up` enqueues every
    timer sent before the marker (the Enqueuer's drain)."""

    def __init__(self, store: StorePort, config: TimerConfig, files: TimerFiles, clocks: TimerClocks,
                 roll_window_slots: int, catch_up: Callable[[], None]) -> None:
        self.store = store
        self.config = config
        self.files = files
        self.clocks = clocks
        self.roll_window_slots = roll_window_slots
        self.catch_up = catch_up

    def verdict(self, slot: int, key: str, topic: str) -> tuple[CancelState, str | None]:
        """(state, why a marker would change nothing or None): DUE (the slot was read), ALREADY,
        NOT_FOUND, LIVE or UNDECIDED. Definite answers only: a timer parked for a roll (its deliver time
        was more than the roll window ahead) may still come back to the slot, so "not found" is answered
        only once every roll slot it could be parked in was put; before that (or with a long enqueue
        backlog) the answer is UNDECIDED."""
        prec = self.config.precision_ms
        clocks = self.clocks
        if slot < clocks.read_cursor_ms:
            return CancelState.DUE, (f"timer {key} is due in slot {slot}, already read: delivered or being "
                                     f"delivered; nothing cancelled")
        settled = (self.config.max_delay_sec * 1000 < self.roll_window_slots * prec  # nothing is ever parked
                   or clocks.commit_read_ms > slot - (self.roll_window_slots // 3) * prec)
        mx = self.store.max_offset(TIMER_TOPIC, 0)
        if mx - clocks.queue_offset > CANCEL_CATCH_UP:
            return CancelState.UNDECIDED, None  # a long enqueue backlog: no answer now, the marker is stored
        self.catch_up()  # the timers sent before this marker into the wheel first
        state = slot_cancel_state(self.files, self.store, slot, key, java_hash(topic))
        if state is CancelState.ALREADY:
            return state, f"timer {key} is already cancelled; nothing changed"
        if state is CancelState.NOT_FOUND:
            if not settled:
                return CancelState.UNDECIDED, None
            return state, f"no pending timer {key} in slot {slot} (unknown, or already delivered); nothing cancelled"
        return state, None
