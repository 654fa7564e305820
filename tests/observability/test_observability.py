import asyncio
import os

from analytics import readers
from server.observability.export import MetricsExporter, RotatingMsgpackWriter, TraceWriter
from server.observability.http import MetricsHttpServer
from server.observability.registry import Registry, render_prometheus


def test_prometheus_text_has_counters_gauges_and_cumulative_buckets():
    reg = Registry()
    reg.counter("delaymq_put_messages_total", {"topic": "T"}).inc(3)
    reg.gauge("delaymq_schedule_pending", {"level": "2"}, fn=lambda: 7)
    h = reg.histogram("delaymq_schedule_lateness_ms", {"level": "1"}, bounds=(1, 10))
    for v in (0.5, 5, 50):
        h.observe(v)
    text = render_prometheus(reg.collect())
    assert 'delaymq_put_messages_total{topic="T"} 3' in text
    assert 'delaymq_schedule_pending{level="2"} 7' in text
    assert 'delaymq_schedule_lateness_ms_bucket{level="1",le="1"} 1' in text
    assert 'delaymq_schedule_lateness_ms_bucket{level="1",le="10"} 2' in text
    assert 'delaymq_schedule_lateness_ms_bucket{level="1",le="+Inf"} 3' in text
    assert 'delaymq_schedule_lateness_ms_count{level="1"} 3' in text
    assert h.quantile(0.5) == 10


def test_exports_round_trip_through_the_analytics_readers(tmp_path):
    reg = Registry()
    reg.counter("delaymq_put_messages_total", {"topic": "T"}).inc(5)
    metrics = RotatingMsgpackWriter(str(tmp_path / "metrics"), "metrics")
    traces = RotatingMsgpackWriter(str(tmp_path / "traces"), "traces")
    trace = TraceWriter(traces)
    trace("delivered", kind="level", level=3, topic="T", msgId="ID", uniqKey="U", bornTs=1, storeTs=2, dueTs=10, deliveredTs=12)
    MetricsExporter(reg, metrics, also_flush=[traces]).export_once()
    [mfile] = os.listdir(tmp_path / "metrics")
    rows = list(readers.metric_rows((tmp_path / "metrics" / mfile).read_bytes()))
    assert rows[0][1:4] == ("delaymq_put_messages_total", "counter", "T") and rows[0][6] == 5.0
    [tfile] = os.listdir(tmp_path / "traces")
    [row] = readers.trace_rows((tmp_path / "traces" / tfile).read_bytes())
    assert row == ("delivered", "level", 3, "T", "ID", "U", 1, 2, 10, 12)


def test_writer_rotates_and_bounds_the_directory(tmp_path):
    w = RotatingMsgpackWriter(str(tmp_path), "t", max_file_bytes=1000, max_total_bytes=3000, flush_bytes=1)
    for i in range(400):
        w.write({"i": i, "pad": "x" * 20})
    w.close()
    files = os.listdir(tmp_path)
    assert len(files) > 1
    assert sum(os.path.getsize(tmp_path / f) for f in files) <= 3000 + 1000


async def test_metrics_endpoint_serves_prometheus_text():
    reg = Registry()
    reg.counter("delaymq_pull_messages_total", {"topic": "T", "group": "G"}).inc()
    srv = MetricsHttpServer(reg, port=0)
    port = await srv.start()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await asyncio.wait_for(r.read(), 30)
        w.close()
        assert data.startswith(b"HTTP/1.1 200 OK")
        assert b'delaymq_pull_messages_total{group="G",topic="T"} 1' in data
    finally:
        await srv.close()


