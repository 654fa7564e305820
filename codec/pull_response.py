"""PULL_MESSAGE responses (PullMessageResponseHeader), encoded straight to frame pieces.

A pull's answer carries the same four ext fields every time (suggestWhichBrokerId "0",
nextBeginOffset, minOffset, maxOffset), the store's status name as remark and the message slices as
body. `pull_response_frame` writes that frame without a RemotingCommand or an extFields dict:
`b"".join` of its pieces is exactly `encode_frame_bytes` of `request.response(code, remark,
{"suggestWhichBrokerId": "0", "nextBeginOffset", "minOffset", "maxOffset"}, body)`
(tests/codec/test_pull_response.py), in the ROCKETMQ binary form or the JSON form the request came
in. Body slices are passed through uncopied, as `encode_frame` does. `pull_response_frame_reference` is that
generic path, the maintained slow reference the test compares with (nothing hot calls it).
"""

from __future__ import annotations

import struct

from codec.buffers import BytesLike
from codec.cache import BoundedCache
from codec.codes import BROKER_VERSION, RPC_TYPE_RESPONSE, SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RequestCode
from codec.command import RemotingCommand, _json_dumps, java_int, rocketmq_head
from codec.frame import encode_frame_bytes

_RMQ_HEAD = rocketmq_head(ext_length=False)
_RMQ_FIXED = _RMQ_HEAD.size - 8  # the header's part of _RMQ_HEAD (without the frame's two words)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def _field(key: str) -> bytes:
    kb = key.encode()
    return _I16.pack(len(kb)) + kb


_SUGGEST = _field("suggestWhichBrokerId") + _I32.pack(1) + b"0"
_NEXT, _MIN, _MAX = _field("nextBeginOffset"), _field("minOffset"), _field("maxOffset")
_EXT_FIXED = len(_SUGGEST) + len(_NEXT) + len(_MIN) + len(_MAX) + 12  # without the three values

_JSON = ('{"code":%d,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"%d","minOffset":"%d",'
         '"maxOffset":"%d"},"flag":' + str(RPC_TYPE_RESPONSE) + ',"language":"JAVA","opaque":%d,"remark":%s,'
         '"serializeTypeCurrentRPC":"JSON","version":' + str(BROKER_VERSION) + '}')

# remark -> (JSON literal, UTF-8 bytes); the remarks are the store's few status names
_REMARKS: BoundedCache[str, tuple[str, bytes]] = BoundedCache("pull_response.remark", 64)


def _remark(remark: str) -> tuple[str, bytes]:
    r = _REMARKS.get(remark)
    if r is None:
        r = _REMARKS.remember(remark, (_json_dumps(remark), remark.encode("utf-8", "replace")))
    return r


def pull_response_frame(opaque: int, serialize_type: int, code: int, remark: str, next_begin_offset: int,
                        min_offset: int, max_offset: int, body: list[BytesLike], body_len: int | None = None) -> list[BytesLike]:
    """Frame pieces (length prefix first, then the header, then the non-empty body slices) of the
    response to a pull with `opaque` and `serialize_type`; `body` is a list of bytes-likes, `body_len`
    their total size in bytes when the caller knows it (the store's lookup counts it)."""
    parts = list(filter(len, body))
    if body_len is None:
        body_len = sum(p.nbytes if type(p) is memoryview else len(p) for p in parts)
    rjson, rbytes = _remark(remark)
    if serialize_type != SERIALIZE_ROCKETMQ:
        header = (_JSON % (code, next_begin_offset, min_offset, max_offset, opaque, rjson)).encode("utf-8", "replace")
        hlen = len(header)
        return [_I32.pack(4 + hlen + body_len) + _I32.pack((SERIALIZE_JSON << 24) | hlen) + header, *parts]
    n = b"%d" % next_begin_offset
    lo = b"%d" % min_offset
    hi = b"%d" % max_offset
    rlen = len(rbytes)
    elen = _EXT_FIXED + len(n) + len(lo) + len(hi)
    hlen = _RMQ_FIXED + rlen + 4 + elen
    # java_int(opaque) without a call for the usual opaque (already a Java int)
    op = opaque if -0x80000000 <= opaque <= 0x7FFFFFFF else java_int(opaque)
    head = b"".join((
        _RMQ_HEAD.pack(4 + hlen + body_len, (SERIALIZE_ROCKETMQ << 24) | hlen, code, 0, BROKER_VERSION,
                       op, RPC_TYPE_RESPONSE, rlen),
        rbytes, _I32.pack(elen), _SUGGEST, _NEXT, _I32.pack(len(n)), n, _MIN, _I32.pack(len(lo)), lo,
        _MAX, _I32.pack(len(hi)), hi))
    return [head, *parts]


def pull_response_frame_reference(opaque: int, serialize_type: int, code: int, remark: str, next_begin_offset: int,
                                  min_offset: int, max_offset: int, body: list[BytesLike]) -> bytes:
    """`b"".join(pull_response_frame(...))` the generic way: a RemotingCommand response and `encode_frame_bytes`."""
    req = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=opaque, serialize_type=serialize_type)
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(next_begin_offset), "minOffset": str(min_offset),
           "maxOffset": str(max_offset)}
    return encode_frame_bytes(req.response(code=code, remark=remark, ext_fields=ext, body=body))
