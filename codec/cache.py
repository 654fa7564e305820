"""One bounded memo for the codec's hot paths (and the server's small per-shape caches).

A `BoundedCache` is a dict, so a hit is the plain C `dict.get` with no Python frame on the hot path; a
miss goes through `remember(key, value)`, which counts it and, when the cache is full, starts it over
(a hot set re-fills in one pass; an adversary sending ever-new keys costs one clear per `max_size`
misses, never unbounded memory). `stats()` gives size, misses and resets for metrics; every cache
made here is listed in `CACHES` by name.
"""

from __future__ import annotations

from typing import Generic, TypedDict, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class CacheStats(TypedDict):
    size: int
    misses: int
    resets: int  # times it was full and cleared


class BoundedCache(dict[K, V], Generic[K, V]):
    __slots__ = ("name", "max_size", "misses", "resets")

    def __init__(self, name: str, max_size: int) -> None:
        super().__init__()
        self.name = name
        self.max_size = max_size
        self.misses = 0
        self.resets = 0
        CACHES.append(self)

    def remember(self, key: K, value: V) -> V:
        """Store `value` for `key` after a miss (counted); a full cache starts over first."""
        self.misses += 1
        if len(self) >= self.max_size and key not in self:
            self.clear()
            self.resets += 1
        self[key] = value
        return value

    def stats(self) -> CacheStats:
        return {"size": len(self), "misses": self.misses, "resets": self.resets}


CACHES: list[BoundedCache] = []  # type: ignore[type-arg]
