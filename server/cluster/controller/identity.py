"""The broker-identity files Apache's ReplicasManager keeps in storePathRootDir (cluster-ha.md §4.2):
`brokerIdentity` ("cluster#brokerName#brokerId") once the controller accepted the id, and
`brokerIdentity-temp` ("...#registerCheckCode") between GET_NEXT_BROKER_ID and APPLY_BROKER_ID, so a
broker killed in between applies the same id again. Both written atomically (temp file + rename)."""

from __future__ import annotations

import os

from codec.controller import BROKER_IDENTITY_FILE, BROKER_IDENTITY_TEMP_FILE, BrokerIdentity
from codec.errors import CodecError
from server.config import ConfigError


class IdentityMismatch(ConfigError):
    """A brokerIdentity file names another cluster or brokerName than the configuration: the start stops
    with one line naming brokerName."""


class BrokerIdentityFiles:
    def __init__(self, root: str, cluster: str, broker_name: str) -> None:
        self.root, self.cluster, self.broker_name = root, cluster, broker_name
        self.path = os.path.join(root, BROKER_IDENTITY_FILE)
        self.temp_path = os.path.join(root, BROKER_IDENTITY_TEMP_FILE)

    def _read(self, path: str, temp: bool) -> BrokerIdentity | None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        try:
            ident = BrokerIdentity.decode(text, temp=temp)
        except CodecError:
            return None  # a torn write: as if absent (the flow starts that step again)
        if (ident.cluster_name, ident.broker_name) != (self.cluster, self.broker_name):
            raise IdentityMismatch("brokerName", f"{path} names {ident.cluster_name}/{ident.broker_name}, the configuration "
                                   f"{self.cluster}/{self.broker_name}")
        return ident

    def applied(self) -> BrokerIdentity | None:
        return self._read(self.path, temp=False)

    def pending(self) -> BrokerIdentity | None:
        return self._read(self.temp_path, temp=True)

    def _write(self, path: str, text: str) -> None:
        os.makedirs(self.root, exist_ok=True)
        tmp = path + ".writing"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def write_pending(self, broker_id: int, check_code: str) -> BrokerIdentity:
        ident = BrokerIdentity(self.cluster, self.broker_name, broker_id, check_code)
        self._write(self.temp_path, ident.encode())
        return ident

    def drop_pending(self) -> None:
        try:
            os.remove(self.temp_path)
        except FileNotFoundError:
            pass

    def write_applied(self, broker_id: int) -> BrokerIdentity:
        ident = BrokerIdentity(self.cluster, self.broker_name, broker_id)
        self._write(self.path, ident.encode())
        self.drop_pending()
        return ident
