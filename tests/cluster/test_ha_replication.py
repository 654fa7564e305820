"""Master/slave replication in one process over real sockets (RocketMQ 4.x HA frames): a byte-identical
CommitLog, ConsumeQueues and index rebuilt on the slave, SYNC_MASTER answers, a read-only slave,
promotion, and a former master cutting its unreplicated tail."""

from __future__ import annotations

import os

import pytest

from codec.codes import TIMER_TOPIC
from tests.helpers.broker import _port_free, pick_port_pair
from tests.server.helpers import pull, send, until
from tests.server.raw import RawClient, decode_records

FSIZE = 1 << 20


def ha_port_pair() -> int:
    for _ in range(50):
        p = pick_port_pair()
        if _port_free(p + 1):
            return p
    raise RuntimeError("no free P-2, P, P+1")


def commitlog_bytes(store_root) -> bytes:
    d = os.path.join(store_root, "commitlog")
    return b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))


def same_commitlog(master, slave) -> bool:
    end = master.store.commitlog_max_offset()
    if slave.store.commitlog_max_offset() != end:
        return False
    a = master.store.replica_data(0, end)
    b = slave.store.replica_data(0, end)
    return a is not None and b is not None and bytes(a) == bytes(b)


@pytest.fixture
async def pair(make_broker, tmp_path):
    async def make(role="ASYNC_MASTER", **kw):
        mport, sport = ha_port_pair(), ha_port_pair()
        master = await make_broker(store=tmp_path / "m", port=mport, broker_role=role,
                                   mapped_file_size_commit_log=FSIZE, **kw)
        slave = await make_broker(store=tmp_path / "s", port=sport, broker_role="SLAVE", broker_id=1,
                                  ha_master_address=f"127.0.0.1:{mport + 1}", mapped_file_size_commit_log=FSIZE,
                                  slave_synchronize_interval_ms=200, **kw)
        return master, slave
    return make


async def test_slave_commitlog_is_byte_identical_and_queues_rebuilt(pair):
    master, slave = await pair()
    c = await RawClient.connect(master.config.broker_addr)
    for i in range(300):  # ~ 70 KiB: several frames, and a segment roll at 1 MiB is not needed here
        r = await send(c, "HaT", b"x" * 200 + str(i).encode(), tags="T", keys=f"k{i}", qid=i % 2)
        assert r.code == 0, r.remark
    await until(lambda: same_commitlog(master, slave), 30)
    assert slave.store.max_offset("HaT", 0) == master.store.max_offset("HaT", 0) == 150
    await until(lambda: slave.topics.get("HaT") is not None, 30)  # GET_ALL_TOPIC_CONFIG (21) synced
    s = await RawClient.connect(slave.config.broker_addr)
    got = await pull(s, "G", "HaT", 1, 0, max_nums=32)
    assert got.code == 0 and got.ext["suggestWhichBrokerId"] == "0"
    assert [m["body"][-2:] for m in decode_records(got.body)][:2] == [b"x1", b"x3"]
    assert len(slave.store.query_by_key("HaT", "k7", 4, 0, 1 << 62).buffers) == 1  # index built from the bytes
    refused = await send(s, "HaT", b"no", qid=0)
    assert refused.code == 14  # SERVICE_NOT_AVAILABLE: a slave takes no writes
    # a slave never moves a consumer's offset (PULL_OFFSET_MOVED -> PULL_RETRY_IMMEDIATELY) nor stores one
    ahead = await pull(s, "G", "HaT", 0, 5000, commit_offset=7)
    assert ahead.code == 20 and ahead.ext["suggestWhichBrokerId"] == "0"
    assert slave.offsets.query("G", "HaT", 0) == -1
    master_pull = await pull(c, "G", "HaT", 0, 5000, commit_offset=7)
    assert master_pull.code == 21 and master.offsets.query("G", "HaT", 0) == 7
    await c.close()
    await s.close()


