"""What the gRPC endpoint uses of the broker, named (built by server.processor_wiring.grpc_deps): the
endpoint, its MessagingService, PopService and TelemetryService get this, never the BrokerController."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.client_manager import ClientManager
    from server.config import BrokerConfig
    from server.offsets_table import ConsumerOffsetManager
    from server.processors.send_common import SendDeps
    from server.security.acl import PlainAclValidator
    from server.subscription_filter import SubscriptionFilters
    from server.topic_attributes import TopicAttributes
    from server.topics import TopicManager
    from server.transactions import PutRecord, TransactionService
    from storage.message_store import MessageStore
    from storage.subscription_group import SubscriptionGroupTable

@dataclass(frozen=True, slots=True)
class GrpcDeps:
    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable
    offsets: ConsumerOffsetManager
    clients: ClientManager  # 5.x sessions are channels of their groups (telemetry)
    transactions: TransactionService  # EndTransaction
    send: SendDeps  # SendMessage runs the remoting send path (server.processors.send)
    put_record: PutRecord  # pop's DLQ copies
    levels: Sequence[int]  # messageDelayLevel, ms
    timer_enabled: bool  # timerWheelEnable: delivery_timestamp goes to the wheel, else to a delay level
    acl: PlainAclValidator | None  # None: aclEnable=false
    store_host: tuple[str, int]  # brokerIP1:listenPort, as records carry it
    attributes: TopicAttributes  # a topic's message.type narrows the route's accepted message types
    filters: SubscriptionFilters  # FilterExpression SQL: enablePropertyFilter and the compiled selectors
