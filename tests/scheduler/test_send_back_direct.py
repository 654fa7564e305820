"""The CONSUMER_SEND_MSG_BACK processor called directly on a real broker's store, tables, hooks and
DelayLevelService (no sockets; the raw-frame version is test_send_back.py)."""

from __future__ import annotations

from codec.command import RemotingCommand
from codec.msgid import offset_msg_id
from codec.record import encode_record
from scheduler.delay_levels import DelayLevelService
from server.broker import BrokerController
from server.config import BrokerConfig
from server.processor_wiring import send_back_deps
from server.processors.consumer_send_back import ConsumerSendBackProcessor
from server.put_hooks import PutHooks
from server.wiring import delay_config, make_message_store, open_message_store, put_request, timer_config
from tests.helpers.checks import present
from tests.scheduler.helpers import QueueWatcher, make_record, read_queue
from tests.server.helpers import LoopbackPeer


async def _broker(tmp_path):
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path / "store"), message_delay_level="100ms 150ms 200ms 250ms",
                       mapped_file_size_commit_log=8 << 20)
    b = BrokerController(cfg)
    b.topics.load()
    b.groups.load()
    b.topics.ensure_system_topics(len(b.levels), False)
    b.store = make_message_store(cfg, b.levels)
    open_message_store(b.store)
    b.hooks = PutHooks(cfg, b.levels, timer_config(cfg))
    b.delay_service = DelayLevelService(b.store, delay_config(cfg, b.levels))
    b.delay_service.start()
    rec = make_record("SB", 0, body=b"payload")
    [res] = b.store.put([put_request(encode_record(rec), "SB", 0, rec.properties, -1)])
    return b, res


async def _close(b):
    await b.delay_service.shutdown()
    await b.store.shutdown()


def _cmd(phys, group="G", level=0, **extra):
    ext = {"offset": phys, "group": group, "delayLevel": level, **extra}
    return RemotingCommand.request(36, ext)


async def test_retry_then_dlq(tmp_path):
    b, orig = await _broker(tmp_path)
    proc = ConsumerSendBackProcessor(send_back_deps(b))
    try:
        watch = QueueWatcher(b.store, "%RETRY%G", 0)
        r = present(await proc(LoopbackPeer(), _cmd(orig.phys_offset)))
        assert r.code == 0, r.remark
        assert b.store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1  # level 3 = 3 + reconsumeTimes 0
        await watch.wait_for(1, timeout=30)
        [(_, m)] = read_queue(b.store, "%RETRY%G")
        host, port = m.store_host
        assert m.reconsume_times == 1 and m.body == b"payload"
        assert m.properties["RETRY_TOPIC"] == "SB" and m.properties["DELAY"] == "3"
        assert m.properties["ORIGIN_MESSAGE_ID"] == offset_msg_id(host, port, orig.phys_offset)
        assert m.store_timestamp >= orig.store_timestamp + 200
        # version >= 121 honours maxReconsumeTimes: 1 >= 1 → DLQ
        cmd = _cmd(m.commitlog_offset, maxReconsumeTimes=1)
        cmd.version = 409
        r = present(await proc(LoopbackPeer(), cmd))
        assert r.code == 0, r.remark
        [(_, d)] = read_queue(b.store, "%DLQ%G")
        assert d.properties["DELAY"] == "0" and d.reconsume_times == 2 and d.queue_id == 0
        assert d.properties["ORIGIN_MESSAGE_ID"] == m.properties["ORIGIN_MESSAGE_ID"]
        r = present(await proc(LoopbackPeer(), _cmd(10**12)))
        assert r.code == 1 and r.remark == f"look message by offset failed, {10**12}"
    finally:
        await _close(b)
