"""Whole-table bodies remembered per data version and built off the event loop when large.

A table keeps one serialised fragment per row (made when the row changes, codec.table_bodies); a body is
the join of a snapshot of those fragments. `CachedBody.get(key, snapshot, build)` returns the body of
data version `key`: the remembered one if the version has not moved, else `build(snapshot())` — on the
loop for small tables, in the default executor for large ones (bytes.join drops the GIL above 1 MiB, so
the loop keeps running while 100,000 topics are joined). Concurrent callers of one version share one
build. Callers holding `Fragments` take the snapshot first with `Fragments.snapshot()` (a few shards per
loop turn) and only when `peek` has no body for the version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import chain
from typing import TypeVar

_Snap = TypeVar("_Snap")

INLINE_MAX_ROWS = 2000  # below this a build is cheaper than a thread hop (< ~0.3 ms)
FRAGMENT_SHARDS = 64
SNAPSHOT_SHARDS_PER_TURN = 8  # 100,000 rows: ~12,500 fragments copied per loop turn


class Fragments:
    """Row name -> serialised fragment, held in FRAGMENT_SHARDS dicts chosen by the name's hash.

    A dict grows by rebuilding itself on the insert that fills it, on the loop: one dict of 87,381 topic
    names rebuilds in ~4 ms, and a table's fragment dicts grow in the same insert as the table itself (the
    create phase's largest loop stalls, 11-15 ms, were three such rebuilds at once). In shards each rebuild
    is 1/64 of that. A body's snapshot (`values()`) is still C-level copies; its order is shard order (the
    bodies are JSON objects and sets: their readers do not depend on order)."""

    __slots__ = ("_shards",)

    def __init__(self) -> None:
        self._shards: list[dict[str, bytes]] = [{} for _ in range(FRAGMENT_SHARDS)]

    def __setitem__(self, name: str, fragment: bytes) -> None:
        self._shards[hash(name) % FRAGMENT_SHARDS][name] = fragment

    def pop(self, name: str) -> bytes | None:
        return self._shards[hash(name) % FRAGMENT_SHARDS].pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._shards[hash(name) % FRAGMENT_SHARDS]

    def __len__(self) -> int:
        return sum(map(len, self._shards))

    def clear(self) -> None:
        for shard in self._shards:
            shard.clear()

    def values(self) -> list[bytes]:
        """Every fragment (a snapshot: a list)."""
        return list(chain.from_iterable([s.values() for s in self._shards]))

    async def snapshot(self) -> list[bytes]:
        """`values()` for a body build, copied SNAPSHOT_SHARDS_PER_TURN shards per loop turn when the
        table is large: one copy of 100,000 fragments touches 100,000 cold objects (their reference
        counts), ~2 ms on a quiet host and up to ~10 ms of loop CPU on a busy one. A row changed between
        two turns may appear in its new form (the body is then fresher than its data version)."""
        if len(self) < INLINE_MAX_ROWS:
            return self.values()
        out: list[bytes] = []
        for i, shard in enumerate(self._shards):
            if i and i % SNAPSHOT_SHARDS_PER_TURN == 0:
                await asyncio.sleep(0)
            out.extend(shard.values())
        return out


class CachedBody:
    __slots__ = ("key", "body", "_building", "builds")

    def __init__(self) -> None:
        self.key: object = None
        self.body: bytes = b""
        self._building: tuple[object, asyncio.Future[bytes]] | None = None
        self.builds = 0

    def peek(self, key: object) -> bytes | None:
        """The remembered body if it is the body of `key`."""
        return self.body if self.key == key else None

    async def get(self, key: object, rows: int, snapshot: Callable[[], _Snap],
                  build: Callable[[_Snap], bytes]) -> bytes:
        if self.key == key:
            return self.body
        building = self._building
        if building is not None and building[0] == key:
            return await asyncio.shield(building[1])
        snap = snapshot()  # on the loop: a consistent copy of the fragments (a list copy)
        loop = asyncio.get_running_loop()
        if rows < INLINE_MAX_ROWS:
            body = build(snap)
        else:
            fut = loop.run_in_executor(None, build, snap)
            self._building = (key, fut)
            try:
                body = await asyncio.shield(fut)
            finally:
                if self._building is not None and self._building[1] is fut:
                    self._building = None
        self.builds += 1
        self.key, self.body = key, body
        return body
