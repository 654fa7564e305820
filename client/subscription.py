"""A consumer's subscription to one topic: the expression (TAG, or SQL92 as MessageSelector.bySql) it pulls
with and reports in heartbeats. A SQL92 expression is the broker's to parse and evaluate."""

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
    expression_type: str = "TAG"  # or "SQL92"

    @classmethod
    def parse(cls, topic: str, expr: str | None, expression_type: str = "TAG") -> Subscription:
        if expression_type != "TAG":
            return cls(topic, (expr or "").strip(), [], int(time.time() * 1000), expression_type)
        expr = (expr or "*").strip() or "*"
        tags = [] if expr == "*" else [t.strip() for t in expr.split("||") if t.strip()]
        return cls(topic, expr, tags, int(time.time() * 1000))

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": False, "codeSet": [java_hash(t) for t in self.tags],
                "expressionType": self.expression_type,
                "subString": self.expr, "subVersion": self.version, "tagsSet": list(self.tags),
                "topic": self.topic}
