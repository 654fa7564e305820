"""An in-process BrokerController on an ephemeral 127.0.0.1 port with a tmp store, plus a raw client."""

from __future__ import annotations

import pytest

from server.broker import BrokerController
from server.config import BrokerConfig
from tests.helpers.broker import pick_port_pair
from tests.server.raw import RawClient


@pytest.fixture
async def make_broker(tmp_path):
    """`await make(**config_fields)` → started BrokerController; all are shut down at teardown."""
    made = []

    async def make(store=None, port=None, **fields):
        cfg = BrokerConfig(store_path_root_dir=str(store or tmp_path / "store"),
                           listen_port=port or pick_port_pair(), listen_host="127.0.0.1",
                           **{"mapped_file_size_commit_log": 8 << 20, "max_hash_slot_num": 65536,
                              "max_index_num": 400_000, "grpc_listen_port": 0, **fields})
        b = BrokerController(cfg)
        await b.start()
        made.append(b)
        return b

    yield make
    for b in made:
        await b.shutdown()


@pytest.fixture
async def broker_ctl(make_broker):
    return await make_broker()


@pytest.fixture
async def client(broker_ctl):
    c = await RawClient.connect(broker_ctl.config.broker_addr)
    yield c
    await c.close()
