"""Argument value parsers: durations (30s, 1500ms, 2h) and points in time (epoch ms or ISO 8601)."""

from __future__ import annotations

import argparse
from datetime import datetime

from codec.durations import parse_duration_ms


def duration_ms(text: str) -> int:
    """``30s``, ``1500ms``, ``2h``, ``1.5m``; a bare number is seconds (codec.durations, the CLI's forms)."""
    try:
        return parse_duration_ms(text, bare_unit="s", fractions=True)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (a count where 0 means none)."""
    if text.strip() == "0":
        return 0
    return positive_int(text)


def delay_level(text: str) -> int:
    v = positive_int(text)
    if v > 18:  # the broker clamps higher levels; refuse here so the user sees the mistake
        raise argparse.ArgumentTypeError(f"delay level must be 1..18: {text!r}")
    return v


def non_negative_float(text: str) -> float:
    """A number >= 0 (a rate, an idle timeout: 0 means none)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v >= 0 or v == float("inf"):  # NaN and infinity too
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return v


def positive_float(text: str) -> float:
    """A number > 0 (a timeout in seconds)."""
    v = non_negative_float(text)
    if v == 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v
