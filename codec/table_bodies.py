"""Whole-table bodies built from per-row fragments, so a table of 100,000 rows is serialised by joining
cached bytes (one memcpy) instead of re-encoding every row:

- TopicConfigSerializeWrapper (GET_ALL_TOPIC_CONFIG, and inside RegisterBrokerBody):
  `{"dataVersion":{...},"topicConfigTable":{"<name>":{TopicConfig},...}}`; a row's member is
  `"<name>":{"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"<name>",
  "topicSysFlag":0,"writeQueueNums":8}` (fastjson's field order, as codec.fastjson.dumps writes it).
- RegisterBrokerBody, plain: `{"filterServerList":[...],"topicConfigSerializeWrapper":<wrapper>}`; RocketMQ's
  compressed form (REGISTER_BROKER with `compressed=true`): a zlib (Deflater, BEST_COMPRESSION) stream of
  int32 BE length + DataVersion JSON, int32 topic count, per topic int32 length + `TopicConfig.encode("utf-8", "replace")`
  (`"<name> <readQueueNums> <writeQueueNums> <perm> <topicFilterType>"`), int32 length + filter server list
  JSON. (RocketMQ's RegisterBrokerBody.encode(true) / decode(data, true).)
- SubscriptionGroupWrapper: `{"dataVersion":{...},"forbiddenTable":{},"subscriptionGroupTable":{...}}`.
- TopicList: `{"topicList":["a","b"]}`.
- ConsumerOffsetSerializeWrapper (GET_ALL_CONSUMER_OFFSET): `{"dataVersion":{...},"offsetTable":{"topic@group":{0:5}}}`
  (queue ids bare, as fastjson writes a Map<Integer, Long>; codec.fastjson.loads_lenient reads it).

The fast member renderers cover names made of RocketMQ's topic/group characters (`^[%|a-zA-Z0-9_-]+$`,
never escaped in JSON); anything else goes through the JSON encoder. Text is encoded as Java's
String.getBytes(UTF_8) does (a lone surrogate becomes '?'), like codec.fastjson.dumps. `*_reference` functions are the
plain-dumps definitions the fast ones are tested against.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from codec.errors import CodecError
from codec.fastjson import dumps

_SAFE = re.compile(r"^[%|a-zA-Z0-9_\-.@]+$")
_I32 = struct.Struct(">i")
_q = json.JSONEncoder(ensure_ascii=False).encode


def is_plain_name(name: str) -> bool:
    """True if `name` needs no escaping in JSON (RocketMQ's topic and group characters)."""
    return _SAFE.match(name) is not None


def quote(name: str) -> str:
    """A JSON string literal of `name` (no escaping needed for RocketMQ's name characters)."""
    return f'"{name}"' if _SAFE.match(name) else _q(name)


def version_json(counter: int, timestamp: int) -> str:
    """RocketMQ 4.x's DataVersion JSON (counter, timestamp; 5.x's stateVersion is left out, as the name-server
    codec writes it)."""
    return f'{{"counter":{int(counter)},"timestamp":{int(timestamp)}}}'


# ---------------------------------------------------------------- topic configs

def topic_member(name: str, read_queue_nums: int, write_queue_nums: int, perm: int, topic_filter_type: str,
                 topic_sys_flag: int, order: bool) -> bytes:
    q = quote(name)
    return (f'{q}:{{"order":{"true" if order else "false"},"perm":{perm},"readQueueNums":{read_queue_nums},'
            f'"topicFilterType":{quote(topic_filter_type)},"topicName":{q},"topicSysFlag":{topic_sys_flag},'
            f'"writeQueueNums":{write_queue_nums}}}').encode("utf-8", "replace")


def topic_member_reference(d: Mapping[str, Any]) -> bytes:
    """The member of a TopicConfig JSON dict (`topicName` etc.) by the generic encoder."""
    return dumps({d["topicName"]: dict(d)})[1:-1]


def topic_compact(name: str, read_queue_nums: int, write_queue_nums: int, perm: int, topic_filter_type: str) -> bytes:
    """int32 length + RocketMQ's `TopicConfig.encode("utf-8", "replace")` line (the compressed registration's entry)."""
    line = f"{name} {read_queue_nums} {write_queue_nums} {perm} {topic_filter_type}".encode("utf-8", "replace")
    return _I32.pack(len(line)) + line


def topic_wrapper(version: str, members: Iterable[bytes]) -> bytes:
    # two joins and no `+` on the big part: bytes.join copies without the GIL above 1 MiB
    return b"".join((b'{"dataVersion":', version.encode("utf-8", "replace"), b',"topicConfigTable":{', b",".join(members), b"}}"))


def register_body(wrapper: bytes, filter_servers: Iterable[str] = ()) -> bytes:
    """RegisterBrokerBody as JSON around a TopicConfigSerializeWrapper body."""
    return b"".join((b'{"filterServerList":', dumps(list(filter_servers)), b',"topicConfigSerializeWrapper":',
                     wrapper, b"}"))


def register_body_compressed(version: str, compact_entries: list[bytes], filter_servers: Iterable[str] = (),
                             level: int = 9) -> bytes:
    """RocketMQ's compressed RegisterBrokerBody (see the module doc); `compact_entries` from topic_compact."""
    v = version.encode("utf-8", "replace")
    fs = dumps(list(filter_servers))
    raw = b"".join((_I32.pack(len(v)), v, _I32.pack(len(compact_entries)), *compact_entries, _I32.pack(len(fs)), fs))
    return zlib.compress(raw, level)


def decode_register_body_compressed(data: bytes) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[str]]:
    """(dataVersion, {name: TopicConfig JSON (the 5 encoded fields)}, filterServerList) of a compressed body."""
    try:
        raw = zlib.decompress(data)
        pos = 0

        def take() -> bytes:
            nonlocal pos
            (n,) = _I32.unpack_from(raw, pos)
            if n < 0 or pos + 4 + n > len(raw):
                raise CodecError("compressed RegisterBrokerBody: length out of range")
            out = raw[pos + 4:pos + 4 + n]
            pos += 4 + n
            return out

        version = json.loads(take())
        (count,) = _I32.unpack_from(raw, pos)
        pos += 4
        topics = {}
        for _ in range(count):
            parts = take().decode().split(" ")
            if len(parts) != 5:
                raise CodecError(f"compressed RegisterBrokerBody: bad TopicConfig line {' '.join(parts)!r}")
            topics[parts[0]] = {"topicName": parts[0], "readQueueNums": int(parts[1]),
                                "writeQueueNums": int(parts[2]), "perm": int(parts[3]), "topicFilterType": parts[4]}
        filters = json.loads(take())
    except (zlib.error, struct.error, ValueError, UnicodeDecodeError) as e:
        raise CodecError(f"compressed RegisterBrokerBody: {e}") from None
    return version, topics, filters


