"""Rotating, size-bounded msgpack files under `<store>/export/<kind>/`: the only input of `analytics/`.

Writes are buffered in memory and flushed by the periodic exporter task (or when the buffer is
large), so the delivery hot path never touches the file system. Each kind is a stream of msgpack
records in files `<kind>-<startMs>.msgpack`, rotated by size, the oldest deleted past a total bound.

- `traces/`: scheduled-message events, in two shapes (`TraceWriter`):
  - v3, one record per delivery batch (the delay levels hand their events over column by column):
    `[3, event, kind, level, msgIdPrefix, topics, offsets, uniqKeys, bornTs, storeTs, dueTs, deliveredTs]`;
    `topics` .. `dueTs` are parallel lists (one entry per message), msgId = msgIdPrefix + the CommitLog
    offset as 16 upper-case hex digits, a uniqKey is str, bin (UTF-8) or nil, `deliveredTs` one int for
    the batch (one put) or a list;
  - v2, one record per event (timers, accepted events):
    `[2, event, kind, level, topic, msgId, uniqKey, bornTs, storeTs, dueTs, deliveredTs]`.
  event `"accepted"|"due"|"delivered"`, kind `"level"|"timer"`, level 0 for timers, topic the real topic,
  timestamps in ms (deliveredTs 0 unless delivered). v1 (before 2026-11-24) was one map per event
  `{"v":1,"event":...}`; `analytics.readers.trace_rows` reads all three as rows.
- `metrics/`: one map per sample, written every export interval (packed 500 at a time, yielding to the
  loop between): `{"v":1,"ts":ms,"name":str,"type":"counter"|"gauge"|"histogram","labels":{str:str},
  "value":float}`; histograms add `"buckets":[[le,cumulativeCount],...],"sum":float,"count":int`.
  Names (`server.observability.telemetry`): `delaymq_put_messages_total{topic}`,
  `delaymq_put_bytes_total{topic}`, `delaymq_pull_messages_total{topic,group}`,
  `delaymq_schedule_pending{level}`, `delaymq_schedule_delivered_total{level}`,
  `delaymq_schedule_lateness_ms{level}` (histogram), `delaymq_timer_pending`, `delaymq_timer_enqueue_total`,
  `delaymq_timer_dequeue_total`, `delaymq_timer_lateness_ms` (histogram), `delaymq_consumer_lag{group,topic}`,
  `delaymq_schedule_delay_seconds{level}` (the delay table at export time: the report names levels by it).
- `rmq_trace/`: records clients with tracing enabled sent to RMQ_SYS_TRACE_TOPIC:
  `{"v":1,"storeTs":ms,"topic":str,"body":str}`; `body` is RocketMQ's TraceDataEncoder text (contexts
  separated by `\x02`, fields by `\x01`; types Pub, SubBefore, SubAfter, EndTransaction).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

import msgpack
import structlog

from scheduler.events import EVENT_FIELDS, EventColumns, EventRow
from server.observability.registry import SLICE, Registry, Sample, collect_sliced

if TYPE_CHECKING:
    from storage.supervisor import SupervisedTask, Supervisor

log = structlog.get_logger(__name__)


class RotatingMsgpackWriter:
    """Append msgpack maps to `<dir>/<prefix>-<startMs>.msgpack`, rotating at `max_file_bytes` and
    deleting the oldest files once the directory holds more than `max_total_bytes`."""

    def __init__(self, directory: str, prefix: str, max_file_bytes: int = 16 << 20,
                 max_total_bytes: int = 256 << 20, flush_bytes: int = 1 << 20) -> None:
        self.directory = directory
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.flush_bytes = flush_bytes
        self._packer = msgpack.Packer()
        self._buf = bytearray()
        self._file: BinaryIO | None = None
        self._file_size = 0
        self.records = 0
        os.makedirs(directory, exist_ok=True)

    def write(self, record: dict[str, Any] | list[Any]) -> None:
        self._buf += self._packer.pack(record)
        self.records += 1
        if len(self._buf) >= self.flush_bytes:
            self.flush()

    def write_many(self, records: list[Any]) -> None:
        """`write` for a batch: the records packed in one call (one msgpack array whose header is
        dropped, which leaves the records themselves back to back) and one buffer append."""
        n = len(records)
        if not n:
            return
        packed = self._packer.pack(records)
        self._buf += memoryview(packed)[1 if n < 16 else 3 if n < 0x10000 else 5:]
        self.records += n
        if len(self._buf) >= self.flush_bytes:
            self.flush()

    def _open_new(self) -> BinaryIO:
        if self._file is not None:
            self._file.close()
        name = f"{self.prefix}-{int(time.time() * 1000):013d}.msgpack"
        path = os.path.join(self.directory, name)
        if os.path.exists(path):  # two rotations in one millisecond
            path = path.replace(".msgpack", f"-{self.records}.msgpack")
        f = self._file = open(path, "ab")  # noqa: SIM115 - kept open across writes
        self._file_size = 0
        self._enforce_total()
        return f

    def _enforce_total(self) -> None:
        files = sorted(
            (os.path.join(self.directory, n) for n in os.listdir(self.directory) if n.endswith(".msgpack")),
            key=os.path.getmtime,
        )
        total = sum(os.path.getsize(f) for f in files)
        current = self._file.name if self._file is not None else None
        for f in files:
            if total <= self.max_total_bytes:
                break
            if f == current:
                continue
            total -= os.path.getsize(f)
            os.remove(f)
            log.info("export.file_deleted", path=f, reason="export directory over its size bound")

    def flush(self) -> None:
        if not self._buf:
            return
        f = self._file
        if f is None or self._file_size >= self.max_file_bytes:
            f = self._open_new()
        f.write(self._buf)
        f.flush()
        self._file_size += len(self._buf)
        self._buf.clear()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


class MetricsExporter:
    """Every `interval_s`, write every registry sample as one map; also flushes the trace writers."""

    def __init__(self, registry: Registry, writer: RotatingMsgpackWriter, interval_s: float = 10.0,
                 also_flush: list[RotatingMsgpackWriter] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.writer = writer
        self.interval_s = interval_s
        self.also_flush = also_flush or []
        self.clock = clock
        self._task: SupervisedTask | None = None

    def export_once(self) -> int:
        """Every sample now, in one go (shutdown, tests)."""
        ts = int(self.clock() * 1000)
        n = 0
        for s in self.registry.collect():
            self._write(ts, s)
            n += 1
        self._flush()
        return n

    async def export_sliced(self) -> int:
        """`export_once` yielding to the loop every SLICE samples (the periodic export: 10,000 groups'
        lag samples are ~50 ms of work, which must not stall the loop in one piece)."""
        ts = int(self.clock() * 1000)
        samples = await collect_sliced(self.registry)
        for i, s in enumerate(samples, 1):
            self._write(ts, s)
            if i % SLICE == 0:
                await asyncio.sleep(0)
        self._flush()
        return len(samples)

    def _write(self, ts: int, s: Sample) -> None:
        rec: dict[str, Any] = {"v": 1, "ts": ts, "name": s.name, "type": s.type, "labels": s.labels, "value": s.value}
        if s.type == "histogram":
            rec["buckets"] = [[b if b != float("inf") else 1e308, c] for b, c in s.buckets or []]
            rec["sum"] = s.sum
            rec["count"] = s.count
        self.writer.write(rec)

    def _flush(self) -> None:
        self.writer.flush()
        for w in self.also_flush:
            w.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.export_sliced()  # an error: logged, counted, backed off and restarted by the supervisor

    def start(self, supervisor: Supervisor) -> None:
        """Run the export loop under `supervisor` (storage.supervisor.Supervisor)."""
        self._task = supervisor.spawn("metrics-exporter", self._run)

    async def shutdown(self) -> None:
        if self._task is not None:
            await self._task.stop()
            self._task = None
        try:
            self.export_once()
        finally:
            self.writer.close()
            for w in self.also_flush:
                w.close()


_TRACE_FIELDS = EVENT_FIELDS  # rows from scheduler.events come in this order
_ABSENT = {k: 0 if k.endswith("Ts") or k == "level" else "" for k in _TRACE_FIELDS}  # what a missing field becomes


def _fill_absent(row: EventRow) -> EventRow:
    return tuple(_ABSENT[k] if v is None else v for k, v in zip(_TRACE_FIELDS, row, strict=True))


class TraceWriter:
    """Scheduled-message events (accepted / due / delivered) as msgpack arrays (the module docstring):
    a run the scheduler hands over column by column (`columns`, the delay-level drain) is ONE
    record `[3, event, kind, level, msgIdPrefix, topics, offsets, uniqKeys, bornTs, storeTs, dueTs,
    deliveredTs]` (trace format v3); a row (`many`, `__call__`) is one record `[2, event, *FIELDS]`
    (v2). Positional, not maps, and columns, not rows: packing nine keys per event, then one tuple
    and msgId string per event, cost more than the rest of a delivery did."""

    FIELDS = _TRACE_FIELDS
    VERSION = 3

    def __init__(self, writer: RotatingMsgpackWriter) -> None:
        self.writer = writer

    EVENTS = frozenset(("accepted", "due", "delivered"))

    def __call__(self, event: str, **fields: Any) -> None:
        self.many(event, [tuple(fields.get(k) for k in self.FIELDS)])

    def columns(self, event: str, c: EventColumns) -> None:
        """A run of events (scheduler.events.EventColumns) as one v3 record."""
        if event not in self.EVENTS:
            return
        self.writer.write([3, event, c.kind, c.level, c.msg_id_prefix, c.topics, c.offsets, c.uniq_keys,
                           c.born_ts, c.store_ts, c.due_ts, c.delivered_ts])

    def many(self, event: str, rows: list[EventRow]) -> None:  # scheduler.events.EventListener
        """A batch of events, each row in scheduler.events.EVENT_FIELDS order (== FIELDS), packed in
        one call; a missing value (None) is written as its field's zero value."""
        if event not in self.EVENTS:
            return
        head = (2, event)
        self.writer.write_many([head + (row if None not in row else _fill_absent(row)) for row in rows])
