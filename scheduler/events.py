"""Scheduled-message events (accepted / due / delivered) handed to listeners a batch at a time.

A row is a tuple in `EVENT_FIELDS` order. `fire_rows(listeners, event, rows)` gives a listener that
has a `many(event, rows)` method the whole list in one call (the trace writer: one call per delivery
batch instead of one keyword call per message); any other listener is called as
`fn(event, **fields)` once per row, in order. A failing listener is logged and never stops delivery.
"""

from __future__ import annotations

import structlog

log = structlog.get_logger(__name__)

EVENT_FIELDS = ("kind", "level", "topic", "msgId", "uniqKey", "bornTs", "storeTs", "dueTs", "deliveredTs")


def fire_rows(listeners, event: str, rows: list[tuple]) -> None:
    if not rows:
        return
    for fn in listeners:
        try:
            many = getattr(fn, "many", None)
            if many is not None:
                many(event, rows)
            else:
                for row in rows:
                    fn(event, **dict(zip(EVENT_FIELDS, row, strict=True)))
        except Exception as e:  # a listener must never stop delivery
            log.warning("scheduler.listener_failed", listener=repr(fn), event=event, error=repr(e))
