"""Fuzz targets: each takes raw bytes; any exception other than CodecError is a crash.

Kept free of atheris so seeds and targets can be exercised (and imported) without it.
"""

from __future__ import annotations

from codec import admin_bodies, bodies, namesrv_bodies
from codec.batch import BatchItem, decode_batch, encode_batch
from codec.command import (
    RemotingCommand,
    decode_json_header,
    decode_json_header_reference,
    decode_rocketmq_header,
    encode_rocketmq_header,
)
from codec.delivery_batch import build_delivery_batch
from codec.errors import CodecError
from codec.frame import FrameDecoder, encode_frame_bytes
from codec.msgid import decode_offset_msg_id
from codec.properties import parse_properties
from codec.put_run import PutRun, put_run_reference
from codec.record import (
    MAX_PROPERTIES_BYTES,
    MessageRecord,
    decode_record,
    encode_message_bytes,
    encode_record,
    iter_records,
    verify_record,
)
from codec.record_rewrite import build_deliveries, patch_append_fields, rewrite_for_delivery
from codec.sql92 import Selector, SelectorError
from codec.timer_rewrite import TimerDelivery, build_timer_deliveries, timer_delivery_reference, timer_put_run


def _guard(fn, *args) -> None:
    try:
        fn(*args)
    except CodecError:
        pass


def frame(data: bytes) -> None:
    """FrameDecoder over the input split into chunks whose sizes come from the first bytes."""
    if len(data) < 2:
        return
    sizes, rest = data[:2], data[2:]
    dec = FrameDecoder(max_frame=(1 << 16) if sizes[0] & 1 else (16 << 20))
    step = max(1, sizes[1])
    try:
        for i in range(0, len(rest), step):
            for cmd in dec.feed(rest[i:i + step]):
                assert isinstance(cmd, RemotingCommand)
    except CodecError:
        return
    assert dec.buffered() <= len(rest)


def json_header(data: bytes) -> None:
    """The fast decoder (orjson) and the reference (stdlib json) give the same command or both CodecError."""
    try:
        fast = decode_json_header(data)
    except CodecError:
        fast = None
    try:
        ref = decode_json_header_reference(data)
    except CodecError:
        ref = None
    assert fast == ref, (fast, ref)


def rocketmq_header(data: bytes) -> None:
    try:
        cmd = decode_rocketmq_header(data)
    except CodecError:
        return
    # whatever decodes must re-encode (the response path) and decode to the same fields
    back = decode_rocketmq_header(encode_rocketmq_header(cmd))
    assert (back.code, back.opaque, back.ext_fields) == (cmd.code, cmd.opaque, cmd.ext_fields)


def record(data: bytes) -> None:
    _guard(decode_record, data)
    _guard(lambda: list(iter_records(data)))
    _guard(verify_record, data, 0)
    try:
        size = verify_record(data, 0)
    except CodecError:
        return
    if size:
        _guard(rewrite_for_delivery, memoryview(data)[:size], "RT", 1, ("10.0.0.1", 10911), 3)


def _records(data: bytes) -> list[bytes | None]:
    """The input cut into records: each 2-byte big-endian length takes that many bytes (0 = None)."""
    out: list[bytes | None] = []
    pos = 0
    while pos + 2 <= len(data):
        n = int.from_bytes(data[pos:pos + 2], "big")
        out.append(data[pos + 2:pos + 2 + n] if n else None)
        pos += 2 + n
    return out


def delivery(data: bytes) -> None:
    """Differential: the one-buffer delivery batch (the drain's fast path) and the per-record reference
    (build_deliveries) agree on every input: the same records, or both refuse with CodecError."""
    raws = _records(data)
    try:
        ref = build_deliveries(raws)
    except CodecError:
        ref = None
    try:
        fast = build_delivery_batch(raws)
    except CodecError:
        fast = None
    assert (ref is None) == (fast is None), "one path refused what the other accepted"
    if ref is None or fast is None:
        return
    kept = [i for i, d in enumerate(ref) if d is not None]
    assert fast.source == kept
    for j, i in enumerate(kept):
        d = ref[i]
        assert d is not None
        record, topic, qid, tags_code, keys, uniq = d
        assert fast.record(j) == record and fast.dests[j] == (topic, qid)
        assert (fast.tags_codes[j], fast.keys[j], fast.uniqs[j]) == (tags_code, keys, uniq)
    # laid piece by piece, the run is what codec.put_run's one-record-at-a-time reference makes of its records
    run = put_run_reference([fast.record(j) for j in range(len(fast))], fast.dests, fast.tags_codes, fast.keys)
    assert [getattr(fast, c) for c in PutRun.__slots__] == [getattr(run, c) for c in PutRun.__slots__]


