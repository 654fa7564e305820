"""The producer's RPCs of apache.rocketmq.v2.MessagingService: SendMessage, EndTransaction, RecallMessage
(a mixin of `service.MessagingService`).

Sends go through the remoting send path itself (`server.processors.send.SendProcessor`): a 5.x message becomes
the SEND_MESSAGE request a 4.x producer would make (`convert.to_properties`), so topic checks, auto-creation,
size limits, transactions, delay levels and the timer wheel are the same code for both protocols.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from codec.codes import DEFAULT_TOPIC, RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.msgid import decode_offset_msg_id
from codec.properties import MessageConst as K
from codec.properties import properties_to_string
from codec.tags import java_hash
from server.grpc import convert
from server.grpc.auth import needs
from server.grpc.status import OK, Code, Context, GrpcError, Response, StatusAnswer, from_remoting, status
from server.grpc.telemetry import transaction_id
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from server.headers import SendMessageHeader
from server.transactions import COMMIT, ROLLBACK

if TYPE_CHECKING:
    from server.grpc.deps import GrpcDeps
    from server.processors.send import SendProcessor


def grpc_metadata(context: Context) -> dict[str, str]:
    """The RPC's text metadata (x-mq-client-id, authorization, x-mq-language, ...). gRPC hands binary
    (`-bin`) entries over as bytes; RocketMQ sends none, and they are left out."""
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def grpc_peer(context: Context) -> tuple[str, int]:
    """'ipv4:127.0.0.1:5555' / 'ipv6:[::1]:5555' -> (host, port)."""
    text = context.peer() or ""
    kind, _, rest = text.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if host.startswith("::ffff:"):
        host = host[7:]
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return "127.0.0.1", 0


def send_command(topic: str, qid: int, props: dict[str, str], sys_flag: int, body: bytes, born_ms: int,
                 default_queue_nums: int) -> RemotingCommand:
    """The SEND_MESSAGE request a 4.x producer would make of a 5.x message: what RecallMessage sends, and
    the reference `send_header` agrees with."""
    ext = {"producerGroup": topic, "topic": topic, "defaultTopic": DEFAULT_TOPIC,
           "defaultTopicQueueNums": str(default_queue_nums), "queueId": str(qid), "sysFlag": str(sys_flag),
           "bornTimestamp": str(born_ms), "flag": "0", "properties": properties_to_string(props),
           "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body)


def send_header(topic: str, qid: int, properties: str, sys_flag: int, born_ms: int,
                default_queue_nums: int) -> SendMessageHeader:
    """The SendMessageHeader of a 5.x message's send (`properties`: properties_to_string of its
    properties), built directly for SendMessage's hot path: what `parse_send` reads from the extFields of
    `send_command`, the reference (tests/grpc/test_send_header_fast.py holds them equal)."""
    h = SendMessageHeader()
    h.__dict__ = {"producerGroup": topic, "topic": topic, "defaultTopic": DEFAULT_TOPIC,
                  "defaultTopicQueueNums": default_queue_nums, "queueId": qid, "sysFlag": sys_flag,
                  "bornTimestamp": born_ms, "flag": 0, "properties": properties or None, "reconsumeTimes": 0,
                  "unitMode": False, "maxReconsumeTimes": None, "batch": False}
    return h


class SentOk(NamedTuple):
    """A message the store took: its SendResultEntry's fields besides the OK status ('' = not set)."""

    message_id: str
    offset: int
    transaction_id: str
    recall_handle: str


def send_response_reference(entries: Sequence[pb.Status | SentOk]) -> spb.SendMessageResponse:
    """The SendMessageResponse of a request's messages, in order: a Status for each refused one, a SentOk for
    each stored one. The top status is OK when all are, the one failure of a single message, else
    MULTIPLE_RESULTS. The reference `send_response` agrees with (tests/grpc/test_send_header_fast.py)."""
    out: list[spb.SendResultEntry] = []
    for e in entries:
        if isinstance(e, SentOk):
            entry = spb.SendResultEntry(status=OK, message_id=e.message_id, offset=e.offset)
            if e.transaction_id:
                entry.transaction_id = e.transaction_id
            if e.recall_handle:
                entry.recall_handle = e.recall_handle
            out.append(entry)
        else:
            out.append(spb.SendResultEntry(status=e))
    bad = [e.status for e in out if e.status.code != Code.OK]
    if not bad:
        top = OK
    elif len(out) == 1:
        top = bad[0]
    else:
        top = status(Code.MULTIPLE_RESULTS, f"{len(bad)} of {len(out)} messages failed")
    return spb.SendMessageResponse(status=top, entries=out)


