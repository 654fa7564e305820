"""ConsumerOffsetTable: "topic@group" -> {queueId: next offset to consume}, in memory and in the
MetaStore (`<store>/config/meta.db`, one row per topic@group holding all its queues). A commit stages
the key (O(1)); the MetaStore's writer thread writes the key's row from the live table with whatever
else is staged (commits of one key coalesce); `consumerOffset.json` (`{"offsetTable": {"topic@group": {"0": 5}}, "dataVersion": {...}}`,
remoting-protocol.md §8.3) is exported on demand and migrated from at the first start.

`groups_of(topic)` / `topics_of(group)` read two indexes kept beside the table (no walk of it).
`wrapper_body()` (GET_ALL_CONSUMER_OFFSET) walks the table in slices of `BODY_SLICE` keys, yielding to the
loop between slices (offsets move every second: there is nothing to remember between calls)."""

from __future__ import annotations

import asyncio
import os

from codec import table_bodies as TB
from storage.meta_store import DataVersion, MetaStore

BODY_SLICE = 1000


class ConsumerOffsetTable:
    def __init__(self, store_path: str, meta: MetaStore | None = None) -> None:
        self.meta = meta or MetaStore(os.path.join(store_path, "config"))
        self.table: dict[str, dict[int, int]] = {}
        self._groups_of: dict[str, set[str]] = {}  # topic -> groups
        self._topics_of: dict[str, set[str]] = {}  # group -> topics
        self.meta.offset_source = self._live  # the writer thread reads a key's queues when it writes its row

    def _live(self, key: str) -> dict[int, int] | None:
        return self.table.get(key)

    @property
    def data_version(self) -> DataVersion:
        return self.meta.versions["consumer_offset"]

    def load(self) -> None:
        self.meta.open()
        table: dict[str, dict[int, int]] = {}
        for key, queues in self.meta.load_offsets():
            table[key] = queues
        self.table = table
        self._groups_of, self._topics_of = {}, {}
        for key in table:
            self._index(key)

    def _index(self, key: str) -> None:
        topic, _, group = key.partition("@")
        self._groups_of.setdefault(topic, set()).add(group)
        self._topics_of.setdefault(group, set()).add(topic)

    def _unindex(self, key: str) -> None:
        topic, _, group = key.partition("@")
        for idx, a, b in ((self._groups_of, topic, group), (self._topics_of, group, topic)):
            s = idx.get(a)
            if s is not None:
                s.discard(b)
                if not s:
                    del idx[a]

    def persist(self) -> None:
        self.meta.flush()

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}@{group}"
        queues = self.table.get(key)
        if queues is None:
            queues = self.table[key] = {}
            self._index(key)
        queues[queue_id] = offset
        self.meta.stage_offset_key(key)

    def commit_many(self, rows: list[tuple[str, str, int, int]]) -> None:
        """`commit` for a run of (group, topic, queue_id, offset): one staging call for all of them."""
        table = self.table
        staged = set()
        for group, topic, queue_id, offset in rows:
            key = f"{topic}@{group}"
            queues = table.get(key)
            if queues is None:
                queues = table[key] = {}
                self._index(key)
            queues[queue_id] = offset
            staged.add(key)
        self.meta.stage_offset_keys(staged)

    def merge(self, offsets: dict[str, dict[int, int]]) -> int:
        """Take `{"topic@group": {queue: offset}}` over the stored ones (a slave adopting its master's
        offsets: the master wins per queue); only changed queues are staged. Returns how many changed."""
        rows = []
        for key, queues in offsets.items():
            topic, sep, group = key.partition("@")
            if not sep:
                continue
            mine = self.table.get(key, {})
            rows.extend((group, topic, q, o) for q, o in queues.items() if mine.get(q) != o)
        if rows:
            self.commit_many(rows)
        return len(rows)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The stored offset, or -1."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(self._groups_of.get(topic, ()))

    def topics_of(self, group: str) -> list[str]:
        return sorted(self._topics_of.get(group, ()))

    def remove_group(self, group: str, topic: str | None = None) -> None:
        topics = [topic] if topic is not None else list(self._topics_of.get(group, ()))
        for t in topics:
            key = f"{t}@{group}"
            if self.table.pop(key, None) is None:
                continue
            self._unindex(key)
            self.meta.stage_offset_key(key)

    async def wrapper_body(self) -> bytes:
        """ConsumerOffsetSerializeWrapper JSON of the whole table; each key's queues as they were when its
        slice was read (like RocketMQ's unlocked walk of its concurrent map)."""
        version = TB.version_json(*self.data_version.as_tuple())
        keys = list(self.table)
        parts: list[str] = []
        table = self.table
        for i in range(0, len(keys), BODY_SLICE):
            if i:
                await asyncio.sleep(0)
            for key in keys[i:i + BODY_SLICE]:
                queues = table.get(key)
                if queues:
                    parts.append(TB.offset_member(key, queues))
        return TB.offset_wrapper(version, parts)
