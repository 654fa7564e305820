"""A small hand-written progress bar with a live rate, drawn on stderr (no extra dependency)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int | None, enabled: bool, stream: TextIO | None = None,
                 min_interval: float = 0.2) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.count = 0
        self.failed = 0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._min_interval = min_interval

    def advance(self, n: int = 1, failed: int = 0) -> None:
        self.count += n
        self.failed += failed
        if self.enabled:
            now = time.monotonic()
            if now - self._last_draw >= self._min_interval:
                self._last_draw = now
                self._draw(now)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def rate(self) -> float:
        e = self.elapsed
        return self.count / e if e > 0 else 0.0

    def _draw(self, now: float) -> None:
        e = now - self.start
        rate = self.count / e if e > 0 else 0.0
        if self.total:
            frac = min(self.count / self.total, 1.0)
            bar = "#" * int(frac * 30)
            head = f"{self.label} [{bar:<30}] {self.count}/{self.total} {frac * 100:5.1f}%"
        else:
            head = f"{self.label} {self.count}"
        fail = f" failed {self.failed}" if self.failed else ""
        self.stream.write(f"\r{head} {rate:,.1f} msg/s {e:6.1f}s{fail}\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
