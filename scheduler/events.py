"""Scheduled-message events (accepted / due / delivered) handed to listeners a batch at a time.

Two batch shapes, one meaning. A row is a tuple in `EVENT_FIELDS` order; `fire_rows(listeners, event,
rows)` gives a listener that has a `many(event, rows)` method the whole list in one call, and calls
any other listener as `fn(event, **fields)` once per row, in order. `EventColumns` is the same batch
column by column, as the delay-level drain has it (offsets, uniq keys and timestamps in lists, one
kind / level / msgId prefix for the run); `fire_columns` hands it whole to a listener with a
`columns(event, cols)` method (the trace writer: one record per batch, no per-message tuples or
msgId strings) and turns it into rows for the others. A failing listener is logged and never stops
delivery.
"""

from __future__ import annotations

from collections.abc import Callable

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


def fire_columns(listeners, event: str, cols: EventColumns) -> None:
    if not len(cols):
        return
    rows = None
    for fn in listeners:
        try:
            columns = getattr(fn, "columns", None)
            if columns is not None:
                columns(event, cols)
                continue
            if rows is None:
                rows = cols.rows()
            fire_rows((fn,), event, rows)
        except Exception as e:  # a listener must never stop delivery
            log.warning("scheduler.listener_failed", listener=repr(fn), event=event, error=repr(e))


PutObserver = Callable[[list[str], list[int]], None]  # (topics, record sizes) of records the scheduler stored


def ignore_puts(topics: list[str], sizes: list[int]) -> None:
    """The PutObserver of a service nobody counts for."""
