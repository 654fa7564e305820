"""RocketMQ 5's topic attributes (`message.type` = NORMAL / FIFO / DELAY / TRANSACTION), kept beside the topic
table in <store>/config/topicAttributes.json ({topic: {key: value}}; written tmp + fsync + rename before the
request that changed it is answered).

Set by UPDATE_AND_CREATE_TOPIC's `attributes` header as mqadmin 5.x sends it (`updateTopic -a
+message.type=DELAY`): comma-separated `+key=value` (add or change) and `-key` (remove), Apache's
AttributeParser format. Read back in GET_TOPIC_CONFIG's TopicConfig (Apache's 5.x proxy takes a topic's
message type from there: no attribute means NORMAL). Only the keys in SUPPORTED are accepted."""

from __future__ import annotations

import json
import os

import structlog

log = structlog.get_logger(__name__)

FILE = "topicAttributes.json"
MESSAGE_TYPE = "message.type"
SUPPORTED: dict[str, frozenset[str]] = {
    MESSAGE_TYPE: frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION"}),
}


class TopicAttributeError(ValueError):
    """An `attributes` header the broker refuses (its text is the response's remark)."""


def parse_modification(spec: str) -> dict[str, str | None]:
    """`+k=v,-k2` -> {k: v, k2: None} (None: remove); TopicAttributeError naming the bad part."""
    out: dict[str, str | None] = {}
    for kv in (p for p in spec.split(",") if p):
        if "=" in kv:
            key, _, value = kv.partition("=")
            if not key.startswith("+") or not value:
                raise TopicAttributeError(f"add/alter attribute format is wrong: {kv}")
            name, new = key[1:], value
        else:
            if not kv.startswith("-"):
                raise TopicAttributeError(f"delete attribute format is wrong: {kv}")
            name, new = kv[1:], None
        if name in out:
            raise TopicAttributeError(f"key duplication: {name}")
        allowed = SUPPORTED.get(name)
        if allowed is None:
            raise TopicAttributeError(f"unsupported topic attribute: {name} (supported: {', '.join(sorted(SUPPORTED))})")
        if new is not None and new not in allowed:
            raise TopicAttributeError(f"value {new} is not in {sorted(allowed)} for attribute {name}")
        out[name] = new
    return out


class TopicAttributes:
    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, "config", FILE)
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self.table = {str(t): {str(k): str(v) for k, v in a.items()} for t, a in data.items()}
        log.info("topic_attributes.loaded", topics=len(self.table))

    def get(self, topic: str) -> dict[str, str]:
        return dict(self.table.get(topic, {}))

    def modify(self, topic: str, spec: str | None) -> None:
        """Apply an `attributes` header to `topic` (durable on return); TopicAttributeError if it is bad."""
        if not spec:
            return
        changes = parse_modification(spec)
        current = dict(self.table.get(topic, {}))
        for k, v in changes.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        if current == self.table.get(topic, {}):
            return
        if current:
            self.table[topic] = current
        else:
            self.table.pop(topic, None)
        self._persist()
        log.info("topic_attributes.changed", topic=topic, attributes=current)

    def delete(self, topic: str) -> None:
        if self.table.pop(topic, None) is not None:
            self._persist()

    def _persist(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.table, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
