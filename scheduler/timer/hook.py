"""The timer put hook (scheduled-messages.md §4.2, HookUtils.handleScheduleMessage).

`transform_timer(record, now_ms, timer) -> TimerPutDecision` (timer: the TimerMessageStore or a TimerConfig) runs on every
single-message send after the delay-level hook. It rewrites a timer message into
`rmq_sys_wheel_timer` / queue 0 with TIMER_OUT_MS (the slot), REAL_TOPIC and REAL_QID.

Flow control (§4.8) and cancel checks need the live wheel, so they apply only when the third argument
is the running TimerMessageStore (a `TimerWheel`); given a bare TimerConfig the hook only validates and
rewrites.

Flow control formula (deliberately NOT stock): with num = units already in the slot and C =
timerCongestNumEachSlot, accept when num <= C, reject when num >= 2C, and in between reject with
probability (num - C) / C, which RISES with the load. Stock 5.3.3 rejects when
`nextInt(1000) > 1000 * (num - C) / (C + 0.1)`, i.e. most often just above C (inverted).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

# property names come from codec (MessageConst); re-exported here for the timer's rooms
from codec.codes import TIMER_TOPIC, ResponseCode
from codec.properties import MessageConst as _K  # noqa: E402
from codec.record import MessageRecord
from scheduler.due import absolute_due_ms, relative_due_ms
from scheduler.timer.config import TimerConfig

if TYPE_CHECKING:  # the service imports this module; the hook only reads its wheel
    from scheduler.timer.service import TimerMessageStore

TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS = _K.TIMER_DELIVER_MS, _K.TIMER_DELAY_SEC, _K.TIMER_DELAY_MS
TIMER_OUT_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS = _K.TIMER_OUT_MS, _K.TIMER_ENQUEUE_MS, _K.TIMER_DEQUEUE_MS
TIMER_ROLL_TIMES, TIMER_DEL_UNIQKEY = _K.TIMER_ROLL_TIMES, _K.TIMER_DEL_UNIQKEY
REAL_TOPIC, REAL_QID, DELAY, UNIQ_KEY = _K.REAL_TOPIC, _K.REAL_QID, _K.DELAY, _K.UNIQ_KEY
_TIMER_KEYS = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)  # precedence order



class TimerPutStatus(enum.Enum):
    NOT_TIMER = "NOT_TIMER"
    TRANSFORMED = "TRANSFORMED"
    IMMEDIATE = "IMMEDIATE"
    ILLEGAL = "ILLEGAL"  # WHEEL_TIMER_MSG_ILLEGAL → MESSAGE_ILLEGAL (13)
    FLOW_CONTROL = "FLOW_CONTROL"  # WHEEL_TIMER_FLOW_CONTROL → SYSTEM_ERROR (1)
    NOT_ENABLED = "NOT_ENABLED"  # WHEEL_TIMER_NOT_ENABLE → SYSTEM_ERROR (1)
    CANCEL_REFUSED = "CANCEL_REFUSED"  # delaymq: a cancel that would change nothing → MESSAGE_ILLEGAL (13)
    DISK_FULL = "DISK_FULL"  # the timerlog cannot take it → SERVICE_NOT_AVAILABLE (14), as RocketMQ's full disk


RESPONSE_CODES = {TimerPutStatus.ILLEGAL: ResponseCode.MESSAGE_ILLEGAL, TimerPutStatus.FLOW_CONTROL: ResponseCode.SYSTEM_ERROR,
                  TimerPutStatus.NOT_ENABLED: ResponseCode.SYSTEM_ERROR, TimerPutStatus.CANCEL_REFUSED: ResponseCode.MESSAGE_ILLEGAL,
                  TimerPutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE}


@dataclass(slots=True, frozen=True)
class TimerPutDecision:
    status: TimerPutStatus
    remark: str | None = None
    deliver_ms: int = -1  # exact requested deliver time (TRANSFORMED / IMMEDIATE)
    slot_ms: int = -1  # TIMER_OUT_MS (TRANSFORMED)

    @property
    def name(self) -> str:
        return self.status.name

    @property
    def ok(self) -> bool:
        return self.status not in RESPONSE_CODES

    @property
    def response_code(self) -> int:
        """0 when the send may go on, else the RemotingCommand response code to answer with."""
        return RESPONSE_CODES.get(self.status, 0)


_NOT_TIMER = TimerPutDecision(TimerPutStatus.NOT_TIMER)


def slot_of(deliver_ms: int, precision: int) -> int:
    """§4.2 rounding: the last slot boundary strictly before deliver_ms."""
    if deliver_ms % precision == 0:
        return deliver_ms - precision
    return deliver_ms // precision * precision


def is_reject(num: int, congest: int, rng: random.Random | None = None) -> bool:
    if num <= congest:
        return False
    if num >= 2 * congest:
        return True
    return (rng or random).random() < (num - congest) / congest


def transform_timer(record: MessageRecord, now_ms: int, timer: TimerMessageStore | TimerConfig) -> TimerPutDecision:
    props = record.properties
    sys_flag = record.sys_flag
    if sys_flag & 0xC not in (0, 8):  # only TRANSACTION_NOT / COMMIT
        return _NOT_TIMER
    delay = props.get(DELAY)
    if delay is not None:
        try:
            level = int(delay)
        except ValueError:
            level = 0
        if level > 0:  # a delay level wins; the TIMER_* keys are dropped like stock does
            for k in _TIMER_KEYS:
                props.pop(k, None)
            return _NOT_TIMER
    if record.topic == TIMER_TOPIC or TIMER_OUT_MS in props:
        return _NOT_TIMER
    key = next((k for k in _TIMER_KEYS if k in props), None)
    if key is None:
        return _NOT_TIMER
    cfg, svc = (timer, None) if isinstance(timer, TimerConfig) else (timer.config, timer)
    if not cfg.timer_wheel_enable:
        return TimerPutDecision(TimerPutStatus.NOT_ENABLED,
                                "accurate timer message is not enabled, timerWheelEnable is false")
    raw = props[key]
    try:
        v = int(raw.strip())
    except (ValueError, AttributeError):
        return TimerPutDecision(TimerPutStatus.ILLEGAL, f"timer message property {key}={raw!r} is not a number")
    if key == TIMER_DELIVER_MS:
        asked = deliver = absolute_due_ms(v)
    else:
        asked = now_ms + v * (1000 if key == TIMER_DELAY_SEC else 1)
        deliver = relative_due_ms(now_ms, asked - now_ms)  # never early: strictly after now + delay
    if asked <= now_ms:
        if TIMER_DEL_UNIQKEY in props:
            return TimerPutDecision(TimerPutStatus.ILLEGAL, "timer delete marker with a deliver time in the past")
        return TimerPutDecision(TimerPutStatus.IMMEDIATE, deliver_ms=asked)
    if asked - now_ms > cfg.max_delay_sec * 1000:
        return TimerPutDecision(
            TimerPutStatus.ILLEGAL,
            f"timer message delay {asked - now_ms} ms exceeds timerMaxDelaySec={cfg.max_delay_sec}")
    slot = slot_of(deliver, cfg.precision_ms)
    if svc is not None and TIMER_DEL_UNIQKEY in props:
        refused = svc.check_cancel(slot, props[TIMER_DEL_UNIQKEY], record.topic)
        if refused is not None:  # unknown, already cancelled or already due: nothing is stored
            return TimerPutDecision(TimerPutStatus.CANCEL_REFUSED, refused)
    if svc is not None and cfg.congest_num_each_slot < 2147483647:
        num = svc.files().wheel.get_num(slot)
        if is_reject(num, cfg.congest_num_each_slot, svc.rng):
            svc.metrics.rejected += 1
            return TimerPutDecision(
                TimerPutStatus.FLOW_CONTROL,
                f"timer slot {slot} is congested ({num} messages, timerCongestNumEachSlot="
                f"{cfg.congest_num_each_slot}), try another deliver time")
    if svc is not None:
        full = svc.admit()
        if full is not None:
            return TimerPutDecision(TimerPutStatus.DISK_FULL, full)
    props[TIMER_OUT_MS] = str(slot)
    props[REAL_TOPIC] = record.topic
    props[REAL_QID] = str(record.queue_id)
    record.topic = TIMER_TOPIC
    record.queue_id = 0
    return TimerPutDecision(TimerPutStatus.TRANSFORMED, deliver_ms=deliver, slot_ms=slot)
