"""ReplicaServices: the broker's parts a replica role drives besides the store. Declared apart from the
role (`server.cluster.ha.service.ReplicaRole`) so the slave's sync (`server.cluster.ha.sync`), which
the role composes, can name them without importing the role."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.offsets_table import ConsumerOffsetManager
    from server.pop.service import PopService
    from server.topics import TopicManager
    from server.transactions import TransactionService
    from storage.subscription_group import SubscriptionGroupTable


@dataclass(frozen=True, slots=True)
class ReplicaServices:
    """What a replica role drives besides the store: the tables a slave adopts from its master, the
    scheduled services it follows and starts at promotion, the transaction check-backs and pop's revive
    sweep, the master-only services a promotion starts and a demotion stops (attached by
    BrokerController._assemble once they exist, before the broker starts)."""

    topics: TopicManager
    groups: SubscriptionGroupTable
    offsets: ConsumerOffsetManager
    delay_service: DelayLevelService
    timer_service: TimerMessageStore | None
    transactions: TransactionService
    pop: PopService  # its revive sweep is a master's (PopService.start_sweep / stop_sweep)
