"""Issue 4: memory must not grow with pending scheduled messages (index entries, mapped pages)."""

from __future__ import annotations

from codec.codes import SCHEDULE_TOPIC, TIMER_TOPIC
from codec.record import decode_record
from storage.message_store import PutStatus
from tests.storage.conftest import open_store, request


def test_system_topic_records_get_no_index_entries_but_real_topics_do(tmp_path):
    s = open_store(tmp_path / "s")
    res = s.put([request(topic=SCHEDULE_TOPIC, keys="k1", uniq="U1"),
                 request(topic=TIMER_TOPIC, keys="k2", uniq="U2"),
                 request(topic="Real", keys="k1", uniq="U1")])
    assert all(r.status is PutStatus.PUT_OK for r in res)
    assert s.index.entries == 2 and set(s.index.table) == {"Real#k1", "Real#U1"}
    assert s.query_by_key(SCHEDULE_TOPIC, "k1", 10).buffers == []
    assert s.query_by_key(TIMER_TOPIC, "U2", 10).buffers == []
    q = s.query_by_key("Real", "U1", 10)
    assert [decode_record(b, 0)[0].commitlog_offset for b in q.buffers] == [res[2].phys_offset]
    s.close()
    s = open_store(tmp_path / "s")  # reload from keys.idx: still only the real topic's keys
    assert s.index.entries == 2 and len(s.query_by_key("Real", "k1", 10).buffers) == 1
    s.close()