async def test_segment_roll_replicates_blank_and_next_file(pair):
    master, slave = await pair()
    c = await RawClient.connect(master.config.broker_addr)
    body = b"y" * 3000
    for _i in range(450):  # > 1 MiB: the master writes an END-OF-FILE blank and a second segment
        assert (await send(c, "Roll", body, qid=0)).code == 0
    assert master.store.commitlog_max_offset() > FSIZE
    await until(lambda: slave.store.commitlog_max_offset() == master.store.commitlog_max_offset(), 30)
    assert commitlog_bytes(master.config.store_path_root_dir) == commitlog_bytes(slave.config.store_path_root_dir)
    assert slave.store.max_offset("Roll", 0) == 450
    await c.close()


async def test_sync_master_waits_for_the_slave_and_reports_slave_not_available(pair, make_broker, tmp_path):
    master, slave = await pair("SYNC_MASTER")
    c = await RawClient.connect(master.config.broker_addr)
    await until(lambda: bool(master.replica.ha_service.slaves.connections), 30)
    r = await send(c, "Sync", b"acked", qid=0)
    assert r.code == 0, r.remark
    # the answer came only after the slave had the bytes
    assert slave.store.commitlog_max_offset() >= master.replica.ha_service.push2slave_max > 0
    assert master.replica.ha_service.push2slave_max == master.store.commitlog_max_offset()
    await slave.shutdown()
    await until(lambda: not master.replica.ha_service.slaves.connections, 30)
    lone = await send(c, "Sync", b"nobody", qid=0)
    assert lone.code == 11 and lone.remark == "SLAVE_NOT_AVAILABLE"
    assert lone.ext["msgId"]  # stored on the master all the same
    await c.close()


async def test_sync_master_answers_a_pipelined_run_once_the_slave_has_it(pair):
    """A run of pipelined sends (one read, one put, ONE answer waiting for the slave for all of them): each
    WAIT send answered SUCCESS with its own msgId and queue offset, none before the slave holds its record;
    WAIT=false sends and a oneway one in the same run; the master's connection has no request left in flight."""
    import asyncio

    from tests.server.helpers import SEND_MESSAGE_V2, send_ext
    from tests.server.raw import props

    master, slave = await pair("SYNC_MASTER")
    c = await RawClient.connect(master.config.broker_addr)
    await until(lambda: bool(master.replica.ha_service.slaves.connections), 30)
    wait = [i % 5 != 2 for i in range(60)]
    reqs = [(SEND_MESSAGE_V2, send_ext("Pipe", props(WAIT="true" if w else "false", UNIQ_KEY=f"u{i}"), i % 3, v2=True),
             b"p%d" % i, i == 59) for i, w in enumerate(wait)]
    futs = c.pipeline(reqs)
    replies = await asyncio.gather(*(f for f in futs if f is not None))
    assert [r.code for r in replies] == [0] * 59, [(r.code, r.remark) for r in replies]
    assert len({r.ext["msgId"] for r in replies}) == 59
    for q in range(3):
        got = sorted(int(r.ext["queueOffset"]) for i, r in enumerate(replies) if i % 3 == q)
        assert got == list(range(len(got)))
    slave_end = slave.store.commitlog_max_offset()
    for i, r in enumerate(replies):  # a WAIT send's record (offset msgId: its CommitLog offset) is on the slave
        if wait[i]:
            assert int(r.ext["msgId"][-16:], 16) < slave_end
    await until(lambda: master.store.commitlog_max_offset() == slave.store.commitlog_max_offset(), 30)  # the oneway too
    # the run's one answer counted as its requests, and gave them all back (the slave's own requests, if any, end too)
    await until(lambda: all(conn.inflight == 0 for conn in master.remoting.server.connections), 10)
    await c.close()