def test_batched_trace_rows_write_what_one_call_per_event_writes(tmp_path):
    """TraceWriter.many (the delivery paths' batch form, scheduler.events) writes the very records
    that one keyword call per event writes, missing values included; plain listeners still get calls."""
    import msgpack

    from scheduler.events import EVENT_FIELDS, fire_rows, on_event

    rows = [("level", 3, "T", "ID1", "U1", 1, 2, 10, 12), ("timer", 0, "T2", "ID2", None, 0, 5, 20, 0)]
    one_dir, many_dir = tmp_path / "one", tmp_path / "many"
    one_w, many_w = RotatingMsgpackWriter(str(one_dir), "t"), RotatingMsgpackWriter(str(many_dir), "t")
    one, many = TraceWriter(one_w), TraceWriter(many_w)
    calls = []

    def plain(event, **fields):
        calls.append((event, fields))
        one(event, **fields)

    fire_rows([on_event(plain), many], "due", rows)
    fire_rows([on_event(plain), many], "idle", rows)  # not a trace event: written by neither
    one_w.close()
    many_w.close()

    def records(d):
        [f] = os.listdir(d)
        return list(msgpack.Unpacker(open(d / f, "rb"), raw=False))

    assert records(many_dir) == records(one_dir)
    assert records(many_dir) == [[2, "due", *rows[0]], [2, "due", "timer", 0, "T2", "ID2", "", 0, 5, 20, 0]]
    assert [c[1] for c in calls[:2]] == [dict(zip(EVENT_FIELDS, r, strict=True)) for r in rows]


def test_trace_reader_takes_v1_maps_v2_arrays_and_a_torn_tail(tmp_path):
    """Files written before trace format v2 (one map per event) stay readable next to v2 arrays,
    whatever the batch size (the writer drops the outer array header of 1, 3 or 5 bytes)."""
    import msgpack

    v1 = {"v": 1, "event": "delivered", "kind": "level", "level": 2, "topic": "T", "msgId": "M", "uniqKey": "U",
          "bornTs": 1, "storeTs": 2, "dueTs": 3, "deliveredTs": 4}
    w = RotatingMsgpackWriter(str(tmp_path), "t")
    w.write(v1)
    trace = TraceWriter(w)
    for n in (1, 15, 16, 70000):
        trace.many("delivered", [("timer", 0, "T", f"M{i}", "U", 1, 2, 3, 4) for i in range(n)])
    w.close()
    [f] = os.listdir(tmp_path)
    data = (tmp_path / f).read_bytes()
    rows = list(readers.trace_rows(data + msgpack.packb([2, "due"])[:-1]))
    assert len(rows) == 1 + 1 + 15 + 16 + 70000
    assert rows[0] == ("delivered", "level", 2, "T", "M", "U", 1, 2, 3, 4)
    assert rows[1] == ("delivered", "timer", 0, "T", "M0", "U", 1, 2, 3, 4)
    assert rows[-1] == ("delivered", "timer", 0, "T", "M69999", "U", 1, 2, 3, 4)


def test_a_column_batch_is_one_v3_record_that_reads_back_as_the_rows_it_stands_for(tmp_path):
    """The delay-level drain hands events over column by column (scheduler.events.EventColumns):
    the trace writer packs the run as ONE v3 record; the reader yields the same rows the columns
    stand for (msgIds formatted from prefix + offset, bytes / None uniq keys as text) and a
    plain listener still gets one keyword call per event. A record whose columns do not line up,
    and a torn one, are skipped without losing the records before them."""
    import msgpack

    from scheduler.events import EVENT_FIELDS, EventColumns, fire_columns, on_event

    prefix = "7F00000100002A9F"
    cols = EventColumns("level", 2, prefix, ["T1", "T2", "T1"], [0, 4096, 0xABCDEF012], [b"U1", None, "U3"],
                        [1, 2, 3], [10, 20, 30], [100, 200, 300], 999)
    expected = [("level", 2, "T1", prefix + "0000000000000000", "U1", 1, 10, 100, 999),
                ("level", 2, "T2", prefix + "0000000000001000", "", 2, 20, 200, 999),
                ("level", 2, "T1", prefix + "0000000ABCDEF012", "U3", 3, 30, 300, 999)]
    assert cols.rows() == expected
    w = RotatingMsgpackWriter(str(tmp_path), "t")
    trace, calls = TraceWriter(w), []
    fire_columns([trace, on_event(lambda event, **f: calls.append((event, f)))], "delivered", cols)
    fire_columns([trace], "idle", cols)  # not a trace event
    per = EventColumns("level", 1, prefix, ["T"], [7], [b"U"], [1], [2], [3], [4])  # deliveredTs per message
    fire_columns([trace], "due", per)
    w.write([3, "due", "level", 1, prefix, ["T"], [1, 2], [b"U"], [1], [2], [3], 0])  # misaligned columns
    w.close()
    [f] = os.listdir(tmp_path)
    data = (tmp_path / f).read_bytes()
    records = list(msgpack.Unpacker(open(tmp_path / f, "rb"), raw=False))
    assert len(records) == 3 and records[0][0] == 3 and records[0][1] == "delivered"
    rows = list(readers.trace_rows(data + msgpack.packb([3, "due"])[:-1]))
    assert rows == [("delivered", *r) for r in expected] + [("due", "level", 1, "T", prefix + "0000000000000007",
                                                              "U", 1, 2, 3, 4)]
    assert calls == [("delivered", dict(zip(EVENT_FIELDS, r, strict=True))) for r in expected]


