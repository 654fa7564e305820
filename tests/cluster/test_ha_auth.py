"""The HA port with haAuthSecret: a raw socket that does not prove the secret gets the challenge and
nothing else and is closed; a slave with the secret replicates; one with a wrong secret replicates nothing."""

from __future__ import annotations

import asyncio

import pytest

from codec.ha import (
    AUTH_CHALLENGE_SIZE,
    AUTH_MAGIC,
    AUTH_PROOF_SIZE,
    auth_proof,
    decode_challenge,
    encode_report,
)
from tests.cluster.test_ha_replication import FSIZE, ha_port_pair, same_commitlog
from tests.server.helpers import send, until
from tests.server.raw import RawClient

SECRET = "ha-shared-secret-0123456789"


@pytest.fixture
async def master(make_broker, tmp_path):
    b = await make_broker(store=tmp_path / "m", port=ha_port_pair(), mapped_file_size_commit_log=FSIZE,
                          ha_auth_secret=SECRET)
    c = await RawClient.connect(b.config.broker_addr)
    for i in range(20):
        assert (await send(c, "HaAuthT", b"secret-body-%d" % i, qid=0)).code == 0
    await c.close()
    return b


async def read_all(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """Everything the master sends until it closes the connection (TimeoutError if it does not)."""
    return await asyncio.wait_for(reader.read(-1), timeout)


@pytest.mark.parametrize("proof", ["report", "wrong"])
async def test_unauthenticated_peer_gets_only_the_challenge_and_is_closed(master, proof):
    reader, writer = await asyncio.open_connection("127.0.0.1", master.config.ha_port)
    challenge = await asyncio.wait_for(reader.readexactly(AUTH_CHALLENGE_SIZE), 30)
    assert challenge.startswith(AUTH_MAGIC)
    if proof == "report":  # what an Apache slave sends: its offset, as if nothing was asked
        writer.write(encode_report(0) * (AUTH_PROOF_SIZE // 8))
    else:
        writer.write(auth_proof(b"not-the-secret-at-all", decode_challenge(challenge)))
    await writer.drain()
    rest = await read_all(reader, 5)
    assert rest == b"", "the master sent HA bytes to a peer that did not prove the secret"
    assert not master.replica.ha_service.slaves.connections and master.replica.ha_service.auth_failures == 1
    writer.close()


async def test_silent_peer_is_dropped(master):
    reader, writer = await asyncio.open_connection("127.0.0.1", master.config.ha_port)
    got = await read_all(reader, 15)  # AUTH_TIMEOUT_S, then the master closes
    assert len(got) == AUTH_CHALLENGE_SIZE and got.startswith(AUTH_MAGIC)
    writer.close()


async def test_slave_with_the_secret_replicates_one_without_does_not(master, make_broker, tmp_path):
    ha = f"127.0.0.1:{master.config.ha_port}"
    wrong = await make_broker(store=tmp_path / "w", port=ha_port_pair(), broker_role="SLAVE", broker_id=1,
                              ha_master_address=ha, mapped_file_size_commit_log=FSIZE,
                              ha_auth_secret="a-different-secret-000")
    slave = await make_broker(store=tmp_path / "s", port=ha_port_pair(), broker_role="SLAVE", broker_id=1,
                              ha_master_address=ha, mapped_file_size_commit_log=FSIZE, ha_auth_secret=SECRET)
    await until(lambda: same_commitlog(master, slave), 30)
    await until(lambda: master.replica.ha_service.auth_failures >= 1, 30)  # the wrong one tried and was dropped
    assert len(master.replica.ha_service.slaves.connections) == 1  # the right slave only
    assert wrong.store.commitlog_max_offset() == 0