async def test_sync_master_flush_slave_timeout(make_broker, tmp_path):
    """A 'slave' that connects and never acks beyond its first report: FLUSH_SLAVE_TIMEOUT (12)."""
    import asyncio
    import struct

    port = ha_port_pair()
    master = await make_broker(store=tmp_path / "m", port=port, broker_role="SYNC_MASTER", slave_timeout=300)
    reader, writer = await asyncio.open_connection("127.0.0.1", port + 1)
    writer.write(struct.pack(">q", master.store.commitlog_max_offset()))
    await writer.drain()
    await until(lambda: master.replica.ha_service.slaves.connections and
                next(iter(master.replica.ha_service.slaves.connections)).request_offset >= 0, 30)
    c = await RawClient.connect(master.config.broker_addr)
    r = await send(c, "Slow", b"m", qid=0)
    assert r.code == 12 and r.remark == "FLUSH_SLAVE_TIMEOUT"
    writer.close()
    await c.close()


async def test_promote_and_former_master_truncates_its_tail(pair, make_broker, tmp_path):
    master, slave = await pair()
    c = await RawClient.connect(master.config.broker_addr)
    for i in range(20):
        assert (await send(c, "P", b"r%d" % i, qid=0)).code == 0
    await until(lambda: same_commitlog(master, slave), 30)
    replicated = master.store.commitlog_max_offset()
    # the slave's HA link goes away: what the master writes now never reaches it
    slave.replica.ha_client.link.stop()
    await until(lambda: not master.replica.ha_service.slaves.connections, 30)
    for i in range(5):
        assert (await send(c, "P", b"lost%d" % i, qid=0)).code == 0
    old_end = master.store.commitlog_max_offset()
    await c.close()
    m_port = master.config.listen_port
    await master.shutdown()

    s = await RawClient.connect(slave.config.broker_addr)
    info = await s.invoke(3101, {}, b'{"brokerRole":"ASYNC_MASTER"}')
    assert info.code == 0, info.remark
    assert slave.config.broker_role == "ASYNC_MASTER" and slave.config.broker_id == 0
    assert (await send(s, "P", b"new-master", qid=0)).code == 0
    # the former master comes back as a slave of the new one and drops its 5 unreplicated records
    back = await make_broker(store=tmp_path / "m", port=m_port, broker_role="SLAVE", broker_id=1,
                             ha_master_address=f"127.0.0.1:{slave.config.listen_port + 1}",
                             mapped_file_size_commit_log=FSIZE, slave_synchronize_interval_ms=200)
    await until(lambda: back.topics.get("P") is not None, 30)
    assert back.replica.epoch == slave.replica.epoch == 1
    assert old_end > replicated
    await until(lambda: same_commitlog(slave, back), 30)
    b = await RawClient.connect(back.config.broker_addr)
    got = await pull(b, "G", "P", 0, 0, max_nums=32)
    bodies = [m["body"] for m in decode_records(got.body)]
    assert bodies == [b"r%d" % i for i in range(20)] + [b"new-master"]
    await s.close()
    await b.close()


