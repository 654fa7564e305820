"""Code tables against remoting-protocol.md §6 (values other packages and stock clients rely on)."""

from codec.codes import (
    NOT_ALLOWED_SEND_TOPICS,
    SCHEDULE_TOPIC,
    LanguageCode,
    PermName,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    SysFlag,
)

REQUESTS = {"SEND_MESSAGE": 10, "PULL_MESSAGE": 11, "QUERY_MESSAGE": 12, "QUERY_CONSUMER_OFFSET": 14,
            "UPDATE_CONSUMER_OFFSET": 15, "UPDATE_AND_CREATE_TOPIC": 17, "GET_BROKER_RUNTIME_INFO": 28,
            "SEARCH_OFFSET_BY_TIMESTAMP": 29, "GET_MAX_OFFSET": 30, "GET_MIN_OFFSET": 31,
            "GET_EARLIEST_MSG_STORETIME": 32, "VIEW_MESSAGE_BY_ID": 33, "HEART_BEAT": 34, "UNREGISTER_CLIENT": 35,
            "CONSUMER_SEND_MSG_BACK": 36, "END_TRANSACTION": 37, "GET_CONSUMER_LIST_BY_GROUP": 38,
            "CHECK_TRANSACTION_STATE": 39, "NOTIFY_CONSUMER_IDS_CHANGED": 40, "LOCK_BATCH_MQ": 41,
            "UNLOCK_BATCH_MQ": 42, "CHECK_CLIENT_CONFIG": 46, "GET_KV_CONFIG": 101, "GET_ROUTEINFO_BY_TOPIC": 105,
            "GET_BROKER_CLUSTER_INFO": 106, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER": 206,
            "GET_KV_CONFIG_BY_VALUE": 217, "RESET_CONSUMER_CLIENT_OFFSET": 220, "QUERY_TOPIC_CONSUME_BY_WHO": 300,
            "GET_CONSUMER_RUNNING_INFO": 307, "CONSUME_MESSAGE_DIRECTLY": 309, "SEND_MESSAGE_V2": 310,
            "SEND_BATCH_MESSAGE": 320}
RESPONSES = {"SUCCESS": 0, "SYSTEM_ERROR": 1, "SYSTEM_BUSY": 2, "REQUEST_CODE_NOT_SUPPORTED": 3,
             "TRANSACTION_FAILED": 4, "FLUSH_DISK_TIMEOUT": 10, "SLAVE_NOT_AVAILABLE": 11,
             "FLUSH_SLAVE_TIMEOUT": 12, "MESSAGE_ILLEGAL": 13, "SERVICE_NOT_AVAILABLE": 14,
             "VERSION_NOT_SUPPORTED": 15, "NO_PERMISSION": 16, "TOPIC_NOT_EXIST": 17, "TOPIC_EXIST_ALREADY": 18,
             "PULL_NOT_FOUND": 19, "PULL_RETRY_IMMEDIATELY": 20, "PULL_OFFSET_MOVED": 21, "QUERY_NOT_FOUND": 22,
             "SUBSCRIPTION_PARSE_FAILED": 23, "SUBSCRIPTION_NOT_EXIST": 24, "SUBSCRIPTION_NOT_LATEST": 25,
             "SUBSCRIPTION_GROUP_NOT_EXIST": 26}


def test_request_and_response_codes():
    assert {n: RequestCode[n].value for n in REQUESTS} == REQUESTS
    assert {n: ResponseCode[n].value for n in RESPONSES} == RESPONSES
    assert len({c.value for c in RequestCode}) == len(RequestCode)  # no accidental aliases


def test_languages_flags_and_perms():
    assert [m.name for m in sorted(LanguageCode)] == ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG",
                                                      "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST",
                                                      "NODE_JS"]
    assert (SysFlag.COMPRESSED, SysFlag.MULTI_TAGS, SysFlag.BORNHOST_V6, SysFlag.STOREHOST_V6) == (1, 2, 16, 32)
    assert SysFlag.transaction_value(0x10 | 0xC) == SysFlag.TRANSACTION_ROLLBACK_TYPE
    assert SysFlag.compression_type(0x301) == 3
    assert (PullSysFlag.COMMIT_OFFSET, PullSysFlag.SUSPEND, PullSysFlag.SUBSCRIPTION) == (1, 2, 4)
    assert PermName.to_string(6) == "RW-" and PermName.to_string(7) == "RWX"
    assert PermName.is_writeable(2) and not PermName.is_readable(2)
    assert SCHEDULE_TOPIC in NOT_ALLOWED_SEND_TOPICS
