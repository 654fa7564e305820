"""EXCHANGE_BROKER_HA_INFO (906), the form a slave asks its master with (Apache 5.1.3's retrieveBrokerHaInfo):
a master answers its own brokerIP2:haListenPort (whatever its listenPort), its CommitLog end at start and
its address; the form that pushes an address, and a malformed header, get an error code with a remark."""

from codec.codes import RequestCode, ResponseCode
from codec.controller import ExchangeHAInfoRequestHeader, ExchangeHAInfoResponseHeader
from server.broker import BrokerController
from tests.server.raw import RawClient

EXCHANGE = int(RequestCode.EXCHANGE_BROKER_HA_INFO)


async def test_a_master_answers_its_ha_address(broker_ctl: BrokerController, client: RawClient) -> None:
    cfg = broker_ctl.config
    r = await client.invoke(EXCHANGE, ExchangeHAInfoRequestHeader().to_ext())
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    h = ExchangeHAInfoResponseHeader.from_ext(r.ext)
    assert (h.masterHaAddress, h.masterAddress) == (cfg.ha_server_addr, cfg.broker_addr)
    assert h.masterHaAddress == f"{cfg.broker_ip2 or cfg.broker_ip1}:{cfg.ha_port}"
    assert h.masterFlushOffset is not None and 0 <= h.masterFlushOffset <= broker_ctl.started_store.commitlog_max_offset()


async def test_a_push_or_a_bad_header_gets_an_error_and_a_remark(broker_ctl: BrokerController, client: RawClient) -> None:
    push = await client.invoke(EXCHANGE, ExchangeHAInfoRequestHeader("127.0.0.1:1", 0, "127.0.0.1:2").to_ext())
    assert push.code == ResponseCode.SYSTEM_ERROR and "masterHaAddress" in (push.remark or ""), (push.code, push.remark)
    bad = await client.invoke(EXCHANGE, {"masterFlushOffset": "many"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "masterFlushOffset" in (bad.remark or ""), (bad.code, bad.remark)
