"""delaymq's asyncio RocketMQ 4.x client: Producer, PushConsumer, PullConsumer."""

from ._wire import MQClientError
from .consumer import BROADCASTING, CLUSTERING, PushConsumer, Subscription
from .message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from .process_queue import ConsumeStatus
from .producer import Producer, select_by_hash
from .pull_consumer import PullConsumer, PullResult, PullStatus

__all__ = [
    "BROADCASTING", "CLUSTERING", "ConsumeStatus", "MQClientError", "Message", "MessageExt", "MessageQueue",
    "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer", "SendResult", "SendStatus",
    "Subscription", "select_by_hash",
]
