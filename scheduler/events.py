"""Scheduled-message events (accepted / due / delivered) handed to listeners a batch at a time.

A listener is an `EventListener` (declared below): it takes one event as `listener(event, **fields)`,
a batch as rows (`many(event, rows)`, each row a tuple in `EVENT_FIELDS` order) and a batch column by
column (`columns(event, cols)`: an `EventColumns`, as the delay-level drain has it: offsets, uniq keys
and timestamps in lists, one kind / level / msgId prefix for the run; the trace writer writes it as one
record). `EventCallback` is the base of a per-event listener: its `many` and `columns` call it once per
row; `on_event(fn)` makes one of a plain function. `fire_rows` / `fire_columns` hand a batch to every
listener; a failing listener is logged and never stops delivery.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

EVENT_FIELDS = ("kind", "level", "topic", "msgId", "uniqKey", "bornTs", "storeTs", "dueTs", "deliveredTs")


EventRow = tuple[Any, ...]  # values in EVENT_FIELDS order


class EventListener(Protocol):
    """What the delay levels and the timer wheel tell about scheduled messages."""

    def __call__(self, event: str, **fields: Any) -> None: ...

    def many(self, event: str, rows: list[EventRow]) -> None: ...

    def columns(self, event: str, cols: EventColumns) -> None: ...


class EventCallback:
    """A per-event listener: subclasses implement `__call__`; a batch reaches it one row at a time."""

    def __call__(self, event: str, **fields: Any) -> None:
        raise NotImplementedError

    def many(self, event: str, rows: list[EventRow]) -> None:
        for row in rows:
            self(event, **dict(zip(EVENT_FIELDS, row, strict=True)))

    def columns(self, event: str, cols: EventColumns) -> None:
        self.many(event, cols.rows())


class _Function(EventCallback):
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn

    def __call__(self, event: str, **fields: Any) -> None:
        self.fn(event, **fields)

    def __repr__(self) -> str:
        return f"on_event({self.fn!r})"


def on_event(fn: Callable[..., None]) -> EventListener:
    """A plain `fn(event, **fields)` as an EventListener."""
    return _Function(fn)


def fire_rows(listeners: list[EventListener], event: str, rows: list[EventRow]) -> None:
    if not rows:
        return
    for fn in listeners:
        try:
            fn.many(event, rows)
        except Exception as e:  # a listener must never stop delivery
            log.warning("scheduler.listener_failed", listener=repr(fn), scheduled_event=event, error=repr(e))


def _text(u) -> str:
    if u is None:
        return ""
    return u.decode("utf-8", "replace") if isinstance(u, bytes | bytearray) else u


class EventColumns:
    """One event for a run of messages. Per message (parallel lists): `topics` (real topic),
    `offsets` (CommitLog offset: msgId = `msg_id_prefix` + 16 upper-case hex digits, RocketMQ's
    offset msgId), `uniq_keys` (UTF-8 bytes, str or None), `born_ts`, `store_ts` (the schedule
    record's), `due_ts`; `delivered_ts` is one int for the run (one put, one store timestamp) or a
    list. `kind`, `level` and `msg_id_prefix` hold for the whole run."""

    __slots__ = ("kind", "level", "msg_id_prefix", "topics", "offsets", "uniq_keys", "born_ts", "store_ts",
                 "due_ts", "delivered_ts")

    def __init__(self, kind: str, level: int, msg_id_prefix: str, topics: list[str], offsets: list[int],
                 uniq_keys: list, born_ts: list[int], store_ts: list[int], due_ts: list[int],
                 delivered_ts: int | list[int]) -> None:
        self.kind, self.level, self.msg_id_prefix = kind, level, msg_id_prefix
        self.topics, self.offsets, self.uniq_keys = topics, offsets, uniq_keys
        self.born_ts, self.store_ts, self.due_ts, self.delivered_ts = born_ts, store_ts, due_ts, delivered_ts

    def __len__(self) -> int:
        return len(self.offsets)

    def rows(self) -> list[tuple]:
        """The run as rows in EVENT_FIELDS order (msgIds formatted, uniq keys as str)."""
        kind, level, p, dts = self.kind, self.level, self.msg_id_prefix, self.delivered_ts
        per = dts if isinstance(dts, list) else [dts] * len(self.offsets)
        return [(kind, level, t, f"{p}{o:016X}", _text(u), b, s, d, x)
                for t, o, u, b, s, d, x in zip(self.topics, self.offsets, self.uniq_keys, self.born_ts,
                                               self.store_ts, self.due_ts, per, strict=True)]


def fire_columns(listeners: list[EventListener], event: str, cols: EventColumns) -> None:
    if not len(cols):
        return
    for fn in listeners:
        try:
            fn.columns(event, cols)
        except Exception as e:  # a listener must never stop delivery
            log.warning("scheduler.listener_failed", listener=repr(fn), scheduled_event=event, error=repr(e))


PutObserver = Callable[[str, int, int], None]  # (topic, records, bytes) the scheduler stored in that topic


def ignore_puts(topic: str, n: int, nbytes: int) -> None:
    """The PutObserver of a service nobody counts for."""


def count_puts(observer: PutObserver, topics: list[str], sizes: list[int]) -> None:
    """Hand a run of stored records (their topics and sizes) to `observer`, one call per topic: a run
    to one topic (the usual case) costs one call and no per-record work."""
    if not topics:
        return
    first = topics[0]
    if topics.count(first) == len(topics):
        observer(first, len(topics), sum(sizes))
        return
    nbytes: dict[str, int] = {}
    get = nbytes.get
    for topic, size in zip(topics, sizes, strict=True):
        nbytes[topic] = get(topic, 0) + size
    for topic, n in Counter(topics).items():
        observer(topic, n, nbytes[topic])
