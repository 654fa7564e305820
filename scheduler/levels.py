"""Delay levels (scheduled-messages.md §1.1): `messageDelayLevel` parsing and level/queue mapping.

Tokens are `<number><unit>` separated by spaces; units `s`, `m`, `h`, `d` as in RocketMQ, plus
`ms` (our extension, for tests and fine-grained levels). Level L lives in SCHEDULE_TOPIC_XXXX queue L-1.
"""

from __future__ import annotations

from codec.codes import SCHEDULE_TOPIC  # noqa: F401  (re-exported: scheduler.levels.SCHEDULE_TOPIC)

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _parse_token(tok: str) -> int:
    unit = "ms" if tok.endswith("ms") else tok[-1:]
    factor = _UNITS.get(unit)
    number = tok[: len(tok) - len(unit)]
    if factor is None or not number.isascii() or not number.isdigit():
        raise ValueError(f"bad messageDelayLevel token {tok!r} (want <number><ms|s|m|h|d>)")
    return int(number) * factor


def parse_delay_levels(text: str) -> list[int]:
    """Milliseconds per level (index 0 = level 1). Raises ValueError naming the bad token."""
    tokens = (text or "").split()
    if not tokens:
        raise ValueError(f"messageDelayLevel {text!r} has no levels")
    return [_parse_token(tok) for tok in tokens]


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def compute_deliver_timestamp(levels_ms: list[int], level: int, store_ts: int) -> int:
    """§1.3: store timestamp + the level's delay (1000 ms for a level not in the table)."""
    if 0 < level <= len(levels_ms):
        return store_ts + levels_ms[level - 1]
    return store_ts + 1000


def correct_deliver_timestamp(now: int, deliver_ts: int, delay_ms: int) -> int:
    """§1.4: a deliver timestamp further away than the level's delay (clock jump, corrupt value) is now."""
    return now if deliver_ts > now + delay_ms else deliver_ts
