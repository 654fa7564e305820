"""Broker <-> name-server bodies (cluster-ha.md §1.3, §1.4, §1.8, §1.10): DataVersion, the
REGISTER_BROKER body in its JSON and compressed forms, ClusterInfo, TopicList.

Sans-io like the rest of codec: bytes in, records out; every decoder raises only CodecError.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from codec import table_bodies as TB
from codec.bodies import BrokerData
from codec.errors import CodecError
from codec.fastjson import as_bool, as_int, as_list, as_obj, as_str, dumps, loads_lenient

_I32 = struct.Struct(">i")
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


def body_crc32(body: bytes) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 of the exact body bytes, masked to a non-negative int."""
    return zlib.crc32(body) & 0x7FFFFFFF


# ------------------------------------------------------------------------ DataVersion

@dataclass(slots=True, frozen=True)
class DataVersion:
    """RocketMQ's DataVersion: a topic table's (counter, timestamp); 5.x adds stateVersion. Two are equal
    when all three fields are (4.x compares timestamp and counter; stateVersion is 0 there)."""
    counter: int = 0
    timestamp: int = 0
    state_version: int = 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"counter": self.counter, "timestamp": self.timestamp}
        if self.state_version:
            d["stateVersion"] = self.state_version
        return d

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, d: Any) -> DataVersion:
        d = as_obj(d, "DataVersion")
        return cls(as_int(d.get("counter"), "counter"), as_int(d.get("timestamp"), "timestamp"),
                   as_int(d.get("stateVersion"), "stateVersion"))

    @classmethod
    def decode(cls, body: Any) -> DataVersion:
        return cls.from_json(body)


# ------------------------------------------------------------------------ TopicConfig on the wire

@dataclass(slots=True, frozen=True)
class TopicConfigData:
    """One TopicConfig as a broker registers it (the JSON field set of TopicConfig)."""
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @classmethod
    def from_json(cls, name: str, d: Any) -> TopicConfigData:
        d = as_obj(d, "TopicConfig")
        filter_type = d.get("topicFilterType")
        if isinstance(filter_type, int) and 0 <= filter_type < len(FILTER_TYPES):
            filter_type = FILTER_TYPES[filter_type]
        return cls(as_str(d.get("topicName"), "topicName", name) or name,
                   as_int(d.get("readQueueNums"), "readQueueNums", 16),
                   as_int(d.get("writeQueueNums"), "writeQueueNums", 16),
                   as_int(d.get("perm"), "perm", 6),
                   as_str(filter_type, "topicFilterType", "SINGLE_TAG") or "SINGLE_TAG",
                   as_int(d.get("topicSysFlag", d.get("topicSynFlag")), "topicSysFlag"),
                   as_bool(d.get("order")))

    @classmethod
    def decode_line(cls, line: str) -> TopicConfigData:
        """TopicConfig.decode: >= 5 space-separated tokens (a 5.x 6th token, attributes JSON, is ignored);
        the line carries neither topicSysFlag nor order (defaults 0 / false)."""
        parts = line.split(" ")
        if len(parts) < 5:
            raise CodecError(f"compressed TopicConfig line has {len(parts)} tokens, need 5: {line[:80]!r}")
        try:
            return cls(parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4] or "SINGLE_TAG")
        except ValueError:
            raise CodecError(f"compressed TopicConfig line has a bad number: {line[:80]!r}") from None


# ------------------------------------------------------------------------ RegisterBrokerBody

@dataclass(slots=True)
class RegisterBrokerBody:
    data_version: DataVersion = field(default_factory=DataVersion)
    topic_configs: dict[str, TopicConfigData] = field(default_factory=dict)
    filter_server_list: list[str] = field(default_factory=list)


def encode_register_body(body: RegisterBrokerBody, compressed: bool = False) -> bytes:
    """The REGISTER_BROKER body: fastjson JSON, or RocketMQ's compressed form (a zlib stream, level 9,
    of length-prefixed DataVersion JSON, topic lines and the filter-server list; no 5.x mapping
    section, so send it with a request version < 413). Laid out by codec.table_bodies, the encoder the
    broker's cached table body uses too."""
    dv = body.data_version
    version = TB.version_json(dv.counter, dv.timestamp)
    topics = body.topic_configs.values()
    if compressed:
        return TB.register_body_compressed(version, [TB.topic_compact(t.topic_name, t.read_queue_nums,
                                                                      t.write_queue_nums, t.perm, t.topic_filter_type)
                                                     for t in topics], body.filter_server_list)
    members = [TB.topic_member(t.topic_name, t.read_queue_nums, t.write_queue_nums, t.perm, t.topic_filter_type,
                               t.topic_sys_flag, t.order) for t in topics]
    return TB.register_body(TB.topic_wrapper(version, members), body.filter_server_list)


