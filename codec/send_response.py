"""SUCCESS responses to sends (SendMessageResponseHeader), encoded straight to frame bytes.

A pipelined run of sends is answered with frames that differ only in opaque, msgId, queueId,
queueOffset and the serialize type (the request's). `SendResponseFrames.frame` writes one such frame
without a RemotingCommand or an extFields dict: the bytes are exactly `encode_frame_bytes` of
`cmd.response(SUCCESS, None, {"msgId", "queueId", "queueOffset", *extra})` (tests/codec/test_send_response.py),
in the ROCKETMQ binary form or the JSON form the request came in. `frame_reference` is that generic path,
the maintained slow reference the test compares with (nothing hot calls it).
"""

from __future__ import annotations

import struct

from codec.codes import (
    BROKER_VERSION,
    RPC_TYPE_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    RequestCode,
    ResponseCode,
)
from codec.command import FRAME_PREFIX_FIELDS, RemotingCommand, _json_dumps, java_int, rocketmq_head
from codec.frame import encode_frame_bytes

_RMQ_HEAD = rocketmq_head(ext_length=True)
_RMQ_FIXED = _RMQ_HEAD.size - 8  # the header's part of _RMQ_HEAD (without the frame's two words)
_PREFIX = struct.Struct(">" + FRAME_PREFIX_FIELDS)
_LEN32 = tuple(struct.pack(">i", n) for n in range(256))  # an ext value's length word (values are short)
_I32 = struct.Struct(">i")


def _key_head(key: str) -> bytes:
    kb = key.encode()
    return struct.pack(">h", len(kb)) + kb


class SendResponseFrames:
    """Encoder of SUCCESS send responses for one broker: `msg_id_prefix` is the offset msgId's host
    part (hex of store host and port), `extra` the ext fields every response carries after
    queueOffset (MSG_REGION, TRACE_ON)."""

    __slots__ = ("_prefix", "_extra", "_mid_head", "_qid_key", "_qoff_key", "_tail", "_ext_fixed", "_json")

    def __init__(self, msg_id_prefix: str, extra: dict[str, str]) -> None:
        self._prefix = msg_id_prefix
        self._extra = dict(extra)
        self._mid_head = _key_head("msgId")
        self._qid_key = _key_head("queueId")
        self._qoff_key = _key_head("queueOffset")
        self._tail = b"".join(_key_head(k) + _I32.pack(len(v.encode())) + v.encode() for k, v in extra.items())
        # the extFields bytes that do not depend on the values of msgId, queueId, queueOffset
        self._ext_fixed = len(self._mid_head) + len(self._qid_key) + len(self._qoff_key) + 12 + len(self._tail)
        tail_json = "".join(f",{_json_dumps(k)}:{_json_dumps(v)}" for k, v in extra.items())
        self._json = ('{"code":0,"extFields":{"msgId":"%s","queueId":"%d","queueOffset":"%d"' + tail_json.replace("%", "%%")
                      + '},"flag":%d,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}')

    def msg_id(self, phys_offset: int) -> str:
        return f"{self._prefix}{phys_offset:016X}"

    def frame(self, opaque: int, serialize_type: int, phys_offset: int, queue_id: int, queue_offset: int) -> bytes:
        """The response frame (length prefix included) for one stored send."""
        mid = f"{self._prefix}{phys_offset:016X}".encode()
        if serialize_type != SERIALIZE_ROCKETMQ:
            header = (self._json % (mid.decode(), queue_id, queue_offset, RPC_TYPE_RESPONSE, opaque,
                                    BROKER_VERSION)).encode()
            hlen = len(header)
            return _PREFIX.pack(4 + hlen, (SERIALIZE_JSON << 24) | hlen) + header
        q = b"%d" % queue_id
        o = b"%d" % queue_offset
        elen = self._ext_fixed + len(mid) + len(q) + len(o)
        hlen = _RMQ_FIXED + elen
        # java_int(opaque) without a call for the usual opaque (already a Java int)
        op = opaque if -0x80000000 <= opaque <= 0x7FFFFFFF else java_int(opaque)
        return b"".join((
            _RMQ_HEAD.pack(4 + hlen, (SERIALIZE_ROCKETMQ << 24) | hlen, 0, 0, BROKER_VERSION,
                           op, RPC_TYPE_RESPONSE, 0, elen),
            self._mid_head, _LEN32[len(mid)], mid, self._qid_key, _LEN32[len(q)], q,
            self._qoff_key, _LEN32[len(o)], o, self._tail))

    def frame_reference(self, opaque: int, serialize_type: int, phys_offset: int, queue_id: int,
                        queue_offset: int) -> bytes:
        """`frame` the generic way: a RemotingCommand response encoded by `encode_frame_bytes`."""
        req = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=opaque, serialize_type=serialize_type)
        ext = {"msgId": self.msg_id(phys_offset), "queueId": str(queue_id), "queueOffset": str(queue_offset),
               **self._extra}
        return encode_frame_bytes(req.response(ResponseCode.SUCCESS, None, ext))
