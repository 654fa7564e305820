"""The 5.x timer wheel: arbitrary-delay timer messages (scheduled-messages.md §4).

Public API: `TimerMessageStore(store, config)`, `TimerConfig`, and the put hook
`transform_timer(record, now_ms, timer_service_or_config) -> TimerPutDecision`.
"""

from codec.codes import TIMER_TOPIC
from scheduler.timer.config import TimerConfig
from scheduler.timer.hook import TimerPutDecision, TimerPutStatus, transform_timer
from scheduler.timer.service import TimerMessageStore, discard_local_state

__all__ = ["TIMER_TOPIC", "TimerConfig", "TimerMessageStore", "TimerPutDecision", "TimerPutStatus",
           "discard_local_state", "transform_timer"]
