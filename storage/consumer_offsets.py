"""ConsumerOffsetTable persisted as `<store>/config/consumerOffset.json`:
`{"offsetTable": {"topic@group": {"0": 5, "1": 7}}, "dataVersion": {...}}` (remoting-protocol.md §8.3).
Offsets are "next offset to consume". Commits mark the table dirty; `persist()` writes it (callers run
it on a timer and at shutdown)."""

from __future__ import annotations

from storage._json_table import JsonTableFile


class ConsumerOffsetTable:
    def __init__(self, store_path: str) -> None:
        self.file = JsonTableFile(store_path, "consumerOffset.json", "offsetTable")
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False

    def load(self) -> None:
        table: dict[str, dict[int, int]] = {}
        for key, queues in self.file.read().items():
            if isinstance(queues, dict):
                table[key] = {int(q): int(o) for q, o in queues.items()}
        self.table = table

    def persist(self) -> None:
        self.file.bump()
        self.file.write({k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(self.table.items())})
        self.dirty = False

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The stored offset, or -1."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def topics_of(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.table if k.split("@", 1)[1] == group)

    def remove_group(self, group: str, topic: str | None = None) -> None:
        for key in [k for k in self.table if k.endswith(f"@{group}") and (topic is None or k == f"{topic}@{group}")]:
            del self.table[key]
            self.dirty = True
