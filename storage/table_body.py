"""Whole-table bodies remembered per data version and built off the event loop when large.

A table keeps one serialised fragment per row (made when the row changes, codec.table_bodies); a body is
the join of a snapshot of those fragments. `CachedBody.get(key, snapshot, build)` returns the body of
data version `key`: the remembered one if the version has not moved, else `build(snapshot())` — on the
loop for small tables, in the default executor for large ones (bytes.join drops the GIL above 1 MiB, so
the loop keeps running while 100,000 topics are joined). Concurrent callers of one version share one
build.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

INLINE_MAX_ROWS = 2000  # below this a build is cheaper than a thread hop (< ~0.3 ms)


class CachedBody:
    __slots__ = ("key", "body", "_building", "builds")

    def __init__(self) -> None:
        self.key: object = None
        self.body: bytes = b""
        self._building: tuple[object, asyncio.Future] | None = None
        self.builds = 0

    def peek(self, key: object) -> bytes | None:
        """The remembered body if it is the body of `key`."""
        return self.body if self.key == key else None

    async def get(self, key: object, rows: int, snapshot: Callable[[], object],
                  build: Callable[[object], bytes]) -> bytes:
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
