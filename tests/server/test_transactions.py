"""Transactional messages over real sockets: half messages stay invisible until END_TRANSACTION,
rollback drops them, unfinished ones are checked back with the producer, and all of it survives a
restart. The producer side is played with raw frames, as the Java client sends them."""

import asyncio
import json

from codec.msgid import decode_offset_msg_id
from codec.record import decode_record
from server.broker import BrokerController
from tests.server.helpers import pull, send, until
from tests.server.raw import RawClient, decode_records

HEART_BEAT, END_TRANSACTION, GET_MAX_OFFSET, RUNTIME_INFO = 34, 37, 30, 28
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0


async def send_half(c, topic: str, body: bytes, group: str = "TXG", **extra):
    r = await send(c, topic, body, qid=0, TRAN_MSG="true", PGROUP=group, **extra)
    assert r.code == 0, r.remark
    return r


def end_ext(r, kind: int, group: str = "TXG", from_check: bool = False) -> dict:
    """EndTransactionRequestHeader as the Java client fills it from the SendResult."""
    _, _, phys = decode_offset_msg_id(r.ext["msgId"])
    return {"producerGroup": group, "tranStateTableOffset": r.ext["queueOffset"], "commitLogOffset": str(phys),
            "commitOrRollback": str(kind), "fromTransactionCheck": "true" if from_check else "false",
            "msgId": r.ext["msgId"], "transactionId": r.ext["msgId"]}


async def max_offset(c, topic: str, qid: int = 0) -> int:
    r = await c.invoke(GET_MAX_OFFSET, {"topic": topic, "queueId": str(qid)})
    return int(r.ext.get("offset", 0)) if r.code == 0 else 0


async def producer_heartbeat(c, group: str = "TXG") -> None:
    body = json.dumps({"clientID": "127.0.0.1@tx", "producerDataSet": [{"groupName": group}],
                       "consumerDataSet": []}).encode()
    assert (await c.invoke(HEART_BEAT, {}, body)).code == 0


async def test_half_is_invisible_until_commit_and_commit_is_idempotent(broker_ctl: BrokerController, client: RawClient):
    r = await send_half(client, "TxA", b"order-1", KEYS="o1")
    assert await max_offset(client, "TxA") == 0  # parked in the half topic
    assert await max_offset(client, "RMQ_SYS_TRANS_HALF_TOPIC") == 1
    done = await client.invoke(END_TRANSACTION, end_ext(r, COMMIT))
    assert done.code == 0, done.remark
    assert await max_offset(client, "TxA") == 1
    again = await client.invoke(END_TRANSACTION, end_ext(r, COMMIT))
    assert again.code == 0 and await max_offset(client, "TxA") == 1  # not committed twice
    got = await pull(client, "CG", "TxA", 0, 0)
    [msg] = decode_records(got.body)
    assert msg["body"] == b"order-1" and msg["topic"] == "TxA" and msg["queue_id"] == 0
    assert msg["sys_flag"] & 0xC == COMMIT
    p = msg["props"]
    assert "REAL_TOPIC" not in p and "REAL_QID" not in p and "TRAN_MSG" not in p
    assert p["KEYS"] == "o1" and p["PGROUP"] == "TXG" and p["__transactionId__"] == p["UNIQ_KEY"]
    info = json.loads((await client.invoke(RUNTIME_INFO, {})).body)["table"]
    assert info["transactionHalfPending"] == "0" and info["transactionCommitted"] == "1"


