"""Opt-in event-loop stall probe (diagnostics only; off unless DELAYMQ_LOOP_LAG_MS is set).

A `loop.call_later` heartbeat every TICK_S records how late each tick ran; a watchdog thread checks
the heartbeat and, when it is older than the threshold, captures the loop thread's Python stack
(`sys._current_frames`). When the loop comes back the stall is logged (`loop.stall`: lag, stack).
Garbage collections longer than the threshold are logged too (`loop.gc_pause`). Nothing runs on the
delivery path; the cost when enabled is one timer callback per TICK_S.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
import traceback

import structlog

log = structlog.get_logger(__name__)

ENV = "DELAYMQ_LOOP_LAG_MS"
TICK_S = 0.005


class LoopLagProbe:
    def __init__(self, threshold_ms: float) -> None:
        self.threshold = threshold_ms / 1000.0
        self.beat = time.monotonic()
        self.stalls = 0
        self.max_lag_ms = 0.0
        self._stack: list[str] | None = None
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._thread_id = 0
        self._gc_t0 = 0.0
        self._cpu = (0.0, 0.0)

    @classmethod
    def from_env(cls) -> LoopLagProbe | None:
        v = os.environ.get(ENV)
        try:
            return cls(float(v)) if v else None
        except ValueError:
            return None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread_id = threading.get_ident()
        self.beat = time.monotonic()
        self._cpu = (time.thread_time(), time.process_time())
        self._handle = self._loop.call_later(TICK_S, self._tick, self.beat + TICK_S)
        threading.Thread(target=self._watch, name="loop-lag-probe", daemon=True).start()
        gc.callbacks.append(self._gc)
        log.warning("loop.probe_started", threshold_ms=self.threshold * 1000)

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        log.warning("loop.probe_stopped", stalls=self.stalls, max_lag_ms=round(self.max_lag_ms, 1))

    def _tick(self, expected: float) -> None:
        now = time.monotonic()
        lag = now - expected
        self.beat = now
        cpu = (time.thread_time(), time.process_time())
        (t0, p0), self._cpu = self._cpu, cpu
        if lag * 1000 > self.max_lag_ms:
            self.max_lag_ms = lag * 1000
        if lag > self.threshold:
            self.stalls += 1
            stack, self._stack = self._stack, None
            # loop_cpu_ms ~ lag: the loop thread was busy; ~0: it was descheduled or waiting (GIL, I/O)
            log.warning("loop.stall", lag_ms=round(lag * 1000, 1), loop_cpu_ms=round((cpu[0] - t0) * 1000, 1),
                        process_cpu_ms=round((cpu[1] - p0) * 1000, 1), stack="".join(stack or ()))
        loop = self._loop
        assert loop is not None  # start() binds it before the first tick
        self._handle = loop.call_later(TICK_S, self._tick, now + TICK_S)

    def _watch(self) -> None:
        seen = 0.0
        while not self._stop.wait(self.threshold / 2):
            beat = self.beat
            if beat != seen and time.monotonic() - beat > self.threshold:
                seen = beat
                frame = sys._current_frames().get(self._thread_id)
                if frame is not None:
                    self._stack = traceback.format_stack(frame)[-12:]

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self._gc_t0:
            ms = (time.perf_counter() - self._gc_t0) * 1000
            if ms > self.threshold * 1000:
                log.warning("loop.gc_pause", ms=round(ms, 1), generation=info.get("generation"),
                            collected=info.get("collected"))
