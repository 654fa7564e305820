"""SEND_MESSAGE_V2 requests (SendMessageRequestHeaderV2, JSON header) written from a per-(producer group, topic)
template: the proxy's hot path (issue 24 item 3).

A proxied send's header differs from the last one to the same topic only in queueId, sysFlag,
bornTimestamp, the properties text and the opaque. `SendRequestTemplate` holds the JSON header's constant
parts, cut once from the general encoder's own output (`encode_json_header` of the request with marker
values), so the layout stays declared where it is (codec.codes' V2 letters, codec.command's header); `head`
splices the per-message fields in (the properties text escaped by orjson, exactly as the general encoder
escapes it) and `frame_pieces` adds the opaque, known only when a connection writes the request.

The bytes are exactly `encode_frame` of `request_reference` (tests/codec/test_send_request.py); what the
template cannot write as the general encoder would (a lone surrogate in the properties, which orjson refuses)
makes `head` return None, and the caller takes the general path.
"""

from __future__ import annotations

import struct

import orjson

from codec.buffers import BytesLike
from codec.codes import BROKER_VERSION, DEFAULT_TOPIC, SERIALIZE_JSON, RequestCode
from codec.codes import SendMessageRequestHeaderV2 as V2
from codec.command import FRAME_PREFIX_FIELDS, RemotingCommand, encode_json_header

SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)
_PREFIX = struct.Struct(">" + FRAME_PREFIX_FIELDS)
_JSON_WORD = SERIALIZE_JSON << 24
_dumps = orjson.dumps
# the per-message fields, in the order the header writes them, as marker values the template is cut at
_VARIABLE = (V2.queueId, V2.sysFlag, V2.bornTimestamp, V2.properties)
_MARK = "\x00"  # no topic or group name holds it (the template refuses one that does)
_OPAQUE_MARK = -0x7FFFFFF1  # an opaque no writer uses for a template (cut out of the reference's bytes)


def request_reference(producer_group: str, topic: str, default_queue_nums: int, queue_id: int, sys_flag: int,
                      born_ms: int, properties: str, body: bytes = b"", opaque: int = 0) -> RemotingCommand:
    """The request the general way (what the proxy sent before the template; the tests' reference)."""
    ext = {V2.producerGroup: producer_group, V2.topic: topic, V2.defaultTopic: DEFAULT_TOPIC,
           V2.defaultTopicQueueNums: str(default_queue_nums), V2.queueId: str(queue_id),
           V2.sysFlag: str(sys_flag), V2.bornTimestamp: str(born_ms), V2.flag: "0",
           V2.properties: properties, V2.reconsumeTimes: "0", V2.unitMode: "false", V2.batch: "false"}
    return RemotingCommand(SEND_MESSAGE_V2, opaque=opaque, version=BROKER_VERSION, ext_fields=ext, body=body)


def _cut_tail() -> bytes:
    """What follows the opaque's digits in every request header (serialize type, version)."""
    header = encode_json_header(request_reference("g", "t", 1, 0, 0, 0, "", opaque=_OPAQUE_MARK))
    return header[header.index(b"%d" % _OPAQUE_MARK) + len(b"%d" % _OPAQUE_MARK):]


TAIL = _cut_tail()


class SendRequestTemplate:
    """The constant parts of one (producer group, topic)'s SEND_MESSAGE_V2 JSON header."""

    __slots__ = ("_parts",)

    def __init__(self, producer_group: str, topic: str, default_queue_nums: int) -> None:
        if _MARK in producer_group or _MARK in topic:
            raise ValueError("a NUL in a producer group or topic name")
        ref = request_reference(producer_group, topic, default_queue_nums, 0, 0, 0, "", opaque=_OPAQUE_MARK)
        for key in _VARIABLE:
            ref.ext_fields[key] = _MARK + key
        header = encode_json_header(ref)
        parts: list[bytes] = []
        rest = header
        for key in _VARIABLE:  # each marker value, quotes included, is where a field goes
            before, _, rest = rest.partition(_dumps(_MARK + key))
            parts.append(before)
        before, _, tail = rest.partition(b"%d" % _OPAQUE_MARK)
        if len(parts) != len(_VARIABLE) or tail != TAIL or not before:
            raise ValueError("the general encoder's header does not have the template's shape")
        parts.append(before)
        self._parts = tuple(parts)

    def head(self, queue_id: int, sys_flag: int, born_ms: int, properties: str) -> bytes | None:
        """The header up to the opaque's digits; None when the properties text cannot be written as the
        general encoder would write it (a lone surrogate: take the general path)."""
        try:
            props = _dumps(properties)
        except TypeError:  # orjson.JSONEncodeError
            return None
        p = self._parts
        return b'%s"%d"%s"%d"%s"%d"%s%s%s' % (p[0], queue_id, p[1], sys_flag, p[2], born_ms, p[3], props, p[4])


def frame_pieces(head: bytes, opaque: int, body: BytesLike) -> list[BytesLike]:
    """The request's frame (length prefix first, the body uncopied) for a connection's writelines."""
    header = b"%s%d%s" % (head, opaque, TAIL)
    hlen = len(header)
    n = len(body)
    if n:
        return [_PREFIX.pack(4 + hlen + n, _JSON_WORD | hlen) + header, body]
    return [_PREFIX.pack(4 + hlen, _JSON_WORD | hlen) + header]
