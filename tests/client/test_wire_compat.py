"""What our Producer puts on the wire for SEND_MESSAGE_V2 must match the Java 4.9.8 client's header."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from client import Message, Producer
from client.message import MessageQueue
from client.producer import retry_counts, send_message_header_v2
from codec.command import RemotingCommand
from codec.frame import FrameDecoder, encode_frame_bytes
from codec.properties import parse_properties
from server.header_parsers import parse_send
from server.headers import SEND_MESSAGE

GOLDEN_SEND = Path(__file__).resolve().parents[1] / "codec" / "golden" / "send_request.bin"
GOLDEN_RETRY_SEND = GOLDEN_SEND.with_name("send_retry_request.bin")

# remoting-protocol.md §6.2: a..k and m are always sent by DefaultMQProducerImpl.sendKernelImpl (null
# fields are skipped, booleans travel as "true"/"false"); 4.9.8 adds n (bname). l (maxReconsumeTimes)
# only appears on %RETRY% sends.
JAVA_V2_KEYS = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "n"}


class CapturingBroker:
    """A socket peer that serves one route and records every request it is sent."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.server: asyncio.Server | None = None
        self.addr = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = FrameDecoder()
        while data := await reader.read(65536):
            for cmd in dec.feed(data):
                self.requests.append(cmd)
                if cmd.is_oneway:
                    continue
                writer.write(encode_frame_bytes(self._answer(cmd)))

    def _answer(self, cmd):
        if cmd.code == 105:
            route = {"brokerDatas": [{"brokerAddrs": {"0": self.addr}, "brokerName": "broker-a",
                                      "cluster": "DefaultCluster"}], "filterServerTable": {},
                     "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 2,
                                     "topicSysFlag": 0, "writeQueueNums": 2}]}
            return cmd.response(0, body=json.dumps(route).encode())
        if cmd.code in (310, 320):
            return cmd.response(0, ext_fields={"msgId": "7F00000100002A9F0000000000000000", "queueId":
                                               cmd.ext_fields["e"], "queueOffset": "0",
                                               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
        return cmd.response(0)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_send_message_v2_header_keys_match_java_client():
    peer = CapturingBroker()
    await peer.start()
    try:
        async with Producer("PG_WIRE", peer.addr) as p:
            r = await p.send(Message("WireT", b"body", tags="TagA", keys="k1 k2"))
            await p.send_batch([Message("WireT", b"x"), Message("WireT", b"y")])
    finally:
        await peer.close()
    [send] = [c for c in peer.requests if c.code == 310]
    ext = send.ext_fields
    assert set(ext) == JAVA_V2_KEYS
    assert all(isinstance(v, str) for v in ext.values())
    assert (ext["a"], ext["b"], ext["c"], ext["d"], ext["k"], ext["m"], ext["n"]) == (
        "PG_WIRE", "WireT", "TBW102", "4", "false", "false", "broker-a")
    assert int(ext["g"]) > 1_600_000_000_000 and ext["j"] == "0" and ext["f"] == "0"
    props = parse_properties(ext["i"])
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["WAIT"] == "true"
    assert props["UNIQ_KEY"] == r.msg_id and len(r.msg_id) == 32
    assert send.body_bytes() == b"body" and send.language == "PYTHON" and send.serialize_type == 0
    [batch] = [c for c in peer.requests if c.code == 320]
    assert set(batch.ext_fields) == JAVA_V2_KEYS and batch.ext_fields["m"] == "true"
    heartbeats = [json.loads(c.body_bytes()) for c in peer.requests if c.code == 34]
    assert heartbeats and {"groupName": "PG_WIRE"} in heartbeats[0]["producerDataSet"]


def test_send_message_v2_header_is_the_java_clients_byte_for_byte():
    """For the fields of the SEND_MESSAGE_V2 the stock Java 4.9.7 producer sent (tests/codec/golden), our
    producer's header (codec's SendMessageRequestHeaderV2 letters) is the same extFields in the same
    order: put in the Java frame, it encodes to the captured bytes. The broker reads it into the record
    the long-name (SEND_MESSAGE) form of the same fields gives."""
    raw = GOLDEN_SEND.read_bytes()
    [java] = FrameDecoder().feed(raw)
    j = java.ext_fields
    ours = send_message_header_v2(group=j["a"], topic="GoldenTopic", mq=MessageQueue("GoldenTopic", "broker-a", 2),
                                  sys_flag=0, born_timestamp=int(j["g"]), flag=0, properties=j["i"], batch=False)
    assert list(ours.items()) == list(j.items())
    java.ext_fields = ours
    assert encode_frame_bytes(java) == raw
    long_form = {"producerGroup": j["a"], "topic": "GoldenTopic", "defaultTopic": "TBW102",
                 "defaultTopicQueueNums": "4", "queueId": "2", "sysFlag": "0", "bornTimestamp": j["g"], "flag": "0",
                 "properties": j["i"], "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
                 "bname": "broker-a"}
    record = SEND_MESSAGE.parse(long_form).__dict__
    assert parse_send(ours, True).__dict__ == SEND_MESSAGE.parse(ours, True).__dict__ == record
    assert record["queueId"] == 2 and record["bornTimestamp"] == int(j["g"]) and record["batch"] is False


def test_retry_send_header_is_the_java_clients_byte_for_byte():
    """A consumer's fallback re-send to %RETRY%<group> (captured from the stock Java 4.9.7 producer:
    RECONSUME_TIME 2 and MAX_RECONSUME_TIMES 16 set on the message): the producer moves the two counts
    into the header's j and l, l between k and m, and our header is the captured one byte for byte."""
    raw = GOLDEN_RETRY_SEND.read_bytes()
    [java] = FrameDecoder().feed(raw)
    j = java.ext_fields
    props = parse_properties(j["i"])
    assert (j["j"], j["l"]) == ("2", "16")
    topic = "%RETRY%GoldenGroup"
    ours = send_message_header_v2(j["a"], topic, MessageQueue(topic, "broker-a", int(j["e"])), 0, int(j["g"]), 0,
                                  j["i"], False, *retry_counts(topic, props))
    assert list(ours.items()) == list(j.items())
    java.ext_fields = ours
    assert encode_frame_bytes(java) == raw
    parsed = parse_send(ours, True)
    assert (parsed.reconsumeTimes, parsed.maxReconsumeTimes, parsed.topic) == (2, 16, topic)
    # the same counts on a plain topic are only properties: the header keeps j=0 and no l (sendKernelImpl)
    assert retry_counts("GoldenTopic", props) == (0, None)
