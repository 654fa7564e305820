"""TransactionProducer against a real broker subprocess: commit delivers, rollback never does, an
unknown outcome is settled by the broker's check-back."""

from __future__ import annotations

import pytest

from client import LocalTransactionState, Message, PushConsumer, TransactionProducer
from client.admin import Admin
from tests.client.conftest import Collector, uniq

pytestmark = pytest.mark.process

COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)


async def test_commit_delivers_rollback_does_not_and_check_back_settles_unknown(broker_factory):
    broker = broker_factory(config={"transactionTimeOut": 300, "transactionCheckInterval": 1000})
    topic = uniq("TxT")
    broker.create_topic(topic, queues=1)
    checked: list[Message] = []

    def execute(msg, arg):
        return {"yes": COMMIT, "no": ROLLBACK, "ask": UNKNOW}[arg]

    async def check(msg):
        checked.append(msg)
        return COMMIT

    col = Collector()
    consumer = PushConsumer(uniq("TxC"), broker.namesrv, listener=col, consume_from="first")
    consumer.subscribe(topic)
    async with consumer, TransactionProducer(uniq("TxP"), broker.namesrv, execute=execute, check=check) as p:
        results = [await p.send_in_transaction(Message(topic, body.encode(), keys=body), arg=body)
                   for body in ("yes", "no", "ask")]
        assert [r.state for r in results] == [COMMIT, ROLLBACK, UNKNOW]
        got = await col.wait_for(2, timeout=30)  # "yes" at once, "ask" after the check-back
        assert sorted(m.body for m in got) == [b"ask", b"yes"]
        assert [m.body for m in checked] == [b"ask"] and checked[0].topic == topic
        assert {m.msg_id for m in got} == {results[0].send_result.msg_id, results[2].send_result.msg_id}
    async with Admin(broker.namesrv) as admin:
        [q] = await admin.topic_status(topic)
    assert q.max_offset == 2  # the rolled-back half never reached the topic