async def test_late_slave_promoted_redelivers_nothing_already_delivered(pair, make_broker, tmp_path):
    """A slave that joins after the master delivered part of its timers and delay-level messages links
    the timer units where the master did (dropping the ones already put) and takes the delivered
    offsets: promoted, it delivers exactly the pending ones.

    The timers use TIMER_DELAY_MS, counted from the broker's receipt: an absolute TIMER_DELIVER_MS taken
    once at the start is already past when a loaded host took longer than the delay to get here, and a
    due timer is put at once, never through the wheel (the slave then has nothing to follow)."""
    mport = ha_port_pair()
    master = await make_broker(store=tmp_path / "m", port=mport, message_delay_level="100ms 3s")
    c = await RawClient.connect(master.config.broker_addr)
    for i in range(40):
        assert (await send(c, "Late", b"past-t%d" % i, qid=0, UNIQ_KEY=f"pt{i}", TIMER_DELAY_MS=200)).code == 0
        assert (await send(c, "Late", b"past-d%d" % i, qid=0, UNIQ_KEY=f"pd{i}", DELAY=1)).code == 0
    await until(lambda: master.store.max_offset("Late", 0) == 80, 60)  # all delivered
    for i in range(40):
        assert (await send(c, "Late", b"due-t%d" % i, qid=0, UNIQ_KEY=f"ft{i}", TIMER_DELAY_MS=2500)).code == 0
        assert (await send(c, "Late", b"due-d%d" % i, qid=0, UNIQ_KEY=f"fd{i}", DELAY=2)).code == 0
    await c.close()
    assert master.store.max_offset(TIMER_TOPIC, 0) == 80  # every timer went through the wheel
    sport = ha_port_pair()
    slave = await make_broker(store=tmp_path / "s", port=sport, broker_role="SLAVE", broker_id=1,
                              ha_master_address=f"127.0.0.1:{mport + 1}", message_delay_level="100ms 3s",
                              slave_synchronize_interval_ms=200)
    timer = master.timer_service
    await until(lambda: slave.replica.sync.progress is not None and slave.replica.sync.progress.timer.queue_offset
                == timer.commit_queue_offset == 80 and slave.timer_service.commit_queue_offset == 80, 60)
    # the 40 already put by the master are never linked here (on a slow host some of the later 40 may be
    # put by the master too before the slave catches up: then they are skipped as well)
    assert slave.timer_service.follower_skipped >= 40
    assert slave.timer_service.follower_skipped + slave.timer_service.wheel.pending == 80
    await until(lambda: slave.topics.get("Late") is not None, 60)
    await master.shutdown()
    s = await RawClient.connect(slave.config.broker_addr)
    assert (await s.invoke(3101, {}, b"{}")).code == 0
    assert slave.delay_service.levels[0].offset == 40  # level 1: all delivered by the old master
    await until(lambda: slave.store.max_offset("Late", 0) >= 160, 60)
    await until(lambda: slave.timer_service.wheel.pending == 0 and slave.delay_service.stats()["pending_total"] == 0,
                60)
    assert slave.store.max_offset("Late", 0) == 160
    got = await pull(s, "G", "Late", 0, 0, max_nums=32)
    assert got.code == 0, (got.code, got.remark)
    keys = []
    off = 0
    while got.code == 0:
        recs = decode_records(got.body)
        keys += [m["props"]["UNIQ_KEY"] for m in recs]
        off = int(got.ext["nextBeginOffset"])
        got = await pull(s, "G", "Late", 0, off, max_nums=32)
    assert len(keys) == len(set(keys)) == 160
    await s.close()


@pytest.mark.process
async def test_promote_is_an_admin_request_under_acl(pair, make_broker, tmp_path):
    """PROMOTE_BROKER needs an admin account when aclEnable; `delaymq broker promote --access-key` signs it."""
    import asyncio
    import subprocess
    import sys

    from tests.helpers.broker import REPO_ROOT
    from tests.security.conftest import ACL_YAML, ADMIN_AK, ADMIN_SK, SUBONLY_AK, SUBONLY_SK

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    mport = ha_port_pair()
    await make_broker(store=tmp_path / "m", port=mport)
    slave = await make_broker(store=tmp_path / "s", port=ha_port_pair(), broker_role="SLAVE", broker_id=1,
                              ha_master_address=f"127.0.0.1:{mport + 1}", acl_enable=True, acl_file=str(acl))

    def promote(*auth: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "client.cli", "broker", "promote", "-n", slave.config.broker_addr,
                               "-b", slave.config.broker_addr, "--output", "json", *auth], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)

    loop = asyncio.get_running_loop()
    for auth in ((), ("--access-key", SUBONLY_AK, "--secret-key", SUBONLY_SK)):
        refused = await loop.run_in_executor(None, promote, *auth)
        assert refused.returncode != 0 and slave.config.broker_role == "SLAVE", refused.stdout
        assert "16" in refused.stderr or "permission" in refused.stderr.lower(), refused.stderr
    ok = await loop.run_in_executor(None, promote, "--access-key", ADMIN_AK, "--secret-key", ADMIN_SK)
    assert ok.returncode == 0, ok.stderr
    assert slave.config.broker_role == "ASYNC_MASTER" and slave.config.broker_id == 0
