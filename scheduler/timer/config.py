"""TimerConfig: the timer wheel's settings (scheduled-messages.md §4.1), and constants of §4.1/§4.4.

The server builds it from its broker.conf keys field by field (server.wiring.timer_config).
"""

from __future__ import annotations

from dataclasses import dataclass

SLOTS_TOTAL = 7 * 86400  # TIMER_WHEEL_TTL_DAY * DAY_SECS = 604800
TIMER_BLANK_SLOTS = 60
PRECISIONS = (100, 200, 500, 1000)
INT_MAX = 2147483647


def snap_precision(ms: int) -> int:
    """RocketMQ's setter snaps the precision down to one of {100, 200, 500, 1000}."""
    ms = int(ms)
    best = PRECISIONS[0]
    for p in PRECISIONS:
        if p <= ms:
            best = p
    return best


@dataclass(slots=True)
class TimerConfig:
    timer_wheel_enable: bool = True
    precision_ms: int = 1000
    max_delay_sec: int = 259200
    roll_window_slots: int = 172800
    congest_num_each_slot: int = INT_MAX
    flush_interval_ms: int = 1000
    store_root: str = ""
    timerlog_file_size: int = 104857600  # mappedFileSizeTimerLog; tests use small files
    slots_total: int = SLOTS_TOTAL  # fixed by RocketMQ; the wheel file is 2 * slots_total * 32 bytes
    put_batch: int = 512  # messages per MessageStore.put call on the dequeue side
    timerlog_clean_interval_ms: int = 30000  # RocketMQ cleans the timerlog every 30 s

    def __post_init__(self) -> None:
        self.precision_ms = snap_precision(self.precision_ms)

    @property
    def effective_roll_window_slots(self) -> int:
        """timerRollWindowSlot is used only inside [2, slotsTotal - 60]; otherwise slotsTotal - 60."""
        w = int(self.roll_window_slots)
        hi = self.slots_total - TIMER_BLANK_SLOTS
        return w if 2 <= w <= hi else hi