# the answer to one stored message, serialized once: parsing it and setting the entry's fields is a fraction
# of building the messages with keyword arguments (each message-typed argument is a copy)
_ONE_OK = spb.SendMessageResponse(status=OK, entries=[spb.SendResultEntry(status=OK)]).SerializeToString()
_parse_response = spb.SendMessageResponse.FromString


def send_response(entries: Sequence[pb.Status | SentOk]) -> spb.SendMessageResponse:
    """`send_response_reference`, built from a serialized template for the usual request: one message,
    stored."""
    if len(entries) != 1 or not isinstance(entries[0], SentOk):
        return send_response_reference(entries)
    ok = entries[0]
    r = _parse_response(_ONE_OK)
    entry = r.entries[0]
    entry.message_id = ok.message_id
    entry.offset = ok.offset
    if ok.transaction_id:
        entry.transaction_id = ok.transaction_id
    if ok.recall_handle:
        entry.recall_handle = ok.recall_handle
    return r


class SendConnection:
    """What the remoting send path reads of a connection (server.processors.send_common.SendConn): the peer
    (born host) and per-connection attrs."""

    __slots__ = ("remote_addr", "attrs")

    def __init__(self, peer: tuple[str, int]) -> None:
        self.remote_addr = peer
        self.attrs: dict[str, Any] = {}


