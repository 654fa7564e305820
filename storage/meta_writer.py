"""What the MetaStore's writer thread writes: the changes staged since its last commit (`StagedBatch`: the
last change of a row wins) and one transaction of them (`write_batch`), or, after a failed transaction, one
per row (`split_rows`) so a bad row is set aside while the others commit."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from storage.meta_schema import TopicRow, encode_offsets

# Offset rows encoded between two GIL hand-offs (~0.3 ms of Python). A thread computing in Python keeps
# the GIL until the interpreter's switch interval (5 ms) forces it out, so the event loop, woken by a
# request, waited up to 5 ms for every such stretch (10,000 offset rows are ~12 ms of encoding); a
# `time.sleep(0)` releases the GIL and the waiting loop takes it at once.
YIELD_EVERY = 256


class StagedBatch:
    """Changes staged since the last swap; the last change of a row wins."""

    __slots__ = ("topics", "groups", "offset_keys", "delay", "versions")

    def __init__(self) -> None:
        self.topics: dict[str, TopicRow | None] = {}
        self.groups: dict[str, str | None] = {}
        self.offset_keys: set[str] = set()  # "topic@group" whose row is rewritten from the live table
        self.delay: dict[int, int] = {}
        self.versions: dict[str, tuple[int, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.topics or self.groups or self.offset_keys or self.delay or self.versions)

    def merge_under(self, newer: StagedBatch) -> StagedBatch:
        """`newer` with this (older, failed) batch's rows filled in where newer has none."""
        _fill_under(self.topics, newer.topics)
        _fill_under(self.groups, newer.groups)
        _fill_under(self.delay, newer.delay)
        _fill_under(self.versions, newer.versions)
        newer.offset_keys |= self.offset_keys
        return newer


_K = TypeVar("_K")
_V = TypeVar("_V")


def _fill_under(older: dict[_K, _V], newer: dict[_K, _V]) -> None:
    for k, v in older.items():
        newer.setdefault(k, v)



def split_rows(b: StagedBatch) -> list[StagedBatch]:
    """Every row of `b` in a batch of its own (the data versions and delay offsets together in one)."""
    rows: list[StagedBatch] = []
    for name, row in b.topics.items():
        one = StagedBatch()
        one.topics[name] = row
        rows.append(one)
    for name, cfg in b.groups.items():
        one = StagedBatch()
        one.groups[name] = cfg
        rows.append(one)
    for key in b.offset_keys:
        one = StagedBatch()
        one.offset_keys.add(key)
        rows.append(one)
    if b.delay or b.versions:
        one = StagedBatch()
        one.delay, one.versions = b.delay, b.versions
        rows.append(one)
    return rows


def write_batch(conn: sqlite3.Connection, b: StagedBatch, offset_source: Callable[[str], dict[int, int] | None]) -> int:
    """One transaction of every row of `b` (a consumer_offsets row from `offset_source`, the live table, at
    the time of writing); the rows written. Rolled back and raised on any error."""
    n = 0
    conn.execute("BEGIN")
    try:
        if b.topics:
            up = [r for r in b.topics.values() if r is not None]
            dels = [(k,) for k, r in b.topics.items() if r is None]
            conn.executemany("INSERT OR REPLACE INTO topic VALUES (?,?,?,?,?,?,?)", up)
            conn.executemany("DELETE FROM topic WHERE name=?", dels)
            n += len(b.topics)
        if b.groups:
            conn.executemany("INSERT OR REPLACE INTO subscription_group VALUES (?,?)",
                             [(k, t) for k, t in b.groups.items() if t is not None])
            conn.executemany("DELETE FROM subscription_group WHERE name=?",
                             [(k,) for k, t in b.groups.items() if t is None])
            n += len(b.groups)
        if b.offset_keys:
            source = offset_source
            rows: list[tuple[str, str]] = []
            gone: list[tuple[str]] = []
            for i, key in enumerate(b.offset_keys):
                if i % YIELD_EVERY == YIELD_EVERY - 1:
                    time.sleep(0)  # hand the GIL to the event loop if it waits (see YIELD_EVERY)
                queues = source(key)
                if queues:
                    rows.append((key, encode_offsets(queues)))
                else:
                    gone.append((key,))
            conn.executemany("INSERT OR REPLACE INTO consumer_offsets VALUES (?,?)", rows)
            conn.executemany("DELETE FROM consumer_offsets WHERE key=?", gone)
            n += len(b.offset_keys)
        if b.delay:
            conn.executemany("INSERT OR REPLACE INTO delay_offset VALUES (?,?)", list(b.delay.items()))
            n += len(b.delay)
        if b.versions:
            conn.executemany("INSERT OR REPLACE INTO data_version VALUES (?,?,?)",
                             [(t, c, ts) for t, (c, ts) in b.versions.items()])
        conn.execute("COMMIT")
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
    return n
