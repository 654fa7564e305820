"""`delaymq topic|group|message|scheduled` (admin subcommands)."""

from __future__ import annotations

import json
import sys
from datetime import datetime

from codec.codes import RETRY_PREFIX, SCHEDULE_TOPIC

from .. import _wire as w
from .._wire import MQClientError
from ..admin import Admin
from ..message import MessageQueue
from ..producer import Producer
from ..rebalance import query_offset
from .messaging import _msg_line


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _table(rows: list[list[object]], header: list[str]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        _out("  ".join(c.ljust(wd) for c, wd in zip(r, widths, strict=True)).rstrip())


async def topic(args) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        if args.action == "create":
            addrs = await admin.create_topic(args.topic, args.read_queues, args.write_queues, args.perm,
                                             args.order, args.broker)
            _out(f"create topic {args.topic} OK on {', '.join(addrs)}")
        elif args.action == "list":
            for t in await admin.topic_list():
                _out(t)
        else:
            status = await admin.topic_status(args.topic)
            if args.output == "json":
                _out(json.dumps([{"brokerName": s.queue.broker_name, "queueId": s.queue.queue_id,
                                  "minOffset": s.min_offset, "maxOffset": s.max_offset,
                                  "lastUpdateTimestamp": s.last_update_timestamp} for s in status]))
            else:
                _table([[s.queue.broker_name, s.queue.queue_id, s.min_offset, s.max_offset,
                         _when(s.last_update_timestamp)] for s in status],
                       ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"])
    return 0


async def broker(args) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        info = await admin.promote(args.broker, args.role, max(args.timeout, 30.0), args.access_key, args.secret_key)
    if args.output == "json":
        _out(json.dumps(info))
    else:
        _out(f"promoted {args.broker}: brokerRole={info.get('brokerRole')} brokerId={info.get('brokerId')} "
             f"epoch={info.get('epoch')} epochStartOffset={info.get('epochStartOffset')} "
             f"syncedProgressAgeMs={info.get('syncedProgressAgeMs')} tookMs={info.get('tookMs')}")
    return 0


async def group(args) -> int:
    if args.action == "connections":
        return await _connections(args)
    topics = list(args.topic or [])
    async with Admin(args.namesrv, args.timeout) as admin:
        if topics and not args.no_retry:
            topics.append(RETRY_PREFIX + args.group)
        progress = await admin.group_progress(args.group, topics or None)
        if not topics and args.no_retry:
            progress = [p for p in progress if not p.queue.topic.startswith(RETRY_PREFIX)]
    total = sum(p.lag for p in progress)
    if args.output == "json":
        _out(json.dumps({"group": args.group, "totalLag": total, "queues": [
            {"topic": p.queue.topic, "brokerName": p.queue.broker_name, "queueId": p.queue.queue_id,
             "brokerOffset": p.broker_offset, "consumerOffset": p.consumer_offset, "lag": p.lag,
             "lastTimestamp": p.last_timestamp} for p in progress]}))
    else:
        _table([[p.queue.topic, p.queue.broker_name, p.queue.queue_id, p.broker_offset, p.consumer_offset, p.lag,
                 _when(p.last_timestamp)]
                for p in progress], ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset",
                                     "#Diff", "#LastTime"])
        _out(f"Diff Total: {total}")
    return 0


async def _connections(args) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        found = await admin.consumer_connections(args.group)
    if not found:
        sys.stderr.write(f"the consumer group {args.group} is not online\n")
        return 1
    if args.output == "json":
        _out(json.dumps([{"consumeType": cc.consume_type, "messageModel": cc.message_model,
                          "consumeFromWhere": cc.consume_from_where, "subscriptions": cc.subscriptions,
                          "connections": [c.to_json() for c in cc.connections]} for cc in found]))
        return 0
    for cc in found:
        _table([[i + 1, c.client_id, c.client_addr, c.language, c.version] for i, c in enumerate(cc.connections)],
               ["#", "#ClientId", "#ClientAddr", "#Language", "#Version"])
        _table([[t, s.get("subString", "*")] for t, s in sorted(cc.subscriptions.items())], ["#Topic", "#SubExpression"])
        _out(f"ConsumeType: {cc.consume_type}\nMessageModel: {cc.message_model}\n"
             f"ConsumeFromWhere: {cc.consume_from_where}")
    return 0


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms > 0 else "-"


async def message(args) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        if args.id:
            msgs = await admin.view_message(args.id, args.topic)
        else:
            msgs = await admin.query_by_key(args.topic, args.key)
    if not msgs:
        raise MQClientError(22, f"no message found for {args.id or args.key}", "message view")
    for m in msgs:
        if args.output == "json":
            _out(json.dumps({**m.to_dict(), "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
                             "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
                             "commitLogOffset": m.commitlog_offset, "storedTopic": m.stored_topic}))
        else:
            _out(_msg_line(m, "lines"))
    return 0


async def scheduled(args) -> int:
    if args.action == "cancel":
        target = args.id if args.id else (args.topic, args.uniq_key, args.deliver_at)
        async with Producer(args.group, args.namesrv, send_timeout=args.timeout) as producer:
            r = await producer.cancel_timer(target)
        _out(f"cancel marker sent: {r.status.name} msgId={r.msg_id} offsetMsgId={r.offset_msg_id}")
        return 0
    async with Admin(args.namesrv, args.timeout) as admin:
        info = await admin.runtime_info(args.broker)
        if args.action == "levels":
            rows = []
            for addr, table in info.items():
                levels = Admin.delay_levels(table)
                if not levels:  # a broker without these entries: SCHEDULE_TOPIC_XXXX max offsets at least
                    levels = await _levels_from_offsets(admin)
                rows += [{"broker": addr, **lv} for lv in levels]
            if args.output == "json":
                _out(json.dumps(rows))
            else:
                cols = ["level", "pending", "deliverOffset", "maxOffset", "delivered", "nextdue"]
                _table([[r["broker"]] + [_fmt(c, r.get(c)) for c in cols] for r in rows],
                       ["#Broker", "#Level", "#Pending", "#Delivered Offset", "#Max Offset", "#Delivered",
                        "#Next Due"])
        else:
            rows = [[addr, k, v] for addr, table in info.items() for k, v in sorted(table.items())
                    if k.lower().startswith("timer")]
            if args.output == "json":
                _out(json.dumps({addr: {k: v for a, k, v in rows if a == addr} for addr in info}))
            elif rows:
                _table(rows, ["#Broker", "#Key", "#Value"])
            else:
                _out("no timer statistics reported by the broker")
    return 0


def _fmt(col: str, v) -> str:
    if v is None:
        return "-"
    if col == "nextdue":
        if v <= 0:
            return "-"
        return datetime.fromtimestamp(v / 1000).isoformat(sep=" ", timespec="milliseconds")
    return str(v)


async def _levels_from_offsets(admin: Admin) -> list[dict]:
    route = await admin.instance.fetch_route(SCHEDULE_TOPIC)
    out = []
    for name in sorted(route.brokers) if route else []:
        for qid in range(18):
            try:
                mx = await query_offset(admin.instance, w.GET_MAX_OFFSET, MessageQueue(SCHEDULE_TOPIC, name, qid))
            except MQClientError:
                continue
            if mx:
                out.append({"level": qid + 1, "maxOffset": mx})
    return out
