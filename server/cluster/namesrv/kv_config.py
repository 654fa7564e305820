"""KVConfigManager: the name server's namespace -> {key: value} table (PUT/GET/DELETE_KV_CONFIG,
GET_KVLIST_BY_NAMESPACE). RocketMQ keeps it in `kvConfig.json` `{"configTable": {ns: {k: v}}}`;
with a path it is loaded at start and written atomically after each change (storage.config_store),
without one (the broker's embedded mode) it lives in memory."""

from __future__ import annotations

import structlog

from storage.config_store import atomic_write_json, read_json

log = structlog.get_logger(__name__)

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if not self.path:
            return
        doc = read_json(self.path)
        table = doc.get("configTable") if isinstance(doc, dict) else None
        if isinstance(table, dict):
            self.table = {str(ns): {str(k): str(v) for k, v in kv.items()}
                          for ns, kv in table.items() if isinstance(kv, dict)}
        log.info("namesrv.kv_loaded", path=self.path, namespaces=len(self.table))

    def _persist(self) -> None:
        if self.path:
            atomic_write_json(self.path, {"configTable": self.table})

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        log.info("namesrv.kv_put", namespace=namespace, key=key)
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            log.info("namesrv.kv_deleted", namespace=namespace, key=key)
            self._persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """The namespace's table, None if the namespace does not exist (QUERY_NOT_FOUND / no body)."""
        kv = self.table.get(namespace)
        return dict(kv) if kv is not None else None
