"""The dispatch listeners (RocketMQ's CommitLogDispatcher after the ConsumeQueue write): called once per
(topic, queue) a put, a batch put or a reput wrote to, with that queue's new max offset. A listener that
raises is logged; the others still run.

`DispatchGate` is how far readers see: RocketMQ 5.3's reput end (`getReputEndOffset`, the confirmOffset in
controller mode; Apache's ReputMessageService does not dispatch past it). Here a put still writes its
ConsumeQueue units at once (queue offsets are assigned by the put), but while the gate has a limit a write
whose records end past it is held: the queues it wrote keep their visible max offset (`held`, what
`storage.store_reads.StoreReads` answers: pulls, pops, the scheduler's unit reads) and its listeners are not
called, until `set_limit` moves the limit past its end; then they are called once per queue, in the same
call. No limit (`None`, classic mode, a lone master): everything is dispatched as it is written. The store
never decides the limit: the composition (server.cluster.ha) sets it as acks and frames arrive.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Protocol

import structlog

from storage.store_types import DispatchListener

log = structlog.get_logger(__name__)

QueueKey = tuple[str, int]

# at most this many held writes are kept apart; a write past it joins the last one (released with it, so
# later than it could be, never earlier): a stalled replica under a flood costs bounded memory
MAX_HELD_WRITES = 4096


class DispatchListeners:
    """The listeners of every topic's writes, and those of one topic's only (the delay levels, the timer,
    the half and trace topics: a put to any other topic does not call them). `active`: is there any."""

    def __init__(self) -> None:
        self.listeners: list[DispatchListener] = []  # of every topic
        self.by_topic: dict[str, list[DispatchListener]] = {}  # of that topic only
        self.active = False

    def add(self, fn: DispatchListener, topic: str | None = None) -> None:
        if topic is None:
            self.listeners.append(fn)
        else:
            self.by_topic.setdefault(topic, []).append(fn)
        self.active = True

    def remove(self, fn: DispatchListener) -> None:
        if fn in self.listeners:
            self.listeners.remove(fn)
        for topic, fns in list(self.by_topic.items()):
            if fn in fns:
                fns.remove(fn)
                if not fns:
                    del self.by_topic[topic]
        self.active = bool(self.listeners or self.by_topic)

    def dispatch(self, keys: Iterable[QueueKey], queue_offsets: Mapping[QueueKey, int]) -> None:
        """Each listener of the key's topic once per key, with `queue_offsets[key]` (the queue's max offset
        after the write)."""
        for key in keys:
            self.dispatch_one(key[0], key[1], queue_offsets[key])

    def dispatch_one(self, topic: str, queue_id: int, max_offset: int) -> None:
        """`dispatch` of one queue: every topic's listeners, then the topic's own."""
        fns = self.listeners
        own = self.by_topic.get(topic)
        if own:
            fns = fns + own
        for fn in fns:
            try:
                fn(topic, queue_id, max_offset)
            except Exception as e:
                log.error("store.dispatch_listener_failed", listener=repr(fn), error=repr(e))


class QueueWrite(Protocol):
    """What the gate reads of one queue's run in a write (storage.consume_queue.QueueRun and the put
    path's units): the queue offset of its first unit."""

    @property
    def first(self) -> int: ...


class HeldWrite:
    """A write past the limit: the CommitLog end of its records and each queue's max offset after it."""

    __slots__ = ("end", "offsets")

    def __init__(self, end: int, offsets: dict[QueueKey, int]) -> None:
        self.end, self.offsets = end, offsets


class DispatchGate:
    """The dispatch limit (see the module docstring). Invariants: with no limit nothing is held; every held
    write ends past the limit, in CommitLog order; a queue in `held` has units past its visible max."""

    def __init__(self, listeners: DispatchListeners) -> None:
        self.listeners = listeners
        self.limit: int | None = None  # None: no limit; else the CommitLog offset dispatch stops at
        self.held: dict[QueueKey, int] = {}  # visible max offset of each queue with units past the limit
        self.writes: deque[HeldWrite] = deque()
        self.released_total = 0  # held writes later dispatched (stats)

    def after_write(self, runs: Mapping[QueueKey, QueueWrite], queue_offsets: Mapping[QueueKey, int],
                    end: int) -> None:
        """After a write's units (`runs`: per queue, the run it wrote; records ending at `end`): dispatch it
        now, or hold it until the limit passes `end`."""
        limit = self.limit
        if limit is None or end <= limit:
            if self.listeners.active:
                self.listeners.dispatch(runs, queue_offsets)
            return
        held = self.held
        for key, run in runs.items():
            if key not in held:
                held[key] = run.first  # everything before this write was visible
        offsets = {key: queue_offsets[key] for key in runs}
        writes = self.writes
        if len(writes) >= MAX_HELD_WRITES:
            last = writes[-1]
            last.end = end
            last.offsets.update(offsets)
        else:
            writes.append(HeldWrite(end, offsets))

    def set_limit(self, limit: int | None, queue_offsets: Mapping[QueueKey, int]) -> None:
        """A new limit (None: none): the held writes it covers are dispatched, in order, one listener call
        per queue. What was dispatched stays dispatched (a lower limit only holds later writes)."""
        if limit is not None and self.limit is not None and limit < self.limit:
            limit = self.limit
        self.limit = limit
        writes = self.writes
        if not writes or (limit is not None and writes[0].end > limit):
            return
        released: dict[QueueKey, int] = {}
        while writes and (limit is None or writes[0].end <= limit):
            released.update(writes.popleft().offsets)
            self.released_total += 1
        held = self.held
        if not writes:
            held.clear()
        else:
            for key, off in released.items():
                if key in held:
                    if off >= queue_offsets.get(key, 0):
                        del held[key]
                    else:
                        held[key] = off
        if self.listeners.active:
            live = {k: v for k, v in released.items() if k in queue_offsets}
            self.listeners.dispatch(live, live)

    def visible_max(self, key: QueueKey, max_offset: int) -> int:
        """A queue's max offset as readers see it (`max_offset`: its units')."""
        v = self.held.get(key)
        return max_offset if v is None or v > max_offset else v

    def truncated(self, offset: int, queue_offsets: Mapping[QueueKey, int]) -> None:
        """The CommitLog (and ConsumeQueues) were cut back to `offset`: held writes past it are gone."""
        writes = self.writes
        while writes and writes[-1].end > offset:
            writes.pop()
        if self.limit is not None and self.limit > offset:
            self.limit = offset
        if not writes:
            self.held.clear()
            return
        for key in list(self.held):
            self.held[key] = min(self.held[key], queue_offsets.get(key, 0))

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's queues are no longer held (a held write naming them dispatches the rest)."""
        for key in [k for k in self.held if k[0] == topic]:
            del self.held[key]

    def stats(self) -> dict[str, int]:
        return {"limit": -1 if self.limit is None else self.limit, "held_writes": len(self.writes),
                "held_queues": len(self.held), "released_writes": self.released_total}
