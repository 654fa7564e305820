"""The MetaStore (meta.db) under the config tables: shapes, incremental commits, export, migration of a
store written by the JSON-file tables, and what a waiter sees."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3

from storage.config_store import atomic_write_json
from storage.consumer_offsets import ConsumerOffsetTable
from storage.meta_store import DelayOffsetStore, MetaStore, parse_delay_offsets
from storage.subscription_group import SubscriptionGroupTable
from storage.topic_config import TopicConfig, TopicConfigTable


def _tables(tmp_path, meta=None):
    meta = meta or MetaStore(str(tmp_path / "config"))
    t, g, o = TopicConfigTable(str(tmp_path), meta), SubscriptionGroupTable(str(tmp_path), meta=meta), \
        ConsumerOffsetTable(str(tmp_path), meta)
    for x in (t, g, o):
        x.load()
    return meta, t, g, o


def _rows(tmp_path, sql):
    conn = sqlite3.connect(str(tmp_path / "config" / "meta.db"))
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_topic_config_table_shape_defaults_and_export(tmp_path):
    meta, t, _, _ = _tables(tmp_path)
    t.ensure_system_topics()
    t.put(TopicConfig("Orders", 4, 4))
    t.persist()  # committed by the writer thread: visible to another connection
    assert _rows(tmp_path, "SELECT * FROM topic WHERE name='Orders'") == [("Orders", 4, 4, 6, "SINGLE_TAG", 0, 0)]
    meta.export_json()
    doc = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert doc["topicConfigTable"]["TBW102"] == {
        "topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    assert doc["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]["readQueueNums"] == 18
    assert doc["dataVersion"]["counter"] == t.data_version.counter >= 2
    meta.close()
    _, t2, _, _ = _tables(tmp_path)
    assert t2.get("Orders") == TopicConfig("Orders", 4, 4, 6)
    assert t2.data_version.counter == doc["dataVersion"]["counter"]  # the version survives a restart
    assert TopicConfig("New").read_queue_nums == 16 and TopicConfig("New").perm == 6
    assert t2.delete("Orders") and not t2.delete("Orders")
    t2.meta.close()
    assert _rows(tmp_path, "SELECT * FROM topic WHERE name='Orders'") == []


def test_consumer_offsets_and_subscription_groups(tmp_path):
    meta, _, g, o = _tables(tmp_path)
    o.commit("G", "T", 0, 5)
    o.commit("G", "T", 1, 7)
    o.commit("G", "T", 1, 8)  # the last commit of a queue wins
    o.commit("G2", "T", 0, 1)
    o.commit("G", "U", 0, 2)
    assert o.groups_of("T") == ["G", "G2"] and o.topics_of("G") == ["T", "U"]
    cfg = g.get("CG")  # auto-created
    assert (cfg.consume_enable, cfg.retry_queue_nums, cfg.retry_max_times, cfg.which_broker_when_consume_slowly) \
        == (True, 1, 16, 1)
    cfg.retry_max_times = 3
    g.put(cfg)
    meta.export_json()
    doc = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"] == {"T@G": {"0": 5, "1": 8}, "T@G2": {"0": 1}, "U@G": {"0": 2}}
    doc = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())
    assert doc["subscriptionGroupTable"]["CG"]["retryMaxTimes"] == 3
    assert doc["subscriptionGroupTable"]["CG"]["notifyConsumerIdsChangedEnable"] is True
    o.remove_group("G", "U")
    assert o.topics_of("G") == ["T"] and o.groups_of("U") == []
    meta.close()
    meta2, _, g2, o2 = _tables(tmp_path)
    g2.auto_create = False
    assert o2.query("G", "T", 1) == 8 and o2.query("G", "T", 2) == -1 and o2.query("G", "U", 0) == -1
    assert o2.groups_of("T") == ["G", "G2"]
    assert g2.get("CG").retry_max_times == 3 and g2.get("nope") is None
    o2.remove_group("G")
    assert g2.delete("CG")
    meta2.close()
    assert _rows(tmp_path, "SELECT key, offsets FROM consumer_offsets") == [("T@G2", "0:1")]
    assert _rows(tmp_path, "SELECT name FROM subscription_group") == []


def _write_old_store(cfg) -> None:
    """The four files as the JSON-file tables (before meta.db) wrote them, topics.json torn (its .bak holds
    the last good version, as after a crash mid-rename)."""
    atomic_write_json(str(cfg / "topics.json"), {"topicConfigTable": {
        "Old": {"topicName": "Old", "readQueueNums": 2, "writeQueueNums": 3, "perm": 6,
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": True}},
        "dataVersion": {"counter": 41, "timestamp": 1700000000000}})
    atomic_write_json(str(cfg / "topics.json"), {"topicConfigTable": {}, "dataVersion": {"counter": 42}})
    (cfg / "topics.json").write_text('{"topicConfigTable": {"Torn"')  # the primary is torn: .bak is read
    atomic_write_json(str(cfg / "subscriptionGroup.json"), {"subscriptionGroupTable": {
        "OG": {"groupName": "OG", "consumeEnable": False, "retryMaxTimes": 5}},
        "dataVersion": {"counter": 3, "timestamp": 1}})
    atomic_write_json(str(cfg / "consumerOffset.json"), {"offsetTable": {"Old@OG": {"0": 11, "1": 12}},
                                                        "dataVersion": {"counter": 9, "timestamp": 2}})
    (cfg / "delayOffset.json").write_text('{\n\t"offsetTable":{\n\t\t1:12,\n\t\t3:57\n\t}\n}')


def test_a_store_written_by_the_json_tables_is_migrated_once(tmp_path):
    cfg = tmp_path / "config"
    cfg.mkdir()
    _write_old_store(cfg)
    meta, t, g, o = _tables(tmp_path)
    assert t.get("Old") == TopicConfig("Old", 2, 3, 6, "SINGLE_TAG", 0, True) and "Torn" not in t
    assert t.data_version.counter == 41  # the .bak's version
    assert g.table["OG"].consume_enable is False and g.table["OG"].retry_max_times == 5
    assert o.query("OG", "Old", 1) == 12 and o.data_version.counter == 9
    assert DelayOffsetStore(meta).read() == {1: 12, 3: 57}
    names = sorted(os.listdir(cfg))
    assert "topics.json" not in names and "topics.json.migrated" in names and "topics.json.bak.migrated" in names
    assert {"subscriptionGroup.json.migrated", "consumerOffset.json.migrated", "delayOffset.json.migrated"} <= set(names)
    assert _rows(tmp_path, "SELECT v FROM meta WHERE k='migrated_from'")[0][0].count(".json") == 4
    t.put(TopicConfig("New", 1, 1))
    meta.export_json()  # the exported files sit where the old ones were; they are not imported again
    meta.close()
    (cfg / "topics.json").write_text('{"topicConfigTable": {}}')
    _, t2, _, o2 = _tables(tmp_path)
    assert "Old" in t2 and "New" in t2 and o2.query("OG", "Old", 0) == 11
    t2.meta.close()


def test_delay_offsets_through_the_store_and_fastjson_export(tmp_path):
    meta = MetaStore(str(tmp_path / "config")).open()
    d = DelayOffsetStore(meta)
    assert d.read() == {}
    d.write({1: 30, 2: 0, 4: 7})
    d.write({1: 31})
    assert d.read() == {1: 31, 2: 0, 4: 7}
    meta.export_json(str(tmp_path))
    text = (tmp_path / "delayOffset.json").read_text()
    assert "1:31" in text and parse_delay_offsets(text) == {1: 31, 2: 0, 4: 7}
    meta.close()


async def test_committed_future_is_done_only_after_the_commit(tmp_path):
    meta, t, _, o = _tables(tmp_path, MetaStore(str(tmp_path / "config"), sync=True))
    assert meta.committed("nothing staged").done()
    for i in range(500):
        t.put(TopicConfig(f"T{i}", 1, 1))
        o.commit("G", f"T{i}", 0, i)
    fut = meta.committed("ack")
    assert await asyncio.wait_for(fut, 30) == "ack"
    assert _rows(tmp_path, "SELECT count(*) FROM topic")[0][0] == 500
    assert _rows(tmp_path, "SELECT count(*) FROM consumer_offsets")[0][0] == 500
    assert meta.rows_written >= 1000 and meta.commits >= 1
    # a request arriving while a batch is in flight waits for the batch that holds its own change
    waits = []
    for i in range(200):
        o.commit("H", "T0", i % 4, i)
        waits.append(meta.committed(i))
    assert await asyncio.wait_for(asyncio.gather(*waits), 30) == list(range(200))
    assert _rows(tmp_path, "SELECT offsets FROM consumer_offsets WHERE key='T0@H'") == [("0:196,1:197,2:198,3:199",)]
    meta.close()


async def test_table_bodies_are_remembered_per_data_version_and_built_off_the_loop_when_large(tmp_path):
    from codec import admin_bodies as AB
    from codec import table_bodies as TB

    meta, t, g, o = _tables(tmp_path)
    for i in range(5000):  # above table_body.INLINE_MAX_ROWS: the join runs in the executor
        t.put(TopicConfig(f"T{i}", 4, 4))
    first = await t.wrapper_body()
    assert await t.wrapper_body() is first and t._wrapper.builds == 1  # unchanged version: the same bytes
    table = AB.decode_table(first, "topicConfigTable")
    assert len(table) == 5000 and table["T42"]["readQueueNums"] == 4
    assert json.loads(first)["dataVersion"]["counter"] == t.data_version.counter
    t.put(TopicConfig("T42", 2, 2))
    assert t.delete("T43")
    second = await t.wrapper_body()
    table = AB.decode_table(second, "topicConfigTable")
    assert table["T42"]["readQueueNums"] == 2 and "T43" not in table and len(table) == 4999
    names = json.loads(await t.topic_list_body())["topicList"]
    assert len(names) == 4999 and set(names) == set(t.table)
    reg = json.loads(await t.register_body())
    assert reg["topicConfigSerializeWrapper"] == json.loads(second)
    version, topics, _ = TB.decode_register_body_compressed(await t.register_body(compressed=True))
    assert version["counter"] == t.data_version.counter and len(topics) == 4999 and topics["T42"]["perm"] == 6
    g.get("CG1")
    assert set(AB.decode_table(await g.wrapper_body(), "subscriptionGroupTable")) == {"CG1"}
    for i in range(2500):
        o.commit(f"G{i}", "T1", i % 4, i)
    from codec.fastjson import loads_lenient

    offsets = loads_lenient(await o.wrapper_body())["offsetTable"]
    assert len(offsets) == 2500 and offsets["T1@G7"] == {"3": 7}
    meta.close()

    # after a restart the loaded rows' fragments are made by the first body (in slices), changes made
    # before that are in it too
    meta, t, g, _ = _tables(tmp_path)
    assert not t._members
    t.put(TopicConfig("T42", 3, 3))
    t.put(TopicConfig("Late", 1, 1))
    assert t.delete("T44")
    table = AB.decode_table(await t.wrapper_body(), "topicConfigTable")
    assert len(table) == 4999 and table["T42"]["readQueueNums"] == 3 and "Late" in table and "T44" not in table
    assert set(json.loads(await t.topic_list_body())["topicList"]) == set(table)
    assert set(AB.decode_table(await g.wrapper_body(), "subscriptionGroupTable")) == {"CG1"}
    meta.close()


async def test_replace_all_and_merge_stage_only_what_changed(tmp_path):
    meta, t, g, o = _tables(tmp_path)
    for i in range(30):
        t.put(TopicConfig(f"T{i}", 4, 4))
    g.get("A")
    g.get("B")
    o.commit("G", "T1", 0, 5)
    t.persist()
    before = t.data_version.counter
    master = {f"T{i}": TopicConfig(f"T{i}", 4, 4) for i in range(5, 30)}
    master["T7"] = TopicConfig("T7", 8, 8)
    master["New"] = TopicConfig("New", 1, 1)
    assert await t.replace_all(master, slice_n=4) == 5 + 2  # T0..T4 deleted, T7 changed, New added
    assert t.table == master and t.data_version.counter == before + 7
    from storage.subscription_group import SubscriptionGroupConfig
    assert await g.replace_all({"B": g.table["B"], "C": SubscriptionGroupConfig("C")}) == 2
    assert set(g.table) == {"B", "C"}
    assert o.merge({"T1@G": {0: 5, 1: 9}, "T2@H": {3: 1}, "bad": {0: 1}}) == 2
    assert o.query("G", "T1", 1) == 9 and o.groups_of("T2") == ["H"]
    meta.close()
    _, t2, g2, o2 = _tables(tmp_path)
    assert t2.table == master and set(g2.table) == {"B", "C"} and o2.query("H", "T2", 3) == 1
    t2.meta.close()


def test_a_schema_1_database_is_upgraded(tmp_path):
    """meta.db as the first MetaStore wrote it (one consumer_offset row per queue) opens with its offsets."""
    cfg = tmp_path / "config"
    cfg.mkdir()
    conn = sqlite3.connect(str(cfg / "meta.db"))
    conn.executescript("""
        CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;
        INSERT INTO meta VALUES ('schema', '1');
        CREATE TABLE topic (name TEXT PRIMARY KEY, read_queue_nums INTEGER, write_queue_nums INTEGER,
            perm INTEGER, topic_filter_type TEXT, topic_sys_flag INTEGER, ord INTEGER) WITHOUT ROWID;
        INSERT INTO topic VALUES ('T', 2, 2, 6, 'SINGLE_TAG', 0, 0);
        CREATE TABLE consumer_offset (key TEXT, queue_id INTEGER, offset INTEGER,
            PRIMARY KEY (key, queue_id)) WITHOUT ROWID;
        INSERT INTO consumer_offset VALUES ('T@G', 0, 5), ('T@G', 1, 7), ('U@H', 3, 1);
    """)
    conn.close()
    meta, t, _, o = _tables(tmp_path)
    assert t.get("T").read_queue_nums == 2 and o.query("G", "T", 1) == 7 and o.query("H", "U", 3) == 1
    meta.close()
    assert _rows(tmp_path, "SELECT v FROM meta WHERE k='schema'") == [("2",)]
    assert _rows(tmp_path, "SELECT name FROM sqlite_master WHERE name='consumer_offset'") == []


def test_a_torn_wal_tail_after_a_crash_leaves_the_tables_readable(tmp_path):
    """What kill -9 can leave: meta.db plus a WAL whose last frame is half written. The copy is opened as
    the next start would: every committed row is there, the torn tail is ignored."""
    import shutil

    meta, t, _, o = _tables(tmp_path)
    for i in range(300):
        t.put(TopicConfig(f"T{i}", 2, 2))
        o.commit("G", f"T{i}", 1, i)
    t.persist()  # committed, not checkpointed: the rows live in the WAL
    crashed = tmp_path / "crashed"
    (crashed / "config").mkdir(parents=True)
    for name in ("meta.db", "meta.db-wal"):
        shutil.copy(tmp_path / "config" / name, crashed / "config" / name)
    meta.close()
    wal = crashed / "config" / "meta.db-wal"
    assert wal.stat().st_size > 4096
    with open(wal, "ab") as f:
        f.write(b"\x37" * 3000)  # a frame cut short by the kill
    meta2, t2, _, o2 = _tables(crashed)
    assert len([n for n in t2.table if n.startswith("T")]) >= 300 and o2.query("G", "T299", 1) == 299
    t2.put(TopicConfig("After", 1, 1))
    meta2.close()
    _, t3, _, _ = _tables(crashed)
    assert "After" in t3 and "T0" in t3
    t3.meta.close()


async def test_a_row_sqlite_cannot_store_is_set_aside_and_the_batch_commits(tmp_path):
    """A group name with a lone surrogate (JSON allows "\\udc80" in a heartbeat) cannot be encoded to UTF-8:
    that row is set aside and logged, the rest of its batch is committed and acknowledged."""
    meta, t, g, o = _tables(tmp_path)
    t.put(TopicConfig("Good", 1, 1))
    g.get("bad\udc80group")
    o.commit("G", "Good", 0, 3)
    await asyncio.wait_for(meta.committed(), 30)
    assert meta.rows_set_aside == 1
    assert _rows(tmp_path, "SELECT name FROM topic") == [("Good",)]
    assert _rows(tmp_path, "SELECT key FROM consumer_offsets") == [("Good@G",)]
    t.put(TopicConfig("Later", 1, 1))  # the store keeps working
    await asyncio.wait_for(meta.committed(), 30)
    meta.close()
    assert ("Later",) in _rows(tmp_path, "SELECT name FROM topic")
