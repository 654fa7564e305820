"""A small metrics registry: counters, gauges and fixed-bucket histograms (`codec.histogram.Histogram`).

Hot paths touch only plain attributes (`counter.inc()` is an integer add); rendering to
Prometheus text and to export samples happens off the hot path. Gauges may be backed by a
callback so components expose live state (pending messages, lag) without pushing updates.
`RpcLatency` keeps the request latency histograms (per request code) the Dispatcher's timing hook feeds;
the Prometheus page renders them and the runtime info reads them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar, cast

from codec.histogram import Histogram as Histogram  # the registry's histogram type (prometheus reads it here)

Labels = tuple[tuple[str, str], ...]
SLICE = 500  # samples (or rendered samples) between two yields to the loop in the *_sliced helpers

DEFAULT_LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)


def _labels(labels: dict[str, str] | None) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in (labels or {}).items()))


@dataclass(slots=True)
class Sample:
    name: str
    type: str
    labels: dict[str, str]
    value: float
    buckets: list[tuple[float, int]] | None = None
    sum: float = 0.0
    count: int = 0


class Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


class Gauge:
    __slots__ = ("value", "fn")

    def __init__(self, fn: Callable[[], float] | None = None) -> None:
        self.value = 0.0
        self.fn = fn

    def set(self, v: float) -> None:
        self.value = v

    def get(self) -> float:
        return float(self.fn()) if self.fn is not None else float(self.value)


M = TypeVar("M", "Counter", "Gauge", Histogram)


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[tuple[str, Labels], object] = {}
        self._types: dict[str, str] = {}
        self._help: dict[str, str] = {}
        # (collector, the sample names it makes when declared: see `collect(without=...)`)
        self._collectors: list[tuple[Callable[[], Iterable[Sample]], frozenset[str] | None]] = []

    def _get(self, kind: str, name: str, labels: dict[str, str] | None, factory: Callable[[], M], help: str) -> M:
        """The metric of `name` and `labels`, made by `factory` the first time (one kind per name)."""
        key = (name, _labels(labels))
        m = self._metrics.get(key)
        if m is None:
            m = self._metrics[key] = factory()
            self._types[name] = kind
            if help:
                self._help[name] = help
        return cast(M, m)  # a name is asked for as one kind (what _types records); another kind is a caller bug

    def counter(self, name: str, labels: dict[str, str] | None = None, help: str = "") -> Counter:
        return self._get("counter", name, labels, Counter, help)

    def gauge(self, name: str, labels: dict[str, str] | None = None, help: str = "",
              fn: Callable[[], float] | None = None) -> Gauge:
        g = self._get("gauge", name, labels, lambda: Gauge(fn), help)
        if fn is not None:
            g.fn = fn
        return g

    def histogram(self, name: str, labels: dict[str, str] | None = None, help: str = "",
                  bounds: Iterable[float] = DEFAULT_LATENCY_BUCKETS_MS) -> Histogram:
        return self._get("histogram", name, labels, lambda: Histogram(bounds), help)

    def help_of(self, name: str) -> str:
        return self._help.get(name, "")

    def describe(self, name: str, help: str) -> None:
        """HELP text of a family a collector provides (the registry does not hold its samples)."""
        self._help[name] = help

    def add_collector(self, fn: Callable[[], Iterable[Sample]], provides: frozenset[str] | None = None) -> None:
        """A callback producing samples at collection time (for components that keep their own stats).
        `provides`: the names of every sample it makes, declared when a reader may not want them (a
        `collect(without=...)` leaving all of them out does not run it: the consumer lags walk every
        topic@group)."""
        self._collectors.append((fn, provides))

    def collect(self, without: frozenset[str] = frozenset()) -> Iterator[Sample]:
        """Every sample but those named in `without` (a collector that declared only such names is not run)."""
        for (name, labels), m in list(self._metrics.items()):
            if name in without:
                continue
            lab = dict(labels)
            if isinstance(m, Counter):
                yield Sample(name, "counter", lab, float(m.value))
            elif isinstance(m, Gauge):
                try:
                    yield Sample(name, "gauge", lab, m.get())
                except Exception:  # a broken gauge callback must not break the scrape
                    continue
            elif isinstance(m, Histogram):
                yield Sample(name, "histogram", lab, float(m.count), m.cumulative(), m.sum, m.count)
        for fn, provides in self._collectors:
            if without and provides is not None and provides <= without:
                continue
            try:
                if without:
                    yield from (s for s in fn() if s.name not in without)
                else:
                    yield from fn()
            except Exception:
                continue


async def collect_sliced(registry: Registry, slice_n: int = SLICE) -> list[Sample]:
    """`registry.collect()` as a list, yielding to the event loop every `slice_n` samples (10,000 groups'
    lag samples must not stall the loop; collectors iterate snapshots, so a yield mid-way is safe)."""
    out: list[Sample] = []
    for i, s in enumerate(registry.collect(), 1):
        out.append(s)
        if i % slice_n == 0:
            await asyncio.sleep(0)
    return out


async def render_prometheus_sliced(samples: list[Sample], slice_n: int = SLICE) -> str:
    """`render_prometheus` yielding to the loop every `slice_n` samples (same text)."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    lines: list[str] = []
    done = 0
    for name in sorted(by_name):
        group = by_name[name]
        lines.append(f"# TYPE {name} {group[0].type}")
        for s in group:
            _render_sample(lines, name, s)
            done += 1
            if done % slice_n == 0:
                await asyncio.sleep(0)
    return "\n".join(lines) + "\n"


def _render_sample(lines: list[str], name: str, s: Sample) -> None:
    if s.type == "histogram":
        for bound, acc in s.buckets or []:
            lines.append(f"{name}_bucket{_fmt_labels(s.labels, ('le', _fmt_num(bound)))} {acc}")
        lines.append(f"{name}_sum{_fmt_labels(s.labels)} {_fmt_num(s.sum)}")
        lines.append(f"{name}_count{_fmt_labels(s.labels)} {s.count}")
    else:
        lines.append(f"{name}{_fmt_labels(s.labels)} {_fmt_num(s.value)}")


def _fmt_labels(labels: dict[str, str], extra: tuple[str, str] | None = None) -> str:
    items = list(labels.items()) + ([extra] if extra else [])
    if not items:
        return ""
    esc = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in items)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(items, esc, strict=True)) + "}"


def _fmt_num(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def render_prometheus(samples: Iterable[Sample]) -> str:
    """Prometheus text exposition format 0.0.4."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    lines: list[str] = []
    for name in sorted(by_name):
        group = by_name[name]
        lines.append(f"# TYPE {name} {group[0].type}")
        for s in group:
            _render_sample(lines, name, s)
    return "\n".join(lines) + "\n"


# RPC latency buckets, seconds
RPC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                 10.0, 30.0)


class RpcLatency:
    """Per request code: a seconds histogram (the Dispatcher's timing hook feeds it)."""

    def __init__(self) -> None:
        self.by_code: dict[int, Histogram] = {}

    def observe(self, code: int, seconds: float, n: int = 1) -> None:
        h = self.by_code.get(code)
        if h is None:
            h = self.by_code[code] = Histogram(RPC_BUCKETS_S)
        if n == 1:
            h.observe(seconds)
        else:  # a run of n requests handled in one call: each took the run's time / n
            h.observe_repeated(seconds / n, n)
