"""The HA keys: a bad value stops the start with one line naming the key; the derived addresses."""

import pytest

from server.config import BrokerConfig, ConfigError


@pytest.mark.parametrize(("fields", "key"), [
    ({"broker_role": "MASTER"}, "brokerRole"),
    ({"broker_role": "SLAVE", "broker_id": 0}, "brokerId"),
    ({"broker_role": "SLAVE", "broker_id": 1, "ha_master_address": "10.0.0.1"}, "haMasterAddress"),
    ({"scheduler_sync_interval_ms": 80}, "schedulerSyncIntervalMs"),
])
def test_bad_ha_config_names_the_key(fields, key):
    with pytest.raises(ConfigError) as e:
        BrokerConfig(**fields).validate()
    assert e.value.key == key and str(e.value).startswith(f"config key {key}:")


def test_roles_and_ha_addresses():
    m = BrokerConfig(listen_port=10911, broker_role="sync_master", broker_id=3)
    m.validate()
    assert (m.broker_role, m.broker_id, m.ha_port, m.is_slave) == ("SYNC_MASTER", 0, 10912, False)
    s = BrokerConfig(listen_port=10921, broker_role="SLAVE", broker_id=2, ha_listen_port=30000)
    s.validate()
    assert s.is_slave and s.ha_port == 30000 and s.ha_server_addr.endswith(":30000")
