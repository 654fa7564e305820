"""Admin calls behind the `delaymq` CLI (mqadmin-style): topics, offsets, progress, messages, runtime info."""

from __future__ import annotations

import time
from dataclasses import dataclass

from codec import admin_bodies as AB
from codec.acl import sign_request
from codec.codes import SCHEDULE_TOPIC, TIMER_TOPIC, RequestCode, ResponseCode
from codec.msgid import decode_offset_msg_id, is_offset_msg_id

from . import _wire as w
from .instance import ClientInstance, TopicRoute
from .message import MessageExt, MessageQueue, decode_messages


@dataclass(slots=True)
class QueueStatus:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0  # STORETIMESTAMP of the newest message, 0 if the queue is empty


@dataclass(slots=True)
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int  # 0 if the group never committed an offset for this queue
    last_timestamp: int = 0  # STORETIMESTAMP of the last consumed message, 0 if none

    @property
    def lag(self) -> int:
        return self.broker_offset - max(self.consumer_offset, 0)


class Admin:
    def __init__(self, namesrv: str, timeout: float = 3.0) -> None:
        self.instance = ClientInstance(namesrv, "admin", timeout)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.instance.close()

    async def route(self, topic: str) -> TopicRoute:
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise w.MQClientError(w.TOPIC_NOT_EXIST, f"topic {topic} does not exist", "route")
        return route

    async def broker_addrs(self, broker_addr: str | None = None) -> list[str]:
        """Master addresses: the given one, else every master named in TBW102's route."""
        if broker_addr:
            return [broker_addr]
        route = await self.route(w.DEFAULT_TOPIC)
        return sorted({a[0] for a in route.brokers.values() if 0 in a})

    async def create_topic(self, topic: str, read_queues: int = 8, write_queues: int = 8, perm: int = 6,
                           order: bool = False, broker_addr: str | None = None) -> list[str]:
        fields = {"topic": topic, "defaultTopic": w.DEFAULT_TOPIC, "readQueueNums": read_queues,
                  "writeQueueNums": write_queues, "perm": perm, "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": 0, "order": "true" if order else "false"}
        addrs = await self.broker_addrs(broker_addr)
        for addr in addrs:
            w.check(await self.instance.invoke_addr(addr, w.request(w.UPDATE_AND_CREATE_TOPIC, fields)),
                    f"create topic {topic} on {addr}")
        return addrs

    async def topic_list(self) -> list[str]:
        resp = await self.instance.invoke_namesrv(w.request(w.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        w.check(resp, "topic list")
        return sorted(w.loads_lenient(resp.body_bytes()).get("topicList") or []) if resp.body else []

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """GET_TOPIC_STATS_INFO on every master serving the topic (mqadmin topicStatus)."""
        route = await self.route(topic)
        out: list[QueueStatus] = []
        for name in sorted(route.brokers):
            addr = route.master(name)
            if addr is None:
                continue
            resp = w.check(await self.instance.invoke_addr(
                addr, w.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})), f"topic status on {addr}")
            rows, _ = AB.decode_topic_stats(resp.body_bytes())
            out.extend(QueueStatus(MessageQueue(r.mq.topic, r.mq.broker_name, r.mq.queue_id), r.min_offset,
                                   r.max_offset, r.last_update_timestamp) for r in rows)
        return out

    async def group_progress(self, group: str, topics: list[str] | None = None,
                             broker_addr: str | None = None) -> list[QueueProgress]:
        """GET_CONSUME_STATS on every master (mqadmin consumerProgress); without topics the broker
        reports every topic the group has committed offsets for."""
        out: list[QueueProgress] = []
        for addr in await self.broker_addrs(broker_addr):
            for topic in topics or [""]:
                fields = {"consumerGroup": group} | ({"topic": topic} if topic else {})
                resp = w.check(await self.instance.invoke_addr(
                    addr, w.request(RequestCode.GET_CONSUME_STATS, fields)), f"consume stats on {addr}")
                rows, _ = AB.decode_consume_stats(resp.body_bytes())
                out.extend(QueueProgress(MessageQueue(r.mq.topic, r.mq.broker_name, r.mq.queue_id),
                                         r.broker_offset, r.consumer_offset, r.last_timestamp) for r in rows)
        return out

    async def consumer_connections(self, group: str, broker_addr: str | None = None) -> list[AB.ConsumerConnection]:
        """GET_CONSUMER_CONNECTION_LIST on every master (mqadmin consumerConnection); brokers where the
        group is not online are left out."""
        out: list[AB.ConsumerConnection] = []
        for addr in await self.broker_addrs(broker_addr):
            resp = await self.instance.invoke_addr(
                addr, w.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}))
            if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue
            out.append(AB.decode_consumer_connection(w.check(resp, f"consumer connections on {addr}").body_bytes()))
        return out

    async def view_by_offset_id(self, msg_id: str) -> MessageExt:
        try:
            ip, port, phys = decode_offset_msg_id(msg_id)
        except ValueError as e:
            raise w.MQClientError(w.NO_CODE, f"{msg_id!r} is not an offset msgId ({e})", "view") from e
        resp = await self.instance.invoke_addr(f"{ip}:{port}", w.request(w.VIEW_MESSAGE_BY_ID,
                                                                         {"offset": phys}))
        w.check(resp, f"view message {msg_id}")
        return decode_messages(resp.body)[0]

    async def query_by_key(self, topic: str, key: str, max_num: int = 32, unique: bool = False,
                           begin_ms: int = 0, end_ms: int | None = None) -> list[MessageExt]:
        route = await self.route(topic)
        fields: dict[str, str | int] = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms,
                  "endTimestamp": end_ms if end_ms is not None else int(time.time() * 1000) + 60_000}
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        out: list[MessageExt] = []
        for name in sorted(route.brokers):
            resp = await self.instance.invoke_broker(name, w.request(w.QUERY_MESSAGE, fields))
            if resp.code == w.QUERY_NOT_FOUND:
                continue
            w.check(resp, f"query message {topic}#{key}")
            out.extend(decode_messages(resp.body, name))
        if unique:
            out = [m for m in out if m.uniq_key == key]
        else:
            out = [m for m in out if key in m.keys or m.uniq_key == key]
        return out

    async def view_message(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """By either id form: an offset msgId is read at its broker; a UNIQ_KEY is looked up in the key
        index under `topic`, or (without one) among the pending scheduled messages."""
        if is_offset_msg_id(msg_id):
            try:
                return [await self.view_by_offset_id(msg_id)]
            except w.MQClientError:
                if not topic:
                    raise
        if topic:
            return await self.query_by_key(topic, msg_id, unique=True)
        found: list[MessageExt] = []
        for t in (SCHEDULE_TOPIC, TIMER_TOPIC):
            try:
                found += await self.query_by_key(t, msg_id, unique=True)
            except w.MQClientError:
                continue
        if not found:
            raise w.MQClientError(w.QUERY_NOT_FOUND, f"{msg_id} is a UNIQ_KEY (not an offset msgId) and no pending "
                                                     "scheduled message has it: add -t TOPIC", "view")
        return found

    async def runtime_info(self, broker_addr: str | None = None) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for addr in await self.broker_addrs(broker_addr):
            resp = await self.instance.invoke_addr(addr, w.request(w.GET_BROKER_RUNTIME_INFO))
            w.check(resp, f"runtime info of {addr}")
            out[addr] = dict((w.loads_lenient(resp.body_bytes()) or {}).get("table") or {}) if resp.body else {}
        return out

    async def promote(self, broker_addr: str, role: str = "ASYNC_MASTER", timeout: float = 30.0,
                      access_key: str | None = None, secret_key: str | None = None) -> w.JsonObject:
        """PROMOTE_BROKER (delaymq's 3101): make the slave at `broker_addr` the master, live. An admin
        request under ACL: signed when an access key is given."""
        body = w.dumps({"brokerRole": role})
        cmd = w.request(w.PROMOTE_BROKER, {}, body)
        if access_key:
            sign_request(cmd.ext_fields, body, access_key, secret_key or "")
        resp = await self.instance.invoke_addr(broker_addr, cmd, timeout)
        w.check(resp, f"promote {broker_addr}")
        return dict(w.loads_lenient(resp.body_bytes()) or {})

    @staticmethod
    def delay_levels(table: dict[str, str]) -> list[dict[str, int]]:
        """Per delay level from the runtime info: the stock ``scheduleMessageOffset_<L>`` =
        "deliverOffset,maxOffset" plus delaymq's ``scheduleMessage{Pending,NextDue,Delivered}_<L>``."""
        out: dict[int, dict[str, int]] = {}
        for k, v in table.items():
            if not k.startswith("scheduleMessage") or "_" not in k:
                continue
            name, _, lv = k.rpartition("_")
            try:
                level = int(lv)
            except ValueError:
                continue
            row = out.setdefault(level, {"level": level})
            try:
                if name == "scheduleMessageOffset":
                    row["deliverOffset"], row["maxOffset"] = (int(x) for x in v.split(","))
                elif name in ("scheduleMessagePending", "scheduleMessageNextDue", "scheduleMessageDelivered",
                              "scheduleMessageDelayMs", "scheduleMessageLatenessP50", "scheduleMessageLatenessP99",
                              "scheduleMessageLatenessMax", "scheduleMessageLatenessWindow"):
                    row[name[len("scheduleMessage"):].lower()] = int(float(v))
            except ValueError:
                continue
        for row in out.values():
            if "pending" not in row and "maxOffset" in row:
                row["pending"] = row["maxOffset"] - row["deliverOffset"]
        return [out[lv] for lv in sorted(out)]

    # ---- scheduled messages (delaymq's own codes) --------------------------------------------
    async def list_scheduled(self, broker_addr: str | None = None,
                             **fields: str | int | bool | None) -> list[tuple[str, w.JsonObject]]:
        """One DELAYMQ_QUERY_SCHEDULED page per broker: [(addr, {"rows", "cursor", "scanned"})].
        `fields`: topic, level, timers, levels, dueBefore, key, limit, cursor (None values dropped)."""
        ext = {k: ("true" if v is True else str(v)) for k, v in fields.items() if v is not None and v is not False}
        out: list[tuple[str, w.JsonObject]] = []
        for addr in await self.broker_addrs(broker_addr):
            resp = await self.instance.invoke_addr(addr, w.request(RequestCode.DELAYMQ_QUERY_SCHEDULED, ext))
            w.check(resp, f"scheduled list on {addr}")
            out.append((addr, w.loads_lenient(resp.body_bytes()) or {}))
        return out

    async def cancel_scheduled(self, msg_id: str, broker_addr: str | None = None) -> w.JsonObject:
        """Cancel by UNIQ_KEY, or by the offset msgId of the scheduled record (its UNIQ_KEY is read
        first). The first broker that knows the key answers; else status "unknown"."""
        uniq = msg_id
        if is_offset_msg_id(msg_id):
            uniq = (await self.view_by_offset_id(msg_id)).uniq_key or ""
            if not uniq:
                raise w.MQClientError(w.NO_CODE, f"message {msg_id} has no UNIQ_KEY", "cancel")
        answer: w.JsonObject = {"status": "unknown", "detail": f"no broker knows UNIQ_KEY {uniq}"}
        for addr in await self.broker_addrs(broker_addr):
            resp = await self.instance.invoke_addr(addr, w.request(RequestCode.DELAYMQ_CANCEL_SCHEDULED,
                                                                   {"uniqKey": uniq}))
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                answer = {**(w.loads_lenient(resp.body_bytes()) or {}), "status": "unknown",
                          "detail": resp.remark or answer["detail"]}
                continue
            w.check(resp, f"scheduled cancel on {addr}")
            return {**(w.loads_lenient(resp.body_bytes()) or {}), "uniqKey": uniq, "broker": addr}
        return {**answer, "uniqKey": uniq}