async def test_sliced_collection_render_and_export_equal_the_one_piece_ones(tmp_path):
    from server.observability.registry import Sample, collect_sliced, render_prometheus_sliced

    reg = Registry()
    for i in range(1200):
        reg.counter("delaymq_put_messages_total", {"topic": f"T{i}"}).inc(i)
    h = reg.histogram("delaymq_schedule_lateness_ms", {"level": "1"}, bounds=(1, 10))
    h.observe(5)
    reg.add_collector(lambda: (Sample("delaymq_consumer_lag", "gauge", {"group": f"G{i}", "topic": "T"}, float(i))
                               for i in range(1500)))
    sliced = await collect_sliced(reg, slice_n=100)
    assert sliced == list(reg.collect()) and len(sliced) == 2701
    assert await render_prometheus_sliced(sliced, slice_n=100) == render_prometheus(reg.collect())
    one, two = (RotatingMsgpackWriter(str(tmp_path / d), "metrics") for d in ("one", "two"))
    MetricsExporter(reg, one, clock=lambda: 1.0).export_once()
    assert await MetricsExporter(reg, two, clock=lambda: 1.0).export_sliced() == 2701
    [f1], [f2] = os.listdir(tmp_path / "one"), os.listdir(tmp_path / "two")
    assert (tmp_path / "one" / f1).read_bytes() == (tmp_path / "two" / f2).read_bytes()


async def test_the_metrics_page_leaves_the_registry_lag_collector_unrun_the_export_runs_it():
    """The /metrics page has its own lag family (rocketmq_consumer_lag_messages): the registry's declared
    delaymq_consumer_lag collector is not run for it (it walks every topic@group); the export still gets it."""
    from server.observability import prometheus
    from server.observability.registry import Sample, collect_sliced
    from server.observability.telemetry import CONSUMER_LAG

    runs = []

    def lags():
        runs.append(1)
        return [Sample(CONSUMER_LAG, "gauge", {"group": "G", "topic": "T"}, 4.0)]

    reg = Registry()
    reg.counter("delaymq_task_restarts_total", {"task": "t"}).inc(2)
    reg.counter("delaymq_put_messages_total", {"topic": "T"}).inc(1)  # translated: not on the page as is
    reg.add_collector(lags, provides=frozenset({CONSUMER_LAG}))
    reg.add_collector(lambda: [Sample("delaymq_schedule_pending", "gauge", {"level": "1"}, 3.0),
                               Sample("delaymq_schedule_quarantined_total", "counter", {"stage": "s"}, 1.0)])
    for fams in (prometheus._registry_families(reg), await prometheus._registry_families_sliced(reg)):
        assert {f.name: [s.value for s in f.samples] for f in fams} == {
            "delaymq_task_restarts_total": [2.0], "delaymq_schedule_quarantined_total": [1.0]}
    assert runs == []
    exported = await collect_sliced(reg)
    assert runs == [1] and [s.value for s in exported if s.name == CONSUMER_LAG] == [4.0]
    assert {s.name for s in exported} == {"delaymq_task_restarts_total", "delaymq_put_messages_total", CONSUMER_LAG,
                                         "delaymq_schedule_pending", "delaymq_schedule_quarantined_total"}
