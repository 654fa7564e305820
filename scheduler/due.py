"""Never early: the first wall-clock millisecond at which a scheduled message may be delivered.

The broker's clock readings (STORETIMESTAMP, the put hook's `now`) are `time.time()` truncated to
the millisecond, and the producer's send call started before the broker read its clock, possibly
within that same millisecond. A delay counted from a truncated reading t therefore ends somewhere in
[t + delay, t + delay + 1): the message may be delivered only from the first millisecond strictly
after t + delay, i.e. once `now_ms() >= relative_due_ms(t, delay)` (the instant is then at least one
full millisecond past t + delay, so past the send-call start + delay on any clock that agrees with
the broker's). An absolute deliver time (TIMER_DELIVER_MS) is a wall-clock millisecond: delivery at
or after it is never early.

This module is the one declaration of that rule; every due time the scheduler compares with its
clock is built here:
- delay levels: the ConsumeQueue tagsCode stays RocketMQ's deliverTimestamp = storeTimestamp +
  delay; the level delivers at `level_due_ms(tagsCode)`;
- timers: TIMER_DELAY_SEC / TIMER_DELAY_MS count from the put hook's clock (slot choice) and the
  store timestamp (exact ms), both through `relative_due_ms`; TIMER_DELIVER_MS through
  `absolute_due_ms`.
A due time is compared as `now_ms() >= due` (`is_due`); hot loops inline that comparison.
"""

from __future__ import annotations

AFTER_MS = 1  # a relative delay ends strictly after start + delay: this many ms later at the earliest


def relative_due_ms(start_ms: int, delay_ms: int) -> int:
    """The first ms at which a message delayed by `delay_ms` from the truncated reading `start_ms` may go."""
    return start_ms + delay_ms + AFTER_MS


def level_due_ms(tags_code: int) -> int:
    """The first ms at which a delay-level message with this ConsumeQueue tagsCode (storeTimestamp + delay)
    may go: `relative_due_ms(store_ts, delay)`."""
    return tags_code + AFTER_MS


def absolute_due_ms(deliver_ms: int) -> int:
    """The first ms at which a message asked for at wall-clock ms `deliver_ms` may go: that ms itself."""
    return deliver_ms


def is_due(due_ms: int, now_ms: int) -> bool:
    return now_ms >= due_ms
