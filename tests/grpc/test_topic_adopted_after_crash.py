"""A topic a send auto-created is answered before the metadata writer commits it (storage.meta_store),
so a kill -9 in that window lost the topic while its messages stayed stored: after the restart a consumer
got nothing (seen under load in test_pop_durability). The broker now adopts, at start, every topic whose
ConsumeQueues it recovered but whose config is missing. Here the lost commit is made certain: the
topic's row is deleted from the stopped broker's meta.db, as a crash before the commit leaves it."""

from __future__ import annotations

import sqlite3
import time

import pytest

from server.grpc.v2 import definition_pb2 as pb
from tests.grpc.conftest import grpc_broker, uniq
from tests.grpc.raw import RawClient


@pytest.mark.process
async def test_a_topic_whose_config_a_crash_lost_is_adopted_from_its_stored_queues(broker_factory):
    b = grpc_broker(broker_factory)
    topic, group = uniq("TAdopt"), uniq("GAdopt")
    c = RawClient(b.grpc_addr)
    try:
        for i in range(4):
            assert (await c.send(topic, f"a{i}".encode())).status.code == pb.OK
    finally:
        await c.close()
    b.kill()
    db = sqlite3.connect(b.store / "config" / "meta.db")
    try:
        names = [r[0] for r in db.execute("SELECT name FROM topic")]
        assert topic in names  # the commit did happen here; take it back as the crash would have
        db.execute("DELETE FROM topic WHERE name = ?", (topic,))
        db.commit()
    finally:
        db.close()
    b.start()
    c = RawClient(b.grpc_addr)
    try:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            code, msgs = await c.receive(group, topic, invisible_s=30, poll_s=2)
            assert code == pb.OK, code
            got += msgs
        assert sorted(m.body for m in got) == [b"a0", b"a1", b"a2", b"a3"]
    finally:
        await c.close()
    assert "topics.adopted_from_store" in b.stderr_path.read_text(), b.diagnostics()
