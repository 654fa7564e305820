"""The bitmap pre-filter of SQL92 subscriptions (`enableCalcFilterBitMap=true`, off by default as in Apache).

RocketMQ's CommitLogDispatcherCalcBitMap, composed here from three named parts:
- the registry: each (topic, group)'s current SQL92 selector, its bloom mask (codec.filter_bitmap.group_mask)
  and the time it was registered (a pull or a heartbeat subscription registers it);
- the dispatcher (`on_dispatch`, a store dispatch listener, same loop tick as the put): for each new unit of a
  topic with registered selectors, the record is evaluated once per selector and the OR of the matching groups'
  masks is written with the time (storage.filter_bitmap);
- the gate (`gate`): what a pull or a pop (server.pop.service) gives the store's lookup (`get_messages(..., unit_filter=)`): a unit computed
  after the group's registration whose bits lack the group's mask cannot match, so it is skipped without reading
  the CommitLog. Anything else (older units, units never computed, another selector) goes on to the exact
  evaluation, which always decides. A unit's bits vouch only when it was computed after the registration and
  no later than the gate was made (`since_ms < computed_ms <= until_ms`): a corrupt time says nothing.

The files follow the ConsumeQueue (storage.filter_bitmap: retention, topic deletion); `recover` (at start, once
the store recovered) cuts what the ConsumeQueue no longer has and starts the clock past every kept unit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.consume_queue_unit import UNIT as CQ_UNIT
from codec.filter_bitmap import UNIT, UNIT_SIZE, group_mask
from codec.sql92 import Selector
from storage.filter_bitmap import FilterBitmapFiles

if TYPE_CHECKING:
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

CATCH_UP_UNITS = 4096  # at most this many units before a queue's first dispatch are computed when it is first seen
_READ_UNITS = 1024  # units a gate reads from the bitmap file at once


@dataclass(frozen=True, slots=True)
class Registered:
    selector: Selector
    sub_version: int
    mask: int
    since_ms: int  # units computed strictly after this carry this selector's bits


class UnitGate:
    """`gate(queue_offset) -> bool`: False when the unit's bitmap proves the group's selector cannot match.
    `gate.flags(queue_offset, count)`: the same for a pull's whole scan in one call (what a pull gives the store,
    `get_messages(..., unit_flags=)`); `__call__` is its reference (tests/server/test_sql92_bitmap.py)."""

    __slots__ = ("files", "topic", "queue_id", "mask", "since_ms", "until_ms", "base", "buf", "n", "skipped",
                 "_flags", "_flags_from")

    def __init__(self, files: FilterBitmapFiles, topic: str, queue_id: int, reg: Registered, until_ms: int) -> None:
        self.files, self.topic, self.queue_id = files, topic, queue_id
        self.mask, self.since_ms, self.until_ms = reg.mask, reg.since_ms, until_ms
        self.base, self.buf, self.n = 0, b"", 0
        self.skipped = 0
        self._flags, self._flags_from = b"", 0

    def flags(self, queue_offset: int, count: int) -> bytes:
        """One byte per unit from `queue_offset`: 1 where the unit may match (not computed between the
        registration and the gate's making, or its bits hold the mask; past the files' end), 0 where its bits
        rule it out."""
        mask, since, until = self.mask, self.since_ms, self.until_ms
        out = bytearray()
        while len(out) < count:  # a read stops at its file's end: go on in the next file
            buf = self.files.read(self.topic, self.queue_id, queue_offset + len(out), count - len(out))
            whole = len(buf) - len(buf) % UNIT_SIZE
            if whole == 0:
                break
            out += bytes([not since < computed <= until or bits & mask == mask
                          for bits, computed in UNIT.iter_unpack(buf[:whole])])
        out += b"\x01" * (count - len(out))
        self._flags, self._flags_from = bytes(out), queue_offset
        return self._flags

    def scanned_to(self, next_offset: int) -> None:
        """Count the units `flags` ruled out that the scan went past (the lookup stopped at `next_offset`)."""
        self.skipped += self._flags.count(0, 0, max(0, next_offset - self._flags_from))
        self._flags = b""

    def __call__(self, queue_offset: int) -> bool:
        i = queue_offset - self.base
        if not 0 <= i < self.n:
            self.base = queue_offset
            self.buf = self.files.read(self.topic, self.queue_id, queue_offset, _READ_UNITS)
            self.n = len(self.buf) // UNIT_SIZE
            i = 0
            if self.n == 0:
                return True
        bits, computed_ms = UNIT.unpack_from(self.buf, i * UNIT_SIZE)
        if not self.since_ms < computed_ms <= self.until_ms or bits & self.mask == self.mask:
            return True
        self.skipped += 1
        return False


class FilterBitmaps:
    def __init__(self, files: FilterBitmapFiles, store: MessageStore,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.files = files
        self.store = store
        self.clock_ms = clock_ms
        self._last_ms = 0
        self._registered: dict[str, dict[str, Registered]] = {}  # topic -> group -> its selector
        self._next: dict[tuple[str, int], int] = {}  # the next unit to compute per queue
        self.computed = 0
        self.skipped = 0

    def _tick(self) -> int:
        """Wall-clock ms, strictly increasing across calls: a unit computed after a registration is later than it
        even within the same millisecond."""
        self._last_ms = max(self.clock_ms(), self._last_ms + 1)
        return self._last_ms

    def runtime_info(self) -> dict[str, int]:
        """Ours in GET_BROKER_RUNTIME_INFO: the units computed at dispatch and skipped at pull."""
        return {"filterBitmapComputed": self.computed, "filterBitmapSkipped": self.skipped}

    # ---- registry ---------------------------------------------------------------------------------------------
    def register(self, group: str, topic: str, sub_version: int, selector: Selector) -> Registered | None:
        """The group's selector for `topic`. The same expression keeps its registration (each consumer of a group
        has its own subVersion); another one replaces it when its subVersion is not older, else None: a lagging
        consumer's old expression gets no bitmap (its pulls are evaluated exactly)."""
        groups = self._registered.setdefault(topic, {})
        reg = groups.get(group)
        if reg is not None and reg.selector.expression == selector.expression:
            return reg
        if reg is not None and sub_version < reg.sub_version:
            return None
        reg = Registered(selector, sub_version, group_mask(group, topic), self._tick())
        groups[group] = reg
        log.info("filter_bitmap.registered", group=group, topic=topic, expression=selector.expression)
        return reg

    def gate(self, group: str, topic: str, queue_id: int, sub_version: int, selector: Selector) -> UnitGate | None:
        reg = self.register(group, topic, sub_version, selector)
        return None if reg is None else UnitGate(self.files, topic, queue_id, reg, self._last_ms)

    def count_skipped(self, gate: UnitGate) -> None:
        self.skipped += gate.skipped

    # ---- dispatcher -------------------------------------------------------------------------------------------
    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        groups = self._registered.get(topic)
        if not groups:
            return
        key = (topic, queue_id)
        start = self._next.get(key)
        if start is None:
            start = max(self.files.end(topic, queue_id), max_offset - CATCH_UP_UNITS)
        if start >= max_offset:
            self._next[key] = start
            return
        regs = tuple((r.selector.matches_record, r.mask) for r in groups.values())
        now = self._tick()
        out = bytearray()
        first = start
        while start < max_offset:
            units = self.store.read_units(topic, queue_id, start, max_offset - start)
            if units is None or len(units) == 0:
                break
            for phys, size, _ in CQ_UNIT.iter_unpack(units):
                try:
                    rec = self.store.read_record(phys, size) if size > 0 else None
                except (ValueError, IndexError, OSError):  # gone (retention) or not a record: no bits
                    rec = None
                bits = 0
                if rec is not None:
                    for matches, mask in regs:
                        if matches(rec):
                            bits |= mask
                out += UNIT.pack(bits, now)
            start += len(units) // CQ_UNIT.size
        if out:
            self.files.write(topic, queue_id, first, bytes(out))
            self.computed += len(out) // UNIT_SIZE
        self._next[key] = start

    def recover(self) -> None:
        """At start, after the store recovered: the files agree with the ConsumeQueues (storage.filter_bitmap), and
        the clock starts past every kept unit (a registration from now on is later than all of them)."""
        store = self.store
        known: dict[str, set[int]] = {}

        def bounds(topic: str, queue_id: int) -> tuple[int, int] | None:
            ids = known.get(topic)
            if ids is None:
                ids = known[topic] = set(store.queue_ids(topic))
            return (store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)) if queue_id in ids else None
        self._last_ms = max(self._last_ms, self.files.recover(bounds, self.clock_ms()))
        self._next.clear()

    def close(self) -> None:
        self.files.close()

