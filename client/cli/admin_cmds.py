"""`delaymq topic|group|message|scheduled` (admin subcommands)."""

from __future__ import annotations

import json
import sys

from .._wire import MQClientError
from ..admin import SCHEDULE_TOPIC, Admin
from ..message import MessageQueue
from ..producer import Producer
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
                                  "minOffset": s.min_offset, "maxOffset": s.max_offset} for s in status]))
            else:
                _table([[s.queue.broker_name, s.queue.queue_id, s.min_offset, s.max_offset] for s in status],
                       ["#Broker Name", "#QID", "#Min Offset", "#Max Offset"])
    return 0


async def group(args) -> int:
    topics = list(args.topic or [])
    async with Admin(args.namesrv, args.timeout) as admin:
        if not args.no_retry:
            topics.append("%RETRY%" + args.group)
        progress = await admin.group_progress(args.group, topics)
    total = sum(p.lag for p in progress)
    if args.output == "json":
        _out(json.dumps({"group": args.group, "totalLag": total, "queues": [
            {"topic": p.queue.topic, "brokerName": p.queue.broker_name, "queueId": p.queue.queue_id,
             "brokerOffset": p.broker_offset, "consumerOffset": p.consumer_offset, "lag": p.lag}
            for p in progress]}))
    else:
        _table([[p.queue.topic, p.queue.broker_name, p.queue.queue_id, p.broker_offset, p.consumer_offset, p.lag]
                for p in progress], ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset",
                                     "#Diff"])
        _out(f"Diff Total: {total}")
    return 0


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
                levels = {lv: (d, mx) for lv, d, mx in Admin.delay_levels(table)}
                if not levels:  # no runtime entries: fall back to SCHEDULE_TOPIC_XXXX max offsets
                    route = await admin.instance.fetch_route(SCHEDULE_TOPIC)
                    names = sorted(route.brokers) if route else []
                    for name in names:
                        for qid in range(18):
                            mx = await _max_offset(admin, MessageQueue(SCHEDULE_TOPIC, name, qid))
                            if mx:
                                levels[qid + 1] = (-1, mx)
                for lv in sorted(levels):
                    d, mx = levels[lv]
                    rows.append([addr, lv, d if d >= 0 else "?", mx, mx - d if d >= 0 else "?"])
            if args.output == "json":
                _out(json.dumps([dict(zip(["broker", "level", "deliverOffset", "maxOffset", "pending"], r,
                                          strict=True)) for r in rows]))
            else:
                _table(rows, ["#Broker", "#Level", "#Delivered", "#Max Offset", "#Pending"])
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


async def _max_offset(admin: Admin, mq: MessageQueue) -> int:
    from .. import _wire as w
    from ..rebalance import query_offset

    try:
        return await query_offset(admin.instance, w.GET_MAX_OFFSET, mq)
    except MQClientError:
        return 0
