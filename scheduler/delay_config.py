"""DelayConfig: the delay-level service settings (MessageStoreConfig names in comments)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
    def coerce(cls, cfg: DelayConfig, levels_ms: list[int] | None = None) -> DelayConfig:
        """`cfg`, with `levels_ms` as its level table when given. A broker's settings become a DelayConfig
        in the composition root (server.wiring.delay_config), field by field."""
        if levels_ms is None:
            return cfg
        return replace(cfg, levels_ms=list(levels_ms))
