"""TimerConfig: the timer wheel's settings (scheduled-messages.md §4.1), and constants of §4.1/§4.4.

`TimerConfig.coerce(obj)` accepts a TimerConfig, a TimerMessageStore, or any config object with the
broker's attribute names (`timer_precision_ms`, `timer_max_delay_sec`, `timer_roll_window_slot`,
`timer_congest_num_each_slot`, `timer_wheel_enable`, `store_path_root_dir`), so the server can pass its
BrokerConfig unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from codec.codes import TIMER_TOPIC  # noqa: F401  (re-exported for the timer package)

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

    @classmethod
    def coerce(cls, obj) -> TimerConfig:
        if isinstance(obj, TimerConfig):
            return obj
        inner = getattr(obj, "timer_config", None)
        if isinstance(inner, TimerConfig):
            return inner
        cfg = cls()
        mapping = {
            "timer_wheel_enable": ("timer_wheel_enable",),
            "precision_ms": ("precision_ms", "timer_precision_ms"),
            "max_delay_sec": ("max_delay_sec", "timer_max_delay_sec"),
            "roll_window_slots": ("roll_window_slots", "timer_roll_window_slot", "timer_roll_window_slots"),
            "congest_num_each_slot": ("congest_num_each_slot", "timer_congest_num_each_slot"),
            "flush_interval_ms": ("flush_interval_ms", "timer_flush_interval_ms"),
            "store_root": ("store_root", "store_path_root_dir"),
            "timerlog_file_size": ("timerlog_file_size", "mapped_file_size_timer_log"),
            "timerlog_clean_interval_ms": ("timerlog_clean_interval_ms", "timer_log_clean_interval_ms"),
        }
        for name, sources in mapping.items():
            for src in sources:
                v = getattr(obj, src, None)
                if v is not None:
                    setattr(cfg, name, v)
                    break
        cfg.precision_ms = snap_precision(cfg.precision_ms)
        return cfg