def _timer_one(raw, roll, cancel):
    return build_timer_deliveries([raw], [roll], [1795474679500], [1795474670000], 1795474679512, cancel)[0]


def _timer_outcome(fn, *args):
    try:
        return fn(*args)
    except (CodecError, ValueError):  # malformed record; a non-numeric TIMER_ROLL_TIMES
        return "refused"


def _timer_norm(got):
    if isinstance(got, TimerDelivery):
        rec, topic, qid, tcode, keys = got.record, got.topic, got.queue_id, got.tags_code, got.keys
        return bytes(rec), topic, qid, tcode, tuple(k.decode() if isinstance(k, bytes) else k for k in keys)
    return got


def timer(data: bytes) -> None:
    """Differential: the timer wheel's dequeue conversion (build_timer_deliveries, byte-level edits)
    and its dict-based reference (timer_delivery_reference) agree record by record: the same delivery
    or roll record, MISSING / SKIPPED / CANCELLED, or both refuse. A record's first byte says roll
    (odd) and whether its REAL_TOPIC+UNIQ_KEY is cancelled (& 2)."""
    for raw in _records(data):
        roll = bool(raw and raw[0] & 1)
        body = memoryview(raw[1:]) if raw else None
        cancel = {"Orders+" + "U" * 32} if raw and raw[0] & 2 else None
        fast = _timer_outcome(_timer_one, body, roll, cancel)
        ref = _timer_outcome(timer_delivery_reference, body, roll, 1795474679500, 1795474670000, 1795474679512,
                             cancel)
        assert _timer_norm(fast) == _timer_norm(ref), (fast, ref)
        if isinstance(fast, TimerDelivery):  # the put run the putter hands the store, against put_run's reference
            run = timer_put_run([fast])
            want = put_run_reference([fast.record], [(fast.topic, fast.queue_id)], [fast.tags_code], [fast.keys])
            assert [getattr(run, c) for c in PutRun.__slots__] == [getattr(want, c) for c in PutRun.__slots__]


def rewrite(data: bytes) -> None:
    """A record that verifies can be rewritten for delivery and patched at append; the copy verifies too."""
    try:
        size = verify_record(data, 0)
    except CodecError:
        return
    if not size:
        return
    try:
        out = rewrite_for_delivery(memoryview(data)[:size], "RealTopic", 3, ("10.0.0.1", 10911), 2)
    except CodecError:
        return
    patch_append_fields(out, 0, 7, 1 << 40, 1_700_000_000_000)
    assert verify_record(out, 0) == len(out)


def batch(data: bytes) -> None:
    _guard(decode_batch, data)


def heartbeat(data: bytes) -> None:
    _guard(bodies.parse_heartbeat, data)


def route(data: bytes) -> None:
    _guard(bodies.decode_topic_route, data)
    _guard(bodies.decode_lock_batch_request, data)
    _guard(bodies.decode_kv_table, data)


def admin(data: bytes) -> None:
    for decode in (admin_bodies.decode_topic_stats, admin_bodies.decode_consume_stats,
                   admin_bodies.decode_consumer_connection, admin_bodies.decode_group_list):
        _guard(decode, data)


def namesrv(data: bytes) -> None:
    """The name server's decoders: REGISTER_BROKER in both forms (first byte picks), DataVersion, ClusterInfo.
    What decodes re-encodes and decodes to the same topics."""
    if not data:
        return
    compressed, rest = bool(data[0] & 1), data[1:]
    try:
        body = namesrv_bodies.decode_register_body(rest, compressed, max_inflated=1 << 20)
    except CodecError:
        body = None
    if body is not None and all(" " not in n and n for n in body.topic_configs):
        back = namesrv_bodies.decode_register_body(namesrv_bodies.encode_register_body(body, compressed), compressed)
        assert set(back.topic_configs) == set(body.topic_configs)
    _guard(namesrv_bodies.DataVersion.decode, rest)
    _guard(namesrv_bodies.decode_cluster_info, rest)


def sql92(data: bytes) -> None:
    """Differential: a SQL92 selector (the input up to its first NUL) either is refused with SelectorError or,
    on the properties after the NUL, the fast evaluator (record bytes) agrees with the reference (decoded map)."""
    expression, _, props = data.partition(b"\x00")
    try:
        sel = Selector(expression.decode("utf-8", "replace"))
    except SelectorError:
        return
    props = props[:MAX_PROPERTIES_BYTES]
    rec = encode_message_bytes("T", b"", 0, 0, 0, 0, ("127.0.0.1", 1), ("127.0.0.1", 2), 0, props)
    fast, ref = sel.matches_record(rec), sel.matches_properties(parse_properties(props))
    if fast != ref:
        raise AssertionError(f"fast {fast} != reference {ref} for {sel.expression!r} on {props!r}")