async def test_rollback_never_delivers_and_bad_ends_are_refused(broker_ctl: BrokerController, client: RawClient):
    r = await send_half(client, "TxB", b"cancelled")
    wrong_group = await client.invoke(END_TRANSACTION, end_ext(r, COMMIT, group="OTHER"))
    assert wrong_group.code == 1 and wrong_group.remark == "The producer group wrong"
    bad_offset = dict(end_ext(r, COMMIT), tranStateTableOffset="7")
    assert (await client.invoke(END_TRANSACTION, bad_offset)).remark == "The transaction state table offset wrong"
    plain = await send(client, "TxB", b"plain", qid=0)
    not_half = dict(end_ext(r, COMMIT), commitLogOffset=str(decode_offset_msg_id(plain.ext["msgId"])[2]))
    assert (await client.invoke(END_TRANSACTION, not_half)).remark == "Find prepared transaction message failed"
    assert (await client.invoke(END_TRANSACTION, end_ext(r, ROLLBACK))).code == 0
    assert (await client.invoke(END_TRANSACTION, end_ext(r, COMMIT))).code == 0  # already ended: no-op
    assert await max_offset(client, "TxB") == 1  # only the plain message
    assert await max_offset(client, "RMQ_SYS_TRANS_OP_HALF_TOPIC") == 1


async def test_unfinished_half_is_checked_back_and_committed_from_the_check(make_broker):
    b = await make_broker(transaction_time_out=200, transaction_check_interval=60000)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await producer_heartbeat(c)
        r = await send_half(c, "TxC", b"ask-me")
        c.oneway(END_TRANSACTION, end_ext(r, UNKNOWN))  # "unknown" from the local transaction: no reply
        check = await asyncio.wait_for(c.requests.get(), 30)
        assert check.code == 39 and check.header["flag"] & 2  # oneway CHECK_TRANSACTION_STATE
        e = check.ext
        assert e["topic"] == "TxC" and e["tranStateTableOffset"] == r.ext["queueOffset"]
        assert e["offsetMsgId"] == r.ext["msgId"] and e["transactionId"] == e["msgId"]
        assert int(e["commitLogOffset"]) == decode_offset_msg_id(r.ext["msgId"])[2]
        rec, _ = decode_record(check.body)
        assert rec.topic == "TxC" and rec.body == b"ask-me" and rec.properties["UNIQ_KEY"] == e["msgId"]
        answer = end_ext(r, COMMIT, from_check=True)
        assert (await c.invoke(END_TRANSACTION, answer)).code == 0
        assert await max_offset(c, "TxC") == 1
    finally:
        await c.close()


async def test_halves_survive_restart_and_discard_after_max_checks(make_broker, tmp_path):
    store = tmp_path / "tx-store"
    b = await make_broker(store=store)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        done = await send_half(c, "TxD", b"committed-before-restart")
        assert (await c.invoke(END_TRANSACTION, end_ext(done, COMMIT))).code == 0
        open_half = await send_half(c, "TxD", b"still-open")
    finally:
        await c.close()
    await b.shutdown()
    b2 = await make_broker(store=store, transaction_time_out=100, transaction_check_max=1,
                           transaction_check_interval=100)
    assert list(b2.transactions.pending) == [int(open_half.ext["queueOffset"])]  # the committed one is known done
    c2 = await RawClient.connect(b2.config.broker_addr)
    try:
        await producer_heartbeat(c2)
        check = await asyncio.wait_for(c2.requests.get(), 30)
        assert check.code == 39 and check.ext["tranStateTableOffset"] == open_half.ext["queueOffset"]
        await until(lambda: b2.transactions.discarded == 1, 30)  # one check allowed, then discarded
        assert not b2.transactions.pending and await max_offset(c2, "TxD") == 1
        assert await max_offset(c2, "TRANS_CHECK_MAX_TIME_TOPIC") == 1
    finally:
        await c2.close()


async def test_delay_level_applies_when_the_transaction_commits(make_broker):
    b = await make_broker(message_delay_level="100ms 200ms")
    c = await RawClient.connect(b.config.broker_addr)
    try:
        r = await send_half(c, "TxE", b"later", DELAY="2")
        assert (await c.invoke(END_TRANSACTION, end_ext(r, COMMIT))).code == 0
        assert await max_offset(c, "SCHEDULE_TOPIC_XXXX", 1) == 1  # level 2 -> queue 1
        got = await pull(c, "CG", "TxE", 0, 0, suspend_ms=5000, timeout=10)
        assert got.code == 0 and [m["body"] for m in decode_records(got.body)] == [b"later"]
    finally:
        await c.close()
