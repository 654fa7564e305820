"""delaymq's asyncio RocketMQ 4.x client: Producer, TransactionProducer, PushConsumer, PullConsumer."""

from ._wire import MQClientError
from .consumer import BROADCASTING, CLUSTERING, PushConsumer
from .message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from .process_queue import ConsumeStatus
from .producer import Producer, select_by_hash
from .pull_consumer import PullConsumer, PullResult, PullStatus
from .subscription import Subscription
from .transaction import LocalTransactionState, TransactionProducer, TransactionSendResult

__all__ = [
    "BROADCASTING", "CLUSTERING", "ConsumeStatus", "LocalTransactionState", "MQClientError", "Message",
    "MessageExt", "MessageQueue", "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer",
    "SendResult", "SendStatus", "Subscription", "TransactionProducer", "TransactionSendResult", "select_by_hash",
]