def decode_register_body(data: bytes | bytearray | memoryview | None, compressed: bool, max_inflated: int = 64 << 20) -> RegisterBrokerBody:
    """Either form (header `compressed`); an empty body is the empty wrapper with DataVersion (0, 0)."""
    if data is None or len(data) == 0:
        return RegisterBrokerBody()
    if compressed:
        return _decode_compressed(bytes(data), max_inflated)
    d = as_obj(data, "RegisterBrokerBody")
    wrapper = d.get("topicConfigSerializeWrapper")
    if wrapper is None and "topicConfigTable" in d:
        wrapper = d  # a pre-3.0.11 body is the bare TopicConfigSerializeWrapper
    wrapper = as_obj(wrapper or {}, "topicConfigSerializeWrapper")
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise CodecError("topicConfigTable is not an object")
    dv = wrapper.get("dataVersion")
    return RegisterBrokerBody(
        DataVersion.from_json(dv) if dv is not None else DataVersion(),
        # keyed by each TopicConfig's own topicName, the name RocketMQ's name server files its queues under
        {tc.topic_name: tc for tc in (TopicConfigData.from_json(str(n), t) for n, t in table.items())},
        [as_str(x, "filterServer") for x in as_list(d, "filterServerList")])


def _decode_compressed(data: bytes, max_inflated: int) -> RegisterBrokerBody:
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, max_inflated)
        if inflater.unconsumed_tail:
            raise CodecError(f"compressed register body inflates past {max_inflated} bytes")
    except zlib.error as e:
        raise CodecError(f"compressed register body is not a zlib stream: {e}") from None
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        if pos + 4 > len(raw):
            raise CodecError("compressed register body truncated")
        (n,) = _I32.unpack_from(raw, pos)
        if n < 0 or pos + 4 + n > len(raw):
            raise CodecError(f"compressed register body: bad length {n} at {pos}")
        pos += 4 + n
        return raw[pos - n:pos]

    dv = DataVersion.decode(chunk())
    if pos + 4 > len(raw):
        raise CodecError("compressed register body truncated")
    (count,) = _I32.unpack_from(raw, pos)
    pos += 4
    if count < 0 or count > len(raw):
        raise CodecError(f"compressed register body: bad topic count {count}")
    topics: dict[str, TopicConfigData] = {}
    for _ in range(count):
        try:
            line = chunk().decode("utf-8")
        except UnicodeDecodeError as e:
            raise CodecError(f"compressed TopicConfig line is not UTF-8: {e}") from None
        t = TopicConfigData.decode_line(line)
        topics[t.topic_name] = t
    filters: list[str] = []
    if pos < len(raw):
        fs = loads_lenient(chunk())
        if isinstance(fs, list):
            filters = [as_str(x, "filterServer") for x in fs]
    return RegisterBrokerBody(dv, topics, filters)


# ------------------------------------------------------------------------ ClusterInfo, TopicList

def encode_cluster_info(broker_datas: list[BrokerData], clusters: dict[str, list[str]],
                        quoted_keys: bool = False) -> bytes:
    """ClusterInfo `{"brokerAddrTable":{name: BrokerData}, "clusterAddrTable":{cluster: [names]}}`;
    brokerAddrs ids unquoted (fastjson's default) unless `quoted_keys`."""
    return dumps({"brokerAddrTable": {b.broker_name: b.to_json() for b in broker_datas},
                  "clusterAddrTable": {c: sorted(names) for c, names in clusters.items()}},
                 bare_int_keys=not quoted_keys)


def decode_cluster_info(body: Any) -> tuple[dict[str, BrokerData], dict[str, list[str]]]:
    d = as_obj(body, "ClusterInfo")
    brokers: dict[str, BrokerData] = {}
    table = d.get("brokerAddrTable") or {}
    if not isinstance(table, dict):
        raise CodecError("brokerAddrTable is not an object")
    for name, b in table.items():
        b = as_obj(b, "BrokerData")
        addrs = b.get("brokerAddrs") or {}
        if not isinstance(addrs, dict):
            raise CodecError("brokerAddrs is not an object")
        brokers[str(name)] = BrokerData(as_str(b.get("cluster"), "cluster"), as_str(b.get("brokerName"), "brokerName"),
                                        {as_int(k, "brokerId"): as_str(v, "brokerAddr") for k, v in addrs.items()})
    cluster_table = d.get("clusterAddrTable") or {}
    if not isinstance(cluster_table, dict):
        raise CodecError("clusterAddrTable is not an object")
    clusters = {str(c): [as_str(x, "brokerName") for x in v] for c, v in cluster_table.items() if isinstance(v, list)}
    return brokers, clusters


def encode_topic_list(topics: Any, broker_addr: str | None = None) -> bytes:
    """TopicList `{"topicList":[...]}` (+ `brokerAddr`, GET_SYSTEM_TOPIC_LIST_FROM_NS)."""
    d: dict[str, Any] = {"topicList": sorted(topics)}
    if broker_addr is not None:
        d["brokerAddr"] = broker_addr
    return dumps(d)
