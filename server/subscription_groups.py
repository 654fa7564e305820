"""Subscription group configs (SubscriptionGroupConfig defaults), auto-created when allowed."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)


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

    def to_json(self) -> dict:
        return {"brokerId": self.broker_id, "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable, "consumeFromMinEnable": self.consume_from_min_enable,
                "groupName": self.group_name, "notifyConsumerIdsChangedEnable":
                self.notify_consumer_ids_changed_enable, "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly}

    @classmethod
    def from_json(cls, name: str, d: dict) -> SubscriptionGroupConfig:
        return cls(name, bool(d.get("consumeEnable", True)), bool(d.get("consumeFromMinEnable", True)),
                   bool(d.get("consumeBroadcastEnable", True)), int(d.get("retryQueueNums", 1)),
                   int(d.get("retryMaxTimes", 16)), int(d.get("brokerId", 0)),
                   int(d.get("whichBrokerWhenConsumeSlowly", 1)),
                   bool(d.get("notifyConsumerIdsChangedEnable", True)))


class SubscriptionGroupManager:
    def __init__(self, table, auto_create: bool = True) -> None:
        self.table = table
        self.auto_create = auto_create
        self.groups: dict[str, SubscriptionGroupConfig] = {}

    def load(self) -> None:
        for name, d in (self.table.load() or {}).items():
            try:
                self.groups[name] = SubscriptionGroupConfig.from_json(name, d)
            except (TypeError, ValueError) as e:
                log.warning("groups.bad_entry", group=name, error=str(e))

    def persist(self) -> None:
        self.table.save({n: g.to_json() for n, g in self.groups.items()})

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created (and persisted) when `autoCreateSubscriptionGroup`."""
        cfg = self.groups.get(group)
        if cfg is None and self.auto_create and group:
            cfg = self.groups[group] = SubscriptionGroupConfig(group)
            log.info("groups.auto_created", group=group)
            self.persist()
        return cfg