def misc(data: bytes) -> None:
    parse_properties(data)  # never raises
    _guard(decode_offset_msg_id, data.decode("latin-1"))


TARGETS = {"frame": frame, "json_header": json_header, "rocketmq_header": rocketmq_header, "record": record,
           "batch": batch, "heartbeat": heartbeat, "route": route, "admin": admin, "misc": misc,
           "delivery": delivery, "rewrite": rewrite, "namesrv": namesrv, "timer": timer, "sql92": sql92}


def seeds(name: str) -> list[bytes]:
    """Valid inputs to start from, so the fuzzer mutates real structure."""
    cmd = RemotingCommand(code=310, opaque=7, remark="r", ext_fields={"a": "G", "b": "T", "e": "1"}, body=b"xyz")
    rec = encode_record(MessageRecord(topic="T1", body=b"hello", born_host=("10.0.0.5", 5000),
                                      store_host=("::1", 10911), properties={"TAGS": "TagA", "DELAY": "3"}))
    if name == "frame":
        cmd1 = RemotingCommand(**{**{f: getattr(cmd, f) for f in cmd.__slots__}, "serialize_type": 1})
        return [b"\x01\x07" + encode_frame_bytes(cmd) + encode_frame_bytes(cmd1)]
    if name == "json_header":
        return [encode_frame_bytes(cmd)[8:-3]]
    if name == "rocketmq_header":
        return [encode_rocketmq_header(cmd)]
    if name in ("record", "rewrite"):
        return [bytes(rec)]
    if name == "delivery":
        sched = encode_record(MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"due", properties={
            "REAL_TOPIC": "Orders", "REAL_QID": "2", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U" * 32,
            "DELAY": "3"}))
        return [b"".join(len(r).to_bytes(2, "big") + bytes(r) for r in (sched, rec)) + b"\x00\x00"]
    if name == "timer":
        unit = encode_record(MessageRecord(topic="rmq_sys_wheel_timer", body=b"due", properties={
            "REAL_TOPIC": "Orders", "REAL_QID": "2", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U" * 32,
            "TIMER_DELIVER_MS": "1795474679500", "TIMER_ROLL_TIMES": "1"}))
        return [b"".join((len(unit) + 1).to_bytes(2, "big") + bytes([flag]) + bytes(unit) for flag in (0, 1, 2))
                + b"\x00\x00"]
    if name == "batch":
        return [encode_batch([BatchItem(0, b"a", "UNIQ_KEY\x01X"), BatchItem(1, b"", "")])]
    if name == "heartbeat":
        return [b'{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":1,"messageModel":"CLUSTERING",'
                b'"subscriptionDataSet":[{"topic":"T","subString":"a||b","subVersion":"1","tagsSet":["a"]}]}],'
                b'"producerDataSet":[{"groupName":"P"}]}']
    if name == "route":
        return [b'{"brokerDatas":[{"brokerAddrs":{0:"1.2.3.4:1"},"brokerName":"b","cluster":"c"}],'
                b'"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"writeQueueNums":4}]}']
    if name == "admin":
        return [b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:{"lastUpdateTimestamp":5,'
                b'"maxOffset":7,"minOffset":2}},"topicPutTps":0.0}']
    if name == "namesrv":
        body = namesrv_bodies.RegisterBrokerBody(namesrv_bodies.DataVersion(3, 17), {
            "T": namesrv_bodies.TopicConfigData("T", 4, 4, 6), "TBW102": namesrv_bodies.TopicConfigData("TBW102", 8, 8, 7)})
        return [b"\x00" + namesrv_bodies.encode_register_body(body), b"\x01" + namesrv_bodies.encode_register_body(body, True),
                b'\x00{"brokerAddrTable":{"b":{"brokerAddrs":{0:"1.2.3.4:1"},"brokerName":"b","cluster":"c"}},'
                b'"clusterAddrTable":{"c":["b"]}}',
                b'\x00{"brokerAddrTable":",:kme"}',  # found by the fuzzer: a table that is not an object
                b'\x00{"clusterAddrTable":[1]}']
    if name == "sql92":
        return [b"region = 'eu' AND amount BETWEEN 10 AND 20 OR TAGS IN ('a', 'b')\x00region\x01eu\x02amount\x0115",
                b"NOT (a CONTAINS 'x') AND b > 1.5E1 AND c IS NULL\x00a\x01yx\x02b\x0116\x02b\x01"]
    return [b"TAGS\x01a\x02KEYS\x01b c", b"0A00000100002A9F0000000000000F3E"]
