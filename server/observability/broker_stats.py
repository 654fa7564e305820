"""RocketMQ's BrokerStatsManager numbers, from counters the broker already keeps.

mqadmin and the Dashboard read them: `putTps` / `getTransferedTps` in GET_BROKER_RUNTIME_INFO
("<10 s> <1 min> <10 min>" rates), `msgPutTotalTodayMorning` and friends (the totals at the last UTC
midnight), and VIEW_BROKER_STATS_DATA's per-key minute / hour / day sums (`TOPIC_PUT_NUMS` by topic,
`GROUP_GET_NUMS` by `topic@group`).

Nothing is pushed from the hot paths: `sample(now_ms)` (once a second, from the broker's stats task)
reads the cumulative counters and keeps bounded rings of snapshots: the broker totals every second
for 10 minutes, each key every 10 s for a minute, every 10 min for an hour, every hour for a day.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS = "TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE", "GROUP_GET_NUMS"
DAY_MS = 86_400_000
_WINDOWS = (("minute", 10_000, 7), ("hour", 600_000, 7), ("day", 3_600_000, 25))


class StatsSnapshotJson(TypedDict):
    """RocketMQ's BrokerStatsItem as JSON (one window of VIEW_BROKER_STATS_DATA)."""

    avgpt: float
    sum: int
    tps: float


class BrokerStatsDataJson(TypedDict):
    """VIEW_BROKER_STATS_DATA's body (RocketMQ's BrokerStatsData)."""

    statsDay: StatsSnapshotJson
    statsHour: StatsSnapshotJson
    statsMinute: StatsSnapshotJson


@dataclass(slots=True)
class WindowStats:
    sum: int
    tps: float
    avgpt: float = 0.0

    def to_json(self) -> StatsSnapshotJson:
        return {"avgpt": self.avgpt, "sum": self.sum, "tps": self.tps}


class StatsItem:
    """Snapshots of one cumulative counter: (ts_ms, value) rings per window."""

    __slots__ = ("rings", "due")

    def __init__(self, now_ms: int, value: int) -> None:
        self.rings = {name: deque([(now_ms, value)], maxlen=n) for name, _, n in _WINDOWS}
        self.due = {name: now_ms + step for name, step, _ in _WINDOWS}

    def sample(self, now_ms: int, value: int) -> None:
        for name, step, _ in _WINDOWS:
            if now_ms >= self.due[name]:
                self.rings[name].append((now_ms, value))
                self.due[name] = now_ms + step

    def window(self, name: str, now_ms: int, value: int) -> WindowStats:
        ts0, v0 = self.rings[name][0]
        delta = max(0, value - v0)
        elapsed = max(1, now_ms - ts0)
        return WindowStats(delta, delta * 1000.0 / elapsed)


class BrokerStats:
    def __init__(self, totals: Callable[[], tuple[int, int]],
                 keyed: dict[str, Callable[[], dict[str, int]]], now_ms: int) -> None:
        """`totals() -> (put_total, get_total)`; `keyed[statsName]() -> {statsKey: cumulative}`."""
        self.totals = totals
        self.keyed = keyed
        self.items: dict[str, dict[str, StatsItem]] = {name: {} for name in keyed}
        put, get = totals()
        self.ring: deque[tuple[int, int, int]] = deque([(now_ms, put, get)], maxlen=601)
        self.day = now_ms // DAY_MS
        self.today_morning = (0, 0)      # totals at the last midnight seen (0 before the first one)
        self.yesterday_morning = (0, 0)

    def sample(self, now_ms: int) -> None:
        put, get = self.totals()
        self.ring.append((now_ms, put, get))
        day = now_ms // DAY_MS
        if day != self.day:
            self.day = day
            self.yesterday_morning, self.today_morning = self.today_morning, (put, get)
        for name, fn in self.keyed.items():
            items = self.items[name]
            for key, value in fn().items():
                it = items.get(key)
                if it is None:
                    items[key] = StatsItem(now_ms, 0)
                    it = items[key]
                it.sample(now_ms, value)

    def forget(self, name: str, key_pred: Callable[[str], bool]) -> None:
        items = self.items.get(name, {})
        for k in [k for k in items if key_pred(k)]:
            del items[k]

    def tps(self, now_ms: int) -> tuple[list[float], list[float]]:
        """(put rates, get rates) over the last 10 s, 1 min and 10 min (RocketMQ's putTps triple)."""
        put, get = self.totals()
        puts, gets = [], []
        for span in (10_000, 60_000, 600_000):
            base = self.ring[0]
            for snap in reversed(self.ring):
                if now_ms - snap[0] >= span:
                    base = snap
                    break
            elapsed = max(1, now_ms - base[0]) / 1000.0
            puts.append(max(0, put - base[1]) / elapsed)
            gets.append(max(0, get - base[2]) / elapsed)
        return puts, gets

    def stats_data(self, name: str, key: str, now_ms: int) -> BrokerStatsDataJson | None:
        """BrokerStatsData JSON ({statsMinute, statsHour, statsDay}), None for an unknown item."""
        fn = self.keyed.get(name)
        if fn is None:
            return None
        value = fn().get(key)
        it = self.items[name].get(key)
        if value is None:
            return None
        if it is None:  # counted since the last sample: its window starts now
            it = self.items[name][key] = StatsItem(now_ms, 0)
        return {"statsDay": it.window("day", now_ms, value).to_json(),
                "statsHour": it.window("hour", now_ms, value).to_json(),
                "statsMinute": it.window("minute", now_ms, value).to_json()}

    def minute_tps(self, name: str, key: str, now_ms: int) -> float:
        d = self.stats_data(name, key, now_ms)
        return float(d["statsMinute"]["tps"]) if d else 0.0
