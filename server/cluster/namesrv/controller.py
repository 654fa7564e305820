"""NamesrvController: the standalone name server's composition root.

One RemotingServer (listenPort), the RouteInfoManager and KVConfigManager, both groups of handlers
(server/cluster/namesrv/processor.py), the connection-close hook (a broker whose registration
connection closes leaves the routes at once) and the expiry scan (every
`scanNotActiveBrokerInterval`, removing brokers silent for `brokerChannelExpiredTime`, and closing
their connections), a supervised task.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from remoting.server import RemotingServer
from server.cluster.namesrv.config import NamesrvConfig
from server.cluster.namesrv.kv_config import KVConfigManager
from server.cluster.namesrv.processor import (
    register_broker_requests,
    register_namesrv_config,
    register_route_queries,
)
from server.cluster.namesrv.route_info import RouteInfoManager
from server.cluster.tasks import Supervised
from server.listeners import bound
from server.security import make_acl_hook
from server.security.acl import PlainAclValidator

log = structlog.get_logger(__name__)


class NamesrvController:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager(broker_channel_expired_ms=config.broker_channel_expired_time)
        self.kv = KVConfigManager(config.kv_config_path or None)
        self.server: RemotingServer | None = None
        self._scan: Supervised | None = None

    @property
    def port(self) -> int:
        return self.server.ports[0] if self.server and self.server.ports else self.config.listen_port

    async def start(self) -> None:
        cfg = self.config
        self.kv.load()
        self.server = RemotingServer(idle_timeout=cfg.server_channel_max_idle_time_seconds,
                                     max_frame=cfg.max_frame_size)
        register_route_queries(self.server, self.routes, self.kv)
        register_broker_requests(self.server, self.routes, self.kv)
        register_namesrv_config(self.server, cfg, self.routes)
        if cfg.acl_enable:  # the broker's ACL hook and table: writes and all-tenant reads need admin
            self.server.before_request = make_acl_hook(PlainAclValidator(cfg.acl_file))
        self.server.on_close = self.routes.on_channel_destroy
        with bound("listenPort", cfg.listen_host, cfg.listen_port):
            await self.server.start(cfg.listen_host, [cfg.listen_port])
        self._scan = Supervised("namesrv.scan_not_active_broker", self._scan_loop).start()
        log.info("namesrv.ready", host=cfg.listen_host, port=self.port, kv_config=cfg.kv_config_path or None,
                 acl=cfg.acl_enable,
                 broker_expiry_ms=cfg.broker_channel_expired_time)

    async def _scan_loop(self) -> None:
        last = time.monotonic()
        while True:  # the interval is re-read at least every second: UPDATE_NAMESRV_CONFIG may change it
            interval = max(10, self.config.scan_not_active_broker_interval) / 1000.0
            await asyncio.sleep(min(1.0, max(0.0, last + interval - time.monotonic())))
            if time.monotonic() - last < interval:
                continue
            last = time.monotonic()
            for info in self.routes.scan_not_active_broker():
                if info.channel is not None:
                    info.channel.close()

    async def shutdown(self) -> None:
        if self._scan is not None:
            await self._scan.stop()
        if self.server is not None:
            await self.server.close(1.0)
        log.info("namesrv.stopped")
