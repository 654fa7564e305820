"""Durations as RocketMQ writes them (`messageDelayLevel`: `1s 5s 10s 30s 1m ... 2h`) and the default
delay table: the one parser behind broker.conf, the scheduler and the CLI.

A token is `<number><unit>`, units `ms` (ours: tests and fine-grained levels), `s`, `m`, `h`, `d`. The
CLI also takes a fraction (`1.5m`) and a bare number meaning seconds; broker.conf does not.
"""

from __future__ import annotations

import re

# RocketMQ's MessageStoreConfig.messageDelayLevel default: levels 1..18
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TOKEN = re.compile(r"(\d+)(ms|s|m|h|d)")
_LOOSE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")


def parse_duration_ms(text: str, *, bare_unit: str | None = None, fractions: bool = False) -> int:
    """Milliseconds of one duration. Strict by default (`10s`, `1500ms`); `bare_unit` lets a bare number
    mean that unit and `fractions` allows `1.5m` (the CLI's forms). Raises ValueError naming the text."""
    if not fractions and bare_unit is None:
        m = _TOKEN.fullmatch(text)
        if m is None:
            raise ValueError(f"bad duration {text!r} (want <number><ms|s|m|h|d>)")
        return int(m.group(1)) * UNITS_MS[m.group(2)]
    m = _LOOSE.fullmatch(text)
    if m is None or (m.group(2) is None and bare_unit is None) or ("." in m.group(1) and not fractions):
        raise ValueError(f"bad duration {text!r} (use e.g. 30s, 1500ms, 2h)")
    return int(round(float(m.group(1)) * UNITS_MS[m.group(2) or bare_unit or "s"]))


def parse_delay_levels(text: str) -> list[int]:
    """Milliseconds per level (index 0 = level 1) of a `messageDelayLevel` value. Raises ValueError naming
    the bad token, or saying there are no levels."""
    tokens = (text or "").split()
    if not tokens:
        raise ValueError(f"messageDelayLevel {text!r} has no levels")
    try:
        return [parse_duration_ms(tok) for tok in tokens]
    except ValueError as e:
        raise ValueError(f"bad messageDelayLevel token: {e}") from None
