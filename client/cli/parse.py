"""Argument value parsers: durations (30s, 1500ms, 2h) and points in time (epoch ms or ISO 8601)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def duration_ms(text: str) -> int:
    """``30s``, ``1500ms``, ``2h``, ``1.5m``; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (use e.g. 30s, 1500ms, 2h)")
    return int(round(float(m.group(1)) * _UNITS[m.group(2) or "s"]))


def time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (naive times are local time)."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    try:
        return int(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad time {text!r} (use epoch ms or ISO 8601)") from None


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v


def delay_level(text: str) -> int:
    v = positive_int(text)
    if v > 18:  # the broker clamps higher levels; refuse here so the user sees the mistake
        raise argparse.ArgumentTypeError(f"delay level must be 1..18: {text!r}")
    return v
