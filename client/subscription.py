"""A consumer's subscription to one topic: the TAG expression it pulls with and reports in heartbeats."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from codec.tags import java_hash


@dataclass(slots=True)
class Subscription:
    topic: str
    expr: str = "*"
    tags: list[str] = field(default_factory=list)
    version: int = 0

    @classmethod
    def parse(cls, topic: str, expr: str | None) -> Subscription:
        expr = (expr or "*").strip() or "*"
        tags = [] if expr == "*" else [t.strip() for t in expr.split("||") if t.strip()]
        return cls(topic, expr, tags, int(time.time() * 1000))

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": False, "codeSet": [java_hash(t) for t in self.tags], "expressionType": "TAG",
                "subString": self.expr, "subVersion": self.version, "tagsSet": list(self.tags),
                "topic": self.topic}