class SendRpcs:
    """SendMessage, EndTransaction, RecallMessage; what they use of MessagingService is declared here."""

    deps: GrpcDeps
    sender: SendProcessor

    if TYPE_CHECKING:
        async def _unary(self, name: str, resp_cls: StatusAnswer[Response], context: Context, names: dict[str, str],
                         work: Callable[[], Awaitable[Response]]) -> Response: ...

        @staticmethod
        def _topic_name(res: pb.Resource) -> str: ...

    # request and response types are the generated messages, typed by their stubs (server/grpc/v2/*.pyi);
    # `context` is the RPC's grpc.aio servicer context (status.Context)
    async def SendMessage(self, request: spb.SendMessageRequest, context: Context) -> spb.SendMessageResponse:
        if not request.messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no messages"))
        topic = request.messages[0].topic.name
        return await self._unary("SendMessage", spb.SendMessageResponse, context, needs(topic),
                                 lambda: self._send(request, context))

    def _send_command(self, topic: str, qid: int, props: dict[str, str], sys_flag: int, body: bytes,
                      born_ms: int) -> RemotingCommand:
        return send_command(topic, qid, props, sys_flag, body, born_ms, self.deps.config.default_topic_queue_nums)

    async def _send(self, request: spb.SendMessageRequest, context: Context) -> spb.SendMessageResponse:
        topic = self._topic_name(request.messages[0].topic)
        cfg = self.deps.config
        now = int(time.time() * 1000)
        timer = self.deps.timer_enabled
        cmds: list[tuple[int, dict[str, str], RemotingCommand]] = []  # (index in the request, properties, send)
        headers: list[SendMessageHeader] = []
        errors: dict[int, pb.Status] = {}  # index in the request -> why it was refused before the send
        tcfg = self.deps.topics.get(topic)
        queue_nums = cfg.default_topic_queue_nums
        for i, msg in enumerate(request.messages):
            try:
                if msg.topic.name != topic:
                    raise GrpcError(Code.MESSAGE_CORRUPTED, "the messages of one request must share a topic")
                body = msg.body  # each read of a bytes field is a copy
                if not body:
                    raise GrpcError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
                if len(body) > cfg.max_message_size:
                    raise GrpcError(Code.MESSAGE_BODY_TOO_LARGE,
                                    f"message body size {len(body)} exceeds maxMessageSize {cfg.max_message_size}")
                props, sys_flag = convert.to_properties(msg, topic, now, timer, self.deps.levels)
                qid = -1
                group = props.get(convert.SHARDING_KEY)
                if group and tcfg is not None and tcfg.write_queue_nums > 0:  # FIFO: one queue per message group
                    qid = abs(java_hash(group)) % tcfg.write_queue_nums
                sp = msg.system_properties
                if sp.HasField("born_timestamp"):
                    bt = sp.born_timestamp
                    born = bt.seconds * 1000 + bt.nanos // 1_000_000
                else:
                    born = now
                headers.append(send_header(topic, qid, properties_to_string(props), sys_flag, born, queue_nums))
                cmds.append((i, props, RemotingCommand(code=RequestCode.SEND_MESSAGE, body=body)))
            except GrpcError as e:
                errors[i] = status(e.code, e.message)
        results = self.sender.batch_parsed(SendConnection(grpc_peer(context)), [c for _, _, c in cmds],
                                           headers) if cmds else []
        entries: list[pb.Status | SentOk | None] = [None] * len(request.messages)
        for i, st in errors.items():
            entries[i] = st
        for (i, props, _cmd), resp in zip(cmds, results, strict=True):
            if resp is not None and not isinstance(resp, RemotingCommand):
                resp = await resp  # SYNC_FLUSH: answered once the group commit covers it
            if resp is None or resp.code != ResponseCode.SUCCESS:
                entries[i] = from_remoting(resp.code if resp else ResponseCode.SYSTEM_ERROR,
                                           resp.remark if resp else "no response")
                continue
            ext = resp.ext_fields
            uniq = props[K.UNIQ_KEY]
            offset = int(ext.get("queueOffset", 0))
            tx = transaction_id(ext.get("msgId", ""), offset) if props.get(K.TRAN_MSG) == "true" else ""
            deliver = props.get(K.TIMER_DELIVER_MS)
            recall = ""
            if deliver:
                raw = " ".join(("v1", topic, self.deps.config.broker_name, deliver, uniq))
                recall = base64.urlsafe_b64encode(raw.encode()).decode()
            entries[i] = SentOk(uniq, offset, tx, recall)
        return send_response([e for e in entries if e is not None])  # every message got its entry above

    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Context) -> spb.EndTransactionResponse:
        topic = request.topic.name

        async def work() -> spb.EndTransactionResponse:
            tx = request.transaction_id
            msg_id, _, table = tx.rpartition("-")
            try:
                _host, _port, phys = decode_offset_msg_id(msg_id)
                table_offset = int(table)
            except (ValueError, TypeError):
                raise GrpcError(Code.INVALID_TRANSACTION_ID, f"transaction id {tx!r} is not one of this broker's") from None
            kind = {pb.COMMIT: COMMIT, pb.ROLLBACK: ROLLBACK}.get(request.resolution)
            if kind is None:
                return spb.EndTransactionResponse(status=OK)  # unknown: wait for the check-back
            code, remark = await self.deps.transactions.end(topic, table_offset, phys, kind)
            if code != ResponseCode.SUCCESS:
                return spb.EndTransactionResponse(status=from_remoting(code, remark))
            return spb.EndTransactionResponse(status=OK)
        return await self._unary("EndTransaction", spb.EndTransactionResponse, context,
                                 needs(topic), work)

    async def RecallMessage(self, request: spb.RecallMessageRequest, context: Context) -> spb.RecallMessageResponse:
        topic = request.topic.name

        async def work() -> spb.RecallMessageResponse:
            try:
                raw = base64.urlsafe_b64decode(request.recall_handle.encode() + b"==").decode()
                version, h_topic, _broker, ts, uniq = raw.split(" ")[:5]
                deliver = int(ts)
            except (ValueError, UnicodeDecodeError):
                raise GrpcError(Code.BAD_REQUEST, "recall handle is invalid") from None
            if version != "v1" or h_topic != topic:
                raise GrpcError(Code.BAD_REQUEST, "recall handle is invalid or for another topic")
            if deliver <= int(time.time() * 1000):
                raise GrpcError(Code.NOT_FOUND, f"message {uniq} was delivered at {deliver}: too late to recall")
            props = {K.TIMER_DELIVER_MS: str(deliver), K.TIMER_DEL_UNIQKEY: f"{topic}+{uniq}", K.UNIQ_KEY: uniq,
                     K.TAGS: convert.RECALL_TAG}
            cmd = self._send_command(topic, 0, props, 0, b"0", int(time.time() * 1000))
            [resp] = self.sender.batch(SendConnection(grpc_peer(context)), [cmd])
            if resp is not None and not isinstance(resp, RemotingCommand):
                resp = await resp
            if resp is None or resp.code != ResponseCode.SUCCESS:
                return spb.RecallMessageResponse(status=from_remoting(resp.code if resp else ResponseCode.SYSTEM_ERROR,
                                                                       resp.remark if resp else "no response"))
            return spb.RecallMessageResponse(status=OK, message_id=uniq)
        return await self._unary("RecallMessage", spb.RecallMessageResponse, context, needs(topic), work)
