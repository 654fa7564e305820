"""DelayConfig: the delay-level service settings (MessageStoreConfig names in comments)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from scheduler.levels import DEFAULT_DELAY_LEVELS, parse_delay_levels


@dataclass(slots=True)
class DelayConfig:
    levels_ms: list[int] = field(default_factory=lambda: parse_delay_levels(DEFAULT_DELAY_LEVELS))
    async_deliver: bool = False          # enableScheduleAsyncDeliver
    max_pending: int = 2000              # scheduleAsyncDeliverMaxPendingLimit
    max_resend_blocked: int = 3          # scheduleAsyncDeliverMaxResendNum2Blocked
    flush_offset_interval_ms: int = 10_000  # flushDelayOffsetInterval
    config_dir: str | None = None        # <storePathRootDir>/config; None: offsets are not persisted
    batch_size: int = 512                # ConsumeQueue units read (and records put) per pass
    resend_backoff_cap_ms: int = 60_000  # doResend sleep cap
    broker_addr: str = "127.0.0.1:10911"  # store host of offset msgIds in events
    coalesce_ms: int = 5                 # scheduleDeliverCoalesceMs (ours): a busy level wakes at most this often
    coalesce_min_batch: int = 4          # ... "busy": the last pass delivered at least this many

    @classmethod
    def coerce(cls, cfg, levels_ms: list[int] | None = None) -> DelayConfig:
        """A DelayConfig as is, or one built from a broker config's RocketMQ-named attributes."""
        if isinstance(cfg, cls):
            return cfg
        if levels_ms is None:
            levels_ms = parse_delay_levels(getattr(cfg, "message_delay_level", DEFAULT_DELAY_LEVELS))
        root = getattr(cfg, "store_path_root_dir", None)
        return cls(
            levels_ms=list(levels_ms),
            async_deliver=bool(getattr(cfg, "enable_schedule_async_deliver", False)),
            max_pending=int(getattr(cfg, "schedule_async_deliver_max_pending_limit", 2000)),
            max_resend_blocked=int(getattr(cfg, "schedule_async_deliver_max_resend_num2_blocked", 3)),
            flush_offset_interval_ms=int(getattr(cfg, "flush_delay_offset_interval", 10_000)),
            config_dir=os.path.join(root, "config") if root else None,
            broker_addr=str(getattr(cfg, "broker_addr", None) or "127.0.0.1:10911"),
            coalesce_ms=int(getattr(cfg, "schedule_deliver_coalesce_ms", 5)),
        )
