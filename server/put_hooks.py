"""Put hooks run on every single-message send before encoding (scheduled-messages.md §1.2, §4.2).

Delay level first (`scheduler.delay_levels.transform_delay`: DELAY=L → SCHEDULE_TOPIC_XXXX / L-1,
returns the ConsumeQueue deliver delay), then the timer wheel (`scheduler.timer.transform_timer`).
`apply(record)` returns the deliver delay for the ConsumeQueue tagsCode (-1 for none) or a
`(response_code, remark)` tuple when a hook rejects the message.
"""

from __future__ import annotations

import time

import structlog

from codec.codes import ResponseCode
from codec.properties import MessageConst
from codec.record import MessageRecord
from scheduler.delay_levels import transform_delay
from scheduler.timer import TimerMessageStore, transform_timer
from scheduler.timer.config import TimerConfig
from server.config import BrokerConfig

# property names, bound once for the per-message path (codec.properties.MessageConst)
_TIMER_DELAY_MS = MessageConst.TIMER_DELAY_MS
_TIMER_DELAY_SEC = MessageConst.TIMER_DELAY_SEC
_TIMER_DELIVER_MS = MessageConst.TIMER_DELIVER_MS
_TIMER_OUT_MS = MessageConst.TIMER_OUT_MS

log = structlog.get_logger(__name__)



class PutHooks:
    def __init__(self, config: BrokerConfig, levels: list[int], timer: TimerMessageStore | TimerConfig) -> None:
        """`timer`: the running wheel (its flow control and cancel checks read it), or only its settings
        when no wheel runs."""
        self.config = config
        self.levels = levels
        self.timer_config = timer
        self.transform_timer = transform_timer if config.timer_wheel_enable else None
        self.timer_disabled_check = not config.timer_wheel_enable

    def apply(self, record: MessageRecord) -> int | tuple[int, str]:
        """The deliver delay in ms (-1: none) for the record as rewritten by the hooks, or the
        (response code, remark) refusing it."""
        delay = transform_delay(record, self.levels)
        if delay is not None:
            return int(delay)
        props = record.properties
        if self.timer_disabled_check and _TIMER_OUT_MS not in props and (
                _TIMER_DELIVER_MS in props or _TIMER_DELAY_MS in props or _TIMER_DELAY_SEC in props):
            return (ResponseCode.SYSTEM_ERROR, "accurate timer message is not enabled, timerWheelEnable is false")
        if self.transform_timer is not None:
            decision = self.transform_timer(record, int(time.time() * 1000), self.timer_config)
            if decision.ok:
                return -1
            return (decision.response_code, decision.remark or decision.name)
        return -1
