"""Controller mode's keys (a bad value stops the start with one line naming the key) and the
broker-identity files in the store root (server/cluster/controller/identity.py, real files)."""

from pathlib import Path

import pytest

from server.cluster.controller.identity import BrokerIdentityFiles, IdentityMismatch
from server.config import BrokerConfig, ConfigError


@pytest.mark.parametrize(("fields", "key"), [
    ({"enable_controller_mode": True}, "controllerAddr"),
    ({"enable_controller_mode": True, "controller_addr": "127.0.0.1"}, "controllerAddr"),
    ({"enable_controller_mode": True, "controller_addr": "127.0.0.1:9878", "broker_heartbeat_interval": 0},
     "brokerHeartbeatInterval"),
    ({"broker_id": -2}, "brokerId"),
    ({"broker_role": "SLAVE", "broker_id": -1}, "brokerId"),  # -1 means "the controller's" only in controller mode
])
def test_bad_controller_config_names_the_key(fields: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig(**fields).validate()  # type: ignore[arg-type]
    assert e.value.key == key and str(e.value).startswith(f"config key {key}:")


def test_apache_example_keys_are_accepted() -> None:
    cfg = BrokerConfig.from_mapping({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878;127.0.0.1:9868",
                                     "brokerId": "-1", "brokerRole": "SLAVE", "controllerHeartBeatTimeoutMills": "5000",
                                     "syncBrokerMetadataPeriod": "2000", "brokerElectionPriority": "3"})
    cfg.validate()
    assert (cfg.enable_controller_mode, cfg.controller_heart_beat_timeout_mills, cfg.sync_broker_metadata_period,
            cfg.broker_election_priority) == (True, 5000, 2000, 3)


def test_identity_files(tmp_path: Path) -> None:
    files = BrokerIdentityFiles(str(tmp_path), "C", "b")
    assert files.applied() is None and files.pending() is None
    files.write_pending(2, "127.0.0.1:10911;5")
    assert (tmp_path / "brokerIdentity-temp").read_text() == "C#b#2#127.0.0.1:10911;5"
    assert files.pending() is not None and files.pending().broker_id == 2  # type: ignore[union-attr]
    files.write_applied(2)
    assert (tmp_path / "brokerIdentity").read_text() == "C#b#2"
    assert not (tmp_path / "brokerIdentity-temp").exists()
    assert files.applied().broker_id == 2  # type: ignore[union-attr]
    (tmp_path / "brokerIdentity-temp").write_text("C#b#3")  # torn: as if absent
    assert files.pending() is None
    with pytest.raises(IdentityMismatch):
        BrokerIdentityFiles(str(tmp_path), "C", "other").applied()
