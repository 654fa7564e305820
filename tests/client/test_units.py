"""Pieces of the client that need no broker: allocation, subscriptions, argument parsing, encodings."""

from __future__ import annotations

import argparse
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.cli.__main__ import main
from client.cli.parse import duration_ms, time_ms
from client.consumer import Subscription
from client.message import MessageQueue
from client.rebalance import allocate_averagely


def _mqs(n: int) -> list[MessageQueue]:
    return [MessageQueue("T", "broker-a", i) for i in range(n)]


def test_allocate_averagely_matches_rocketmq_layout():
    mqs, cids = _mqs(8), ["c1", "c2", "c3"]
    got = {c: [m.queue_id for m in allocate_averagely(c, mqs, cids)] for c in cids}
    assert got == {"c1": [0, 1, 2], "c2": [3, 4, 5], "c3": [6, 7]}
    # more consumers than queues: the extra consumers get nothing
    got = {c: [m.queue_id for m in allocate_averagely(c, _mqs(2), cids)] for c in cids}
    assert got == {"c1": [0], "c2": [1], "c3": []}
    assert allocate_averagely("unknown", mqs, cids) == []


@given(st.integers(1, 40), st.integers(1, 12))
def test_allocate_averagely_partitions_every_queue_once(n_queues, n_clients):
    mqs = _mqs(n_queues)
    cids = [f"10.0.0.{i}@{i}" for i in range(n_clients)]
    parts = [allocate_averagely(c, list(reversed(mqs)), cids) for c in cids]
    flat = [m for p in parts for m in p]
    assert sorted(flat) == sorted(mqs)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_subscription_parses_tag_expressions():
    s = Subscription.parse("T", " TagA || TagB ||  ")
    assert s.tags == ["TagA", "TagB"]
    j = s.to_json()
    assert j["codeSet"] == [2598919, 2598920]  # Java "TagA".hashCode(), "TagB".hashCode()
    assert Subscription.parse("T", "*").tags == [] and Subscription.parse("T", "").expr == "*"


@pytest.mark.parametrize("text,ms", [("30s", 30_000), ("1500ms", 1500), ("2h", 7_200_000), ("1.5m", 90_000),
                                     ("7", 7000)])
def test_duration_parsing(text, ms):
    assert duration_ms(text) == ms


def test_bad_duration_and_time_are_rejected():
    with pytest.raises(argparse.ArgumentTypeError):
        duration_ms("5x")
    with pytest.raises(argparse.ArgumentTypeError):
        time_ms("tomorrow")
    assert time_ms("1700000000000") == 1_700_000_000_000
    assert time_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000


def test_decode_restores_retry_topic_and_decompresses():
    from client.message import decode_messages
    from codec.record import MessageRecord, encode_record

    body = b"hello " * 1000
    rec = MessageRecord(topic="%RETRY%G", body=zlib.compress(body), queue_id=0, flag=0, queue_offset=5,
                        commitlog_offset=1234, sys_flag=1, born_timestamp=1, born_host=("127.0.0.1", 1),
                        store_timestamp=2, store_host=("127.0.0.1", 10911), reconsume_times=2,
                        prepared_transaction_offset=0,
                        properties={"RETRY_TOPIC": "Orders", "UNIQ_KEY": "AB", "TAGS": "t", "KEYS": "k1 k2"},
                        body_crc=0, store_size=0)
    [m] = decode_messages(bytes(encode_record(rec)))
    assert (m.topic, m.stored_topic, m.body, m.reconsume_times) == ("Orders", "%RETRY%G", body, 2)
    assert (m.msg_id, m.tags, m.keys, m.queue_offset) == ("AB", "t", ["k1", "k2"], 5)
    assert m.offset_msg_id == "7F00000100002A9F00000000000004D2"


@pytest.mark.parametrize("argv", [
    ["produce", "-t", "T", "--count", "-5"],
    ["produce", "-t", "T", "--delay", "5x"],
    ["produce", "-t", "T", "--delay-level", "19"],
    ["consume", "-t", "T", "--from-where", "timestamp"],
    ["message", "view", "--key", "k"],
    ["produce"],
])
def test_cli_bad_arguments_give_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0], err


def test_delay_level_rows_from_runtime_info():
    from client.admin import Admin

    rows = Admin.delay_levels({"scheduleMessageOffset_2": "3,10", "scheduleMessageOffset_1": "0,0",
                               "scheduleMessageNextDue_2": "1700000000000", "brokerVersion": "409",
                               "scheduleMessageOffset_x": "junk"})
    assert rows == [{"level": 1, "deliverOffset": 0, "maxOffset": 0, "pending": 0},
                    {"level": 2, "deliverOffset": 3, "maxOffset": 10, "nextdue": 1_700_000_000_000,
                     "pending": 7}]


def _declared(proto: type) -> set[str]:
    return {name for klass in proto.__mro__ if klass.__module__ == "client.cli.args"
            for name in vars(klass).get("__annotations__", {})}


@pytest.mark.parametrize("argv, proto, func", [
    (["produce", "-t", "T"], "ProduceArgs", "messaging.produce"),
    (["consume", "-t", "T"], "ConsumeArgs", "messaging.consume"),
    (["topic", "create", "-t", "T"], "TopicCreateArgs", "admin_cmds.topic_create"),
    (["topic", "list"], "CommonArgs", "admin_cmds.topic_list"),
    (["topic", "status", "-t", "T"], "TopicStatusArgs", "admin_cmds.topic_status"),
    (["group", "progress", "-g", "G"], "GroupProgressArgs", "admin_cmds.group_progress"),
    (["group", "connections", "-g", "G"], "GroupConnectionsArgs", "admin_cmds.group_connections"),
    (["message", "view", "--id", "X"], "MessageViewArgs", "admin_cmds.message"),
    (["scheduled", "levels"], "ScheduledStatsArgs", "admin_cmds.scheduled_stats"),
    (["scheduled", "timers"], "ScheduledStatsArgs", "admin_cmds.scheduled_stats"),
    (["scheduled", "list"], "ScheduledListArgs", "admin_cmds.scheduled_list"),
    (["scheduled", "cancel", "--id", "X"], "ScheduledCancelArgs", "admin_cmds.scheduled_cancel"),
    (["broker", "promote", "-b", "127.0.0.1:10911"], "BrokerPromoteArgs", "admin_cmds.broker"),
])
def test_cli_namespaces_carry_what_their_protocol_declares(argv, proto, func):
    """The subcommands are typed against client.cli.args; the parser must set every attribute declared
    there (a renamed option would otherwise pass mypy and fail at run time)."""
    from client.cli import admin_cmds, args, messaging
    from client.cli.__main__ import build_parser

    ns = build_parser().parse_args(argv)
    declared = _declared(getattr(args, proto))
    assert declared >= {"command", "namesrv", "timeout", "verbose"}
    assert sorted(declared - set(vars(ns))) == []
    module, name = func.split(".")
    assert ns.func is getattr({"messaging": messaging, "admin_cmds": admin_cmds}[module], name)
