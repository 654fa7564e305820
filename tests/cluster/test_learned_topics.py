"""ReplicatedTopics (server/cluster/ha/learned.py) on a real topic table (meta.db in tmp_path): what a
slave learns from replicated records and what the next metadata sync does with it. The whole path
through broker processes is tests/cluster/test_ha_namesrv.py::test_promoted_slave_knows_a_topic_created_after_the_last_metadata_sync."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.cluster.ha.learned import ReplicatedTopics
from server.topics import TopicConfig, TopicManager
from storage.meta_store import MetaStore
from storage.topic_config import TopicConfigTable


@pytest.fixture
def topics(tmp_path: Path) -> Iterator[TopicManager]:
    meta = MetaStore(str(tmp_path / "config"))
    tm = TopicManager(TopicConfigTable(str(tmp_path), meta), default_queue_nums=8)
    tm.load()
    tm.ensure_system_topics(18, True)
    yield tm
    meta.close()


def test_an_unknown_topic_is_learned_with_the_queues_replication_showed(topics: TopicManager) -> None:
    rt = ReplicatedTopics(topics)
    changed: list[str] = []
    topics.add_change_listener(lambda cfg: changed.append(cfg.topic_name))  # the name-server registration
    rt.on_dispatch("Orders", 2, 1)
    cfg = topics.get("Orders")
    assert cfg is not None and (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (3, 3, 6)
    assert changed == ["Orders"]
    rt.on_dispatch("Orders", 1, 1)  # covered: nothing changes
    assert changed == ["Orders"] and rt.seq == 1
    rt.on_dispatch("Orders", 11, 1)  # a queue id beyond the config widens it
    cfg = topics.get("Orders")
    assert cfg is not None and cfg.read_queue_nums == cfg.write_queue_nums == 12
    rt.on_dispatch("%RETRY%G", 0, 1)  # send-back topics have the queues seen, no more
    retry = topics.get("%RETRY%G")
    assert retry is not None and retry.queue_nums == 1
    assert set(rt.learned) == {"Orders", "%RETRY%G"}


def test_a_known_topic_is_left_alone(topics: TopicManager) -> None:
    topics.put(TopicConfig("Known", 2, 2, 4))
    rt = ReplicatedTopics(topics)
    rt.on_dispatch("Known", 1, 5)
    assert topics.get("Known") == TopicConfig("Known", 2, 2, 4) and rt.learned == {}


def test_the_next_sync_replaces_keeps_or_drops_what_was_learned(topics: TopicManager) -> None:
    rt = ReplicatedTopics(topics)
    rt.on_dispatch("Real", 0, 1)  # the master has it (with its own config)
    rt.on_dispatch("Deleted", 0, 1)  # learned before the request; the master no longer has it
    since = rt.seq
    rt.on_dispatch("Late", 0, 1)  # learned after the master's answer was taken
    rt.on_dispatch("Narrow", 1, 1)  # the master's answer has it (4 queues): its config stands
    rt.on_dispatch("Wider", 5, 1)  # the master's answer predates its queue 5: widened to 6
    master = {name: cfg for name, cfg in topics.topics.items()
              if name not in ("Real", "Deleted", "Late", "Narrow", "Wider")}
    master["Real"] = TopicConfig("Real", 3, 3, 6)
    master["Narrow"] = TopicConfig("Narrow", 4, 4, 6)
    master["Wider"] = TopicConfig("Wider", 2, 2, 6)
    asyncio.run(topics.table.replace_all(master))
    rt.after_sync(set(master), since)
    assert topics.get("Real") == TopicConfig("Real", 3, 3, 6)  # the master's config wins
    assert topics.get("Deleted") is None
    late = topics.get("Late")
    assert late is not None and late.queue_nums == 1  # put back: the next sync decides
    assert topics.get("Narrow") == TopicConfig("Narrow", 4, 4, 6)
    assert topics.get("Wider") == TopicConfig("Wider", 6, 6, 6)
    assert set(rt.learned) == {"Late", "Wider"}
