import pytest

from codec.durations import DEFAULT_DELAY_LEVELS
from server.__main__ import build_parser, config_from_args
from server.config import BrokerConfig, load_config, parse_properties


def test_defaults_match_rocketmq_names():
    cfg = BrokerConfig()
    props = cfg.to_properties()
    assert props["listenPort"] == "9876"
    assert props["brokerIP1"] == "127.0.0.1"
    assert props["brokerClusterName"] == "DefaultCluster"
    assert props["mappedFileSizeCommitLog"] == "1073741824"
    assert props["messageDelayLevel"] == DEFAULT_DELAY_LEVELS
    assert props["autoCreateTopicEnable"] == "true"
    assert cfg.vip_port == 9874 and cfg.broker_addr == "127.0.0.1:9876"


def test_properties_escapes_are_read_as_java_reads_them():
    # A Windows path as RocketMQ's docs write it, a unicode escape, and an escaped separator in a key.
    text = "storePathRootDir=D\\:\\\\rocketmq\\\\store\nbrokerName=b\\u00e9\nweird\\=key=v\n"
    props = parse_properties(text)
    assert props["storePathRootDir"] == "D:\\rocketmq\\store"
    assert props["brokerName"] == "b\u00e9"
    assert props["weird=key"] == "v"


def test_properties_file_parsing_with_comments_unknown_keys_and_continuations(tmp_path):
    text = ("# comment\n! also comment\n\nbrokerName = broker-x\nlistenPort:10911\n"
            "flushDiskType=SYNC_FLUSH\nmessageDelayLevel=1s 5s \\\n  10s\nnoSuchKey=1\nautoCreateTopicEnable=FALSE\n")
    assert parse_properties(text)["messageDelayLevel"] == "1s 5s 10s"
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    cfg = load_config(str(conf))
    assert cfg.broker_name == "broker-x"
    assert cfg.listen_port == 10911
    assert cfg.sync_flush
    assert cfg.message_delay_level == "1s 5s 10s"
    assert cfg.auto_create_topic_enable is False
    assert BrokerConfig().apply({"noSuchKey": "1"}) == ["noSuchKey"]


def test_bad_number_names_the_key():
    with pytest.raises(ValueError, match="listenPort"):
        BrokerConfig.from_mapping({"listenPort": "ninety"})


def test_cli_overrides_the_file(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=1000\nflushDiskType=SYNC_FLUSH\nbrokerIP1=10.0.0.1\n")
    args = build_parser().parse_args(["--store", str(tmp_path / "s"), "--port", "2000", "--config", str(conf),
                                      "--flush-disk-type", "ASYNC_FLUSH", "--delay-levels", "1s 2s",
                                      "--set", "defaultTopicQueueNums=3"])
    cfg = config_from_args(args)
    assert cfg.listen_port == 2000
    assert cfg.flush_disk_type == "ASYNC_FLUSH"
    assert cfg.broker_ip1 == "10.0.0.1"
    assert cfg.message_delay_level == "1s 2s"
    assert cfg.default_topic_queue_nums == 3
    assert cfg.store_path_root_dir == str(tmp_path / "s")
    assert cfg.listen_host == "127.0.0.1"


def test_set_keys_survive_the_flags_not_given(tmp_path):
    args = build_parser().parse_args(["--store", str(tmp_path / "s"), "--set", "flushDiskType=SYNC_FLUSH",
                                      "--set", "messageDelayLevel=1s 2s", "--set", "listenPort=2010"])
    cfg = config_from_args(args)
    assert (cfg.flush_disk_type, cfg.message_delay_level, cfg.listen_port) == ("SYNC_FLUSH", "1s 2s", 2010)


def test_every_properties_block_in_the_readme_is_a_valid_broker_conf():
    """What a reader copies from README.md into broker.conf starts a broker: it parses as Java reads a
    .properties file, every key is known, and every value passes validation."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```properties\n(.*?)```", readme, re.S)
    assert blocks
    for text in blocks:
        cfg = BrokerConfig()
        unknown = cfg.apply(parse_properties(text), source="README")
        assert unknown == [], (unknown, text[:200])
        cfg.validate()