def topic_list(names: list[str], all_plain: bool = False) -> bytes:
    """`{"topicList":[...]}`; `all_plain`: the caller knows no name needs escaping (one C-level join)."""
    if all_plain and names:
        return b'{"topicList":["' + '","'.join(names).encode("utf-8", "replace") + b'"]}'
    return b'{"topicList":[' + ",".join(map(quote, names)).encode("utf-8", "replace") + b"]}"


# ---------------------------------------------------------------- subscription groups

def group_member(name: str, config: Mapping[str, Any]) -> bytes:
    return quote(name).encode("utf-8", "replace") + b":" + dumps(dict(config))


def group_wrapper(version: str, members: Iterable[bytes]) -> bytes:
    return b"".join((b'{"dataVersion":', version.encode("utf-8", "replace"), b',"forbiddenTable":{},"subscriptionGroupTable":{',
                     b",".join(members), b"}}"))


# ---------------------------------------------------------------- consumer offsets

def offset_member(key: str, queues: Mapping[int, int]) -> str:
    return quote(key) + ":{" + ",".join(f"{q}:{o}" for q, o in list(queues.items())) + "}"


def offset_wrapper(version: str, members: Iterable[str]) -> bytes:
    return ('{"dataVersion":' + version + ',"offsetTable":{' + ",".join(members) + "}}").encode("utf-8", "replace")
