"""Bare SUCCESS responses (code 0, no remark, no extFields, no body) encoded straight to frame bytes.

What UPDATE_CONSUMER_OFFSET and other acknowledgements answer; a pipelined run of them differs only in
opaque and serialize type. `ok_frame(opaque, serialize_type)` is exactly
`encode_frame_bytes(request.response())` (tests/codec/test_ack_response.py), in the ROCKETMQ binary form
or the JSON form the request came in. `ok_frame_reference` is that generic path, the maintained slow
reference the test compares with (nothing hot calls it).
"""

from __future__ import annotations

import struct

from codec.codes import BROKER_VERSION, RPC_TYPE_RESPONSE, SERIALIZE_ROCKETMQ, RequestCode
from codec.command import FRAME_PREFIX_FIELDS, RemotingCommand, java_int, rocketmq_head
from codec.frame import encode_frame_bytes

_RMQ = rocketmq_head(ext_length=True)
_RMQ_HLEN = _RMQ.size - 8
_RMQ_LEN = 4 + _RMQ_HLEN
_RMQ_WORD = (SERIALIZE_ROCKETMQ << 24) | _RMQ_HLEN
_JSON_HEAD = f'{{"code":0,"flag":{RPC_TYPE_RESPONSE},"language":"JAVA","opaque":'
_JSON_TAIL = f',"serializeTypeCurrentRPC":"JSON","version":{BROKER_VERSION}}}'
_PREFIX = struct.Struct(">" + FRAME_PREFIX_FIELDS)


def ok_frame(opaque: int, serialize_type: int) -> bytes:
    if serialize_type == SERIALIZE_ROCKETMQ:
        # java_int(opaque) without a call for the usual opaque (already a Java int)
        op = opaque if -0x80000000 <= opaque <= 0x7FFFFFFF else java_int(opaque)
        return _RMQ.pack(_RMQ_LEN, _RMQ_WORD, 0, 0, BROKER_VERSION, op, RPC_TYPE_RESPONSE, 0, 0)
    header = f"{_JSON_HEAD}{opaque}{_JSON_TAIL}".encode()
    return _PREFIX.pack(4 + len(header), len(header)) + header


def ok_frame_reference(opaque: int, serialize_type: int) -> bytes:
    """`ok_frame` the generic way: `encode_frame_bytes(request.response())`."""
    req = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, opaque=opaque, serialize_type=serialize_type)
    return encode_frame_bytes(req.response())
