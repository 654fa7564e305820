"""Consumer offset stores: on the broker (CLUSTERING) or local (BROADCASTING)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import structlog

from . import _wire as w
from .instance import ClientInstance
from .message import MessageQueue

log = structlog.get_logger(__name__)


class OffsetStore:
    """``offset`` is always the next offset to consume; -1 means unknown."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self._dirty: set[MessageQueue] = set()

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        cur = self.table.get(mq, -1)
        if increase_only and offset <= cur:
            return
        self.table[mq] = offset
        self._dirty.add(mq)

    def get(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._dirty.discard(mq)

    async def read(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def persist(self, mqs: Iterable[MessageQueue] | None = None, oneway: bool = True) -> None:
        raise NotImplementedError


class RemoteOffsetStore(OffsetStore):
    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def read(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET; -1 when the broker has none (22 QUERY_NOT_FOUND)."""
        if self.instance.broker_addrs.get(mq.broker_name) is None:
            await self.instance.fetch_route(mq.topic)
        resp = await self.instance.invoke_broker(mq.broker_name, w.request(w.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id, "bname": mq.broker_name}))
        if resp.code == w.QUERY_NOT_FOUND:
            return -1
        w.check(resp, f"query consumer offset {mq.topic}/{mq.queue_id}")
        off = int((resp.ext_fields or {}).get("offset", -1))
        self.table[mq] = off
        return off

    async def persist(self, mqs: Iterable[MessageQueue] | None = None, oneway: bool = True) -> None:
        targets = list(self.table) if mqs is None else [m for m in mqs if m in self.table]
        for mq in targets:
            off = self.table[mq]
            if off < 0:
                continue
            cmd = w.request(w.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id,
                "commitOffset": off, "bname": mq.broker_name})
            try:
                if oneway:
                    await self.instance.oneway_broker(mq.broker_name, cmd)
                else:
                    w.check(await self.instance.invoke_broker(mq.broker_name, cmd), "update consumer offset")
                self._dirty.discard(mq)
            except (TimeoutError, w.MQClientError, OSError) as e:
                log.warning("offset commit failed", topic=mq.topic, queue_id=mq.queue_id, error=str(e))


class LocalOffsetStore(OffsetStore):
    """BROADCASTING offsets: in memory, and in ``<path>`` (JSON, atomic replace) when a path is given."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        super().__init__()
        self.path = Path(path) if path else None
        self._loaded: dict[str, int] = {}
        if self.path and self.path.exists():
            try:
                self._loaded = json.loads(self.path.read_text()).get("offsetTable", {})
            except (OSError, ValueError) as e:
                log.warning("local offsets unreadable, starting fresh", path=str(self.path), error=str(e))

    @staticmethod
    def _key(mq: MessageQueue) -> str:
        return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"

    async def read(self, mq: MessageQueue) -> int:
        if mq in self.table:
            return self.table[mq]
        off = int(self._loaded.get(self._key(mq), -1))
        if off >= 0:
            self.table[mq] = off
        return off

    async def persist(self, mqs: Iterable[MessageQueue] | None = None, oneway: bool = True) -> None:
        if self.path is None or not self._dirty:
            return
        data = dict(self._loaded)
        data.update({self._key(mq): off for mq, off in self.table.items() if off >= 0})
        self._loaded = data
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offsetTable": data}))
        os.replace(tmp, self.path)
        self._dirty.clear()
