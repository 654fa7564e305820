"""SubscriptionGroupTable: the groups in memory and in the MetaStore (`<store>/config/meta.db`, one row
per group); `subscriptionGroup.json` (`{"subscriptionGroupTable": {group: {...}}, "dataVersion": {...}}`)
is exported on demand and migrated from at the first start.
Defaults from scheduled-messages.md §3; groups are auto-created on first use by default."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import structlog

from codec import table_bodies as TB
from storage.meta_store import DataVersion, MetaStore
from storage.table_body import CachedBody, Fragments

log = structlog.get_logger(__name__)

_FIELDS = (("group_name", "groupName"), ("consume_enable", "consumeEnable"),
           ("consume_from_min_enable", "consumeFromMinEnable"),
           ("consume_broadcast_enable", "consumeBroadcastEnable"), ("retry_queue_nums", "retryQueueNums"),
           ("retry_max_times", "retryMaxTimes"), ("broker_id", "brokerId"),
           ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly"),
           ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable"),
           ("consume_message_orderly", "consumeMessageOrderly"))


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False  # RocketMQ 5: a FIFO group (5.x consumers get FIFO order)

    def to_json(self) -> dict[str, Any]:
        return {j: getattr(self, a) for a, j in _FIELDS}

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> SubscriptionGroupConfig:
        cfg = cls(str(name or d.get("groupName")))
        for attr, key in _FIELDS[1:]:
            if key in d:
                default = getattr(cfg, attr)
                setattr(cfg, attr, bool(d[key]) if isinstance(default, bool) else int(d[key]))
        return cfg


class SubscriptionGroupTable:
    def __init__(self, store_path: str, auto_create: bool = True, meta: MetaStore | None = None) -> None:
        self.meta = meta or MetaStore(os.path.join(store_path, "config"))
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self._members = Fragments()  # "name":{SubscriptionGroupConfig JSON}, made when the row changes
        self._rendered = True  # False after load until a body has made the loaded rows' fragments
        self._wrapper = CachedBody()

    @property
    def data_version(self) -> DataVersion:
        return self.meta.versions["subscription_group"]

    def load(self) -> None:
        self.meta.open()
        table: dict[str, SubscriptionGroupConfig] = {}
        for name, d in self.meta.load_groups():
            try:
                table[name] = SubscriptionGroupConfig.from_json(name, d)
            except (AttributeError, TypeError, ValueError) as e:
                log.warning("subscription_group.bad_entry", group=name, error=str(e))
        self.table = table
        self._members = Fragments()  # the loaded rows' fragments are made by the first wrapper_body, in slices
        self._rendered = not table

    def persist(self) -> None:
        self.meta.flush()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created (and persisted) when missing if auto_create is on
        (`autoCreateSubscriptionGroup`); an empty name is never created."""
        cfg = self.table.get(group)
        if cfg is None and self.auto_create and group:
            cfg = SubscriptionGroupConfig(group)
            self.put(cfg)
            log.info("subscription_group.auto_created", group=group)
        return cfg

    find = get  # the name the broker's processors call it by

    def put(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.group_name] = cfg
        d = cfg.to_json()
        self._members[cfg.group_name] = TB.group_member(cfg.group_name, d)
        self.meta.stage_group(cfg.group_name, d)

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self._members.pop(group)
        self.meta.stage_group(group, None)
        return True

    async def replace_all(self, configs: dict[str, SubscriptionGroupConfig], slice_n: int = 1000) -> int:
        """Make the table equal to `configs` (a slave adopting its master's groups), staging only what
        changed, `slice_n` rows between two yields. Returns the number of rows changed."""
        changed = 0
        names = list(configs)
        for i in range(0, len(names), slice_n):
            if i:
                await asyncio.sleep(0)
            for name in names[i:i + slice_n]:
                cfg = configs[name]
                if self.table.get(name) != cfg:
                    self.put(cfg)
                    changed += 1
        for name in [n for n in self.table if n not in configs]:
            changed += self.delete(name)
        return changed

    async def wrapper_body(self) -> bytes:
        """SubscriptionGroupWrapper JSON (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), remembered per data version."""
        if not self._rendered:  # once after load: every later put renders its own row
            names = list(self.table)
            for i in range(0, len(names), 500):
                if i:
                    await asyncio.sleep(0)
                for name in names[i:i + 500]:
                    cfg = self.table.get(name)
                    if cfg is not None and name not in self._members:
                        self._members[name] = TB.group_member(name, cfg.to_json())
            self._rendered = True
        key = self.data_version.as_tuple()
        body = self._wrapper.peek(key)
        if body is not None:
            return body
        version = TB.version_json(*key)
        members = await self._members.snapshot()
        return await self._wrapper.get(key, len(members), lambda: members,
                                       lambda members: TB.group_wrapper(version, members))
