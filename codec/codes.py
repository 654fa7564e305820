"""RocketMQ 4.x request/response codes, language codes, flags, well-known names and the V2 send header's
short field names."""

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Final, TypeVar


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    GET_CLIENT_CONFIG = 47
    GET_TIMER_CHECK_POINT = 60
    GET_TIMER_METRICS = 61
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KV_CONFIG_BY_VALUE = 217  # 4.x; 5.x reuses 217 for REGISTER_TOPIC_IN_NAMESRV
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    # 5.x controller mode (RIP-44; codec/controller.py declares their headers and bodies)
    BROKER_HEARTBEAT = 904  # broker -> every controller, oneway
    # a slave asks its master for its HA address (5.x BrokerOuterAPI.retrieveBrokerHaInfo; header in
    # codec/controller.py); the form that carries an address (slaveActingMaster's push) is not served
    EXCHANGE_BROKER_HA_INFO = 906
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008  # controller -> broker
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # RocketMQ 5: one topic's / group's config (what Apache's 5.x proxy asks a broker; topic_group_config.py)
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    # RocketMQ 5 pop consumption (5.1.3 RequestCode; server/processors/pop.py)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    BATCH_ACK_MESSAGE = 200151
    # delaymq's own codes (not RocketMQ's; 3100-3199: server/cluster/ha, server/processors/scheduled)
    PROMOTE_BROKER = 3101  # admin: make this slave the master (no restart); JSON body, see server/cluster/ha
    GET_SCHEDULER_PROGRESS = 3102  # master -> slave: scheduler.progress.SchedulerProgress (msgpack body)
    GET_HA_EPOCH = 3103  # {"epoch", "startOffset", "maxOffset"}: where this master's CommitLog diverged
    # controller mode, an elected slave -> the master it followed: check the controller now, stop (fenced:
    # no write, no scheduled delivery) if replaced, answer {"commitLogMaxOffset"} (server/cluster/controller)
    HAND_OVER_MASTER = 3104
    DELAYMQ_QUERY_SCHEDULED = 3111  # browse what is scheduled (server/processors/scheduled.py)
    DELAYMQ_CANCEL_SCHEDULED = 3112  # cancel a scheduled message by UNIQ_KEY (admin)


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209  # a pop's long polling queue is full
    POLLING_TIMEOUT = 210  # a pop found nothing before its pollTime
    FLOW_CONTROL = 215
    # 5.x controller mode (cluster-ha.md §4.3)
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014


class LanguageCode(IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class PermName:
    PRIORITY = 8
    READ = 4
    WRITE = 2
    INHERIT = 1

    @staticmethod
    def is_readable(perm: int) -> bool:
        return bool(perm & PermName.READ)

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return bool(perm & PermName.WRITE)

    @staticmethod
    def is_inherited(perm: int) -> bool:
        return bool(perm & PermName.INHERIT)

    @staticmethod
    def to_string(perm: int) -> str:
        """Java PermName.perm2String: "RWX" with '-' for missing bits."""
        return ("R" if perm & PermName.READ else "-") + ("W" if perm & PermName.WRITE else "-") + (
            "X" if perm & PermName.INHERIT else "-")


class SysFlag:
    """Message sysFlag bits (MessageSysFlag)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        return sys_flag & SysFlag.TRANSACTION_MASK

    @staticmethod
    def compression_type(sys_flag: int) -> int:
        """(flag & 0x700) >> 8: 1 LZ4, 2 ZSTD, 3 ZLIB, 0 = ZLIB (older producers)."""
        return (sys_flag & SysFlag.COMPRESSION_TYPE_MASK) >> 8


class TopicSysFlag:
    """TopicSysFlag: a topic's sysFlag bits (unit mode)."""

    UNIT = 0x1
    UNIT_SUB = 0x2


class PullSysFlag:
    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


RPC_TYPE_RESPONSE = 0x1
RPC_ONEWAY = 0x2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

MQ_VERSION = 409  # MQVersion.CURRENT_VERSION, V4_9_8: the version every 4.9.8 command carries
BROKER_VERSION = MQ_VERSION  # what our broker and name server announce
MQ_VERSION_V3_4_9 = 121  # MQVersion V3_4_9: from it on, a send or send-back header may carry maxReconsumeTimes
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
DEFAULT_TOPIC = "TBW102"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
DEFAULT_REGION = "DefaultRegion"
DEFAULT_CLUSTER = "DefaultCluster"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
# scheduled records that could not be converted or delivered are set aside here (delaymq's own; 1 queue)
SCHEDULE_QUARANTINE_TOPIC = "rmq_sys_SCHEDULE_QUARANTINE"
# topics a producer may not send to (remoting-protocol.md §8.1)
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC, OFFSET_MOVED_EVENT,
})



class SendMessageRequestHeaderV2:
    """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE carry SendMessageRequestHeader's fields under one-letter
    names: each attribute is a Java SendMessageRequestHeader field name and its value the V2 extFields
    key (`SendMessageRequestHeaderV2.topic == "b"`). The one declaration of that layout: server/headers.py's
    SEND_MESSAGE spec (through SEND_MESSAGE_REQUEST_HEADER_V2), the client's producer and bench/wire.py
    take their letters from here. n is 4.9.8's broker name (`bname` of RpcRequestHeader)."""

    producerGroup: Final = "a"
    topic: Final = "b"
    defaultTopic: Final = "c"
    defaultTopicQueueNums: Final = "d"
    queueId: Final = "e"
    sysFlag: Final = "f"
    bornTimestamp: Final = "g"
    flag: Final = "h"
    properties: Final = "i"
    reconsumeTimes: Final = "j"
    unitMode: Final = "k"
    maxReconsumeTimes: Final = "l"
    batch: Final = "m"
    bname: Final = "n"


# the same layout as a mapping, SendMessageRequestHeader field name -> V2 key, in Java's order
SEND_MESSAGE_REQUEST_HEADER_V2: Mapping[str, str] = MappingProxyType({
    name: short for name, short in vars(SendMessageRequestHeaderV2).items() if not name.startswith("_")})

_V = TypeVar("_V")


def create_send_message_request_header_v2(fields: Mapping[str, _V]) -> dict[str, _V]:
    """The SEND_MESSAGE_V2 extFields for a SendMessageRequestHeader given by its Java field names (as
    Java's SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2): same values, same order, each
    key replaced by its V2 letter. A name that is not a SendMessageRequestHeader field raises KeyError.
    For tools and tests; the producer's per-message path writes `SendMessageRequestHeaderV2.x` keys."""
    v2 = SEND_MESSAGE_REQUEST_HEADER_V2
    return {v2[name]: value for name, value in fields.items()}
