"""`delaymq topic|group|message|scheduled` (admin subcommands)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import cast

from codec.codes import RETRY_PREFIX, SCHEDULE_TOPIC, ResponseCode

from .. import _wire as w
from .._wire import MQClientError
from ..admin import Admin
from ..message import MessageQueue
from ..producer import Producer
from ..rebalance import query_offset
from .args import (
    BrokerPromoteArgs,
    CommonArgs,
    GroupConnectionsArgs,
    GroupProgressArgs,
    MessageViewArgs,
    ScheduledCancelArgs,
    ScheduledListArgs,
    ScheduledStatsArgs,
    TopicCreateArgs,
    TopicStatusArgs,
)
from .messaging import _msg_line

CANCEL_REFUSED = ResponseCode.MESSAGE_ILLEGAL  # the broker's answer to a cancel that would change nothing


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _table(rows: Sequence[Sequence[object]], header: list[str]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        _out("  ".join(c.ljust(wd) for c, wd in zip(r, widths, strict=True)).rstrip())


async def topic_create(args: TopicCreateArgs) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        addrs = await admin.create_topic(args.topic, args.read_queues, args.write_queues, args.perm,
                                         args.order, args.broker)
        _out(f"create topic {args.topic} OK on {', '.join(addrs)}")
    return 0


async def topic_list(args: CommonArgs) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        for t in await admin.topic_list():
            _out(t)
    return 0


async def topic_status(args: TopicStatusArgs) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
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


async def broker(args: BrokerPromoteArgs) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        info = await admin.promote(args.broker, args.role, max(args.timeout, 30.0), args.access_key, args.secret_key)
    if args.output == "json":
        _out(json.dumps(info))
    else:
        _out(f"promoted {args.broker}: brokerRole={info.get('brokerRole')} brokerId={info.get('brokerId')} "
             f"epoch={info.get('epoch')} epochStartOffset={info.get('epochStartOffset')} "
             f"syncedProgressAgeMs={info.get('syncedProgressAgeMs')} tookMs={info.get('tookMs')} "
             f"learnedTopics={','.join(str(t) for t in cast(list[object], info.get('learnedTopics') or [])) or '-'}")
    return 0


async def group_progress(args: GroupProgressArgs) -> int:
    topics = list(args.topic or [])
    async with Admin(args.namesrv, args.timeout) as admin:
        if topics and not args.no_retry:
            topics.append(RETRY_PREFIX + args.group)
        for t in args.topic or []:
            await admin.route(t)  # MQClientError "topic T does not exist"
        progress = await admin.group_progress(args.group, topics or None)
        if not topics and args.no_retry:
            progress = [p for p in progress if not p.queue.topic.startswith(RETRY_PREFIX)]
        if not any(p.consumer_offset > 0 for p in progress):
            try:
                online = await admin.consumer_connections(args.group)
            except MQClientError:
                online = []
            if not online:
                where = f" on {', '.join(args.topic)}" if args.topic else ""
                raise MQClientError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                    f"consumer group {args.group} has no committed offsets{where} and no online "
                                    "consumer (unknown group?)", "group progress")
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


async def group_connections(args: GroupConnectionsArgs) -> int:
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


async def message(args: MessageViewArgs) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        if args.id:
            msgs = await admin.view_message(args.id, args.topic)
        elif args.key and args.topic:
            msgs = await admin.query_by_key(args.topic, args.key)
        else:  # refused by the parser already (`_validate`)
            raise ValueError("message view --key needs -t TOPIC")
    if not msgs:
        raise MQClientError(ResponseCode.QUERY_NOT_FOUND, f"no message found for {args.id or args.key}", "message view")
    for m in msgs:
        if args.output == "json":
            _out(json.dumps({**m.to_dict(), "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
                             "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
                             "commitLogOffset": m.commitlog_offset, "storedTopic": m.stored_topic}))
        else:
            _out(_msg_line(m, "lines"))
    return 0


async def scheduled_list(args: ScheduledListArgs) -> int:
    """Pages of DELAYMQ_QUERY_SCHEDULED until --limit rows or the end; rows are printed per page."""
    left = args.limit
    header = False
    async with Admin(args.namesrv, args.timeout) as admin:
        for addr in await admin.broker_addrs(args.broker):
            cursor: str | None = None
            while left > 0:
                [(_a, page)] = await admin.list_scheduled(
                    addr, topic=args.topic, level=args.level, timers=args.timers, dueBefore=args.due_before,
                    key=args.key, limit=min(left, 1000), cursor=cursor)
                rows = page.get("rows") or []
                left -= len(rows)
                for r in rows:
                    r["broker"] = addr
                    r["due"] = _when(int(r.get("dueMs") or 0))
                    if args.output == "json":
                        _out(json.dumps(r))
                if args.output != "json" and rows:
                    cols = [[r["due"], r["dueMs"], f"L{r['level']}" if r["kind"] == "level" else "timer", r["topic"],
                             r["tags"] or "-", r["keys"] or "-", r["uniqKey"], r["msgId"]] for r in rows]
                    if not header:
                        _table(cols, ["#Due", "#Due (epoch ms)", "#Kind", "#Topic", "#Tags", "#Keys", "#UNIQ_KEY",
                                      "#MsgId"])
                        header = True
                    else:
                        for c in cols:
                            _out("  ".join(str(x) for x in c))
                cursor = page.get("cursor")
                if not cursor:
                    break
    if args.output != "json" and not header:
        _out("nothing scheduled matches")
    return 0


async def _scheduled_cancel(args: ScheduledCancelArgs, msg_id: str) -> int:
    async with Admin(args.namesrv, args.timeout) as admin:
        r = await admin.cancel_scheduled(msg_id, args.broker)
    status = r.get("status")
    if args.output == "json":
        _out(json.dumps(r))
    else:
        what = (f"delay level {r.get('level')}" if r.get("kind") == "level" else r.get("kind") or "message")
        due = _when(int(r.get("dueMs") or 0)) if r.get("dueMs") else "-"
        _out({"cancelled": f"cancelled: {what} message {r.get('uniqKey')} for topic {r.get('topic')}, due {due} "
                           f"({r.get('detail')})",
              "already_cancelled": f"already cancelled: {r.get('uniqKey')} ({r.get('detail')})",
              "delivered": f"not cancelled: {r.get('uniqKey')} was already delivered ({r.get('detail')})",
              }.get(str(status), f"not cancelled: {r.get('detail') or status}"))
    return 0 if status in ("cancelled", "already_cancelled") else 1


async def scheduled_cancel(args: ScheduledCancelArgs) -> int:
    if args.id and not args.uniq_key:
        return await _scheduled_cancel(args, args.id)
    target: str | tuple[str, str, int]
    if args.id:
        target = args.id
    elif args.topic and args.uniq_key and args.deliver_at:
        target = (args.topic, args.uniq_key, args.deliver_at)
    else:  # refused by the parser already (`_validate`)
        raise ValueError("scheduled cancel needs --id, or -t with --uniq-key and --deliver-at")
    async with Producer(args.group, args.namesrv, send_timeout=args.timeout) as producer:
        try:
            r = await producer.cancel_timer(target)
        except MQClientError as e:
            if e.code != CANCEL_REFUSED:
                raise
            # the broker found nothing to cancel (unknown, already cancelled, already due): nothing changed
            _out(f"not cancelled: {e.remark}")
            return 1
    _out(f"cancelled: the timer will not be delivered (cancel marker {r.status.name} msgId={r.msg_id} "
         f"offsetMsgId={r.offset_msg_id})")
    return 0


async def scheduled_stats(args: ScheduledStatsArgs) -> int:
    """`scheduled levels` (per delay level) and `scheduled timers` (timer wheel), from the runtime info."""
    async with Admin(args.namesrv, args.timeout) as admin:
        info = await admin.runtime_info(args.broker)
        if args.action == "levels":
            rows: list[tuple[str, dict[str, int]]] = []  # (broker address, one delay level's figures)
            for addr, table in info.items():
                levels = Admin.delay_levels(table)
                if not levels:  # a broker without these entries: SCHEDULE_TOPIC_XXXX max offsets at least
                    levels = await _levels_from_offsets(admin)
                rows += [(addr, lv) for lv in levels]
            if args.output == "json":
                _out(json.dumps([{"broker": addr, **lv} for addr, lv in rows]))
            else:
                _levels_table(rows)
        else:
            if args.output == "json":
                _out(json.dumps({addr: {k: v for k, v in sorted(table.items()) if k.lower().startswith("timer")}
                                 for addr, table in info.items()}))
            else:
                _timers_table(info)
    return 0


def _lateness(figure: int | str | None, exact: bool) -> str:
    """A lateness figure (ms); `<=` marks a histogram bucket's upper bound (a broker without exact figures)."""
    if figure is None or figure == "":
        return "-"
    return str(figure) if exact else f"<={figure}"


# lateness columns of both tables: exact figures over the last N deliveries ("Over last"), max since start
_LATENESS_HEADER = ["#Lateness p50 (ms)", "#Lateness p99 (ms)", "#Lateness max (ms)", "#Over last"]


def _levels_table(rows: list[tuple[str, dict[str, int]]]) -> None:
    """One line per broker and delay level. Lateness = store time of the delivered copy - due time, exact
    (nearest rank) over the last `window` deliveries of the level; max since the broker started."""
    out = []
    for addr, lv in rows:
        exact = "latenesswindow" in lv
        empty = exact and lv["latenesswindow"] == 0
        out.append([addr, lv.get("level", "-"), _fmt("delayms", lv.get("delayms")), _fmt("pending", lv.get("pending")),
                    _fmt("nextdue", lv.get("nextdue")), _fmt("delivered", lv.get("delivered")),
                    *(("-", "-", "-") if empty else (_lateness(lv.get("latenessp50"), exact),
                                                     _lateness(lv.get("latenessp99"), exact),
                                                     _lateness(lv.get("latenessmax"), True))),
                    lv.get("latenesswindow", "-")])
    _table(out, ["#Broker", "#Level", "#Delay", "#Pending", "#Next Due", "#Delivered", *_LATENESS_HEADER])
    if any("latenesswindow" not in lv for _, lv in rows):
        _out("(<= : the broker reports a histogram bucket's upper bound, not the exact figure)")


# (column header, runtime-info key, formatter) of `scheduled timers`, one row per broker
_TIMER_COLUMNS: list[tuple[str, str, Callable[[str], str]]] = [
    ("#Pending", "timerCongestNum", str),
    ("#Slots", "timerOccupiedSlots", str),
    ("#Next Due", "timerNextDueSlotMs", lambda v: _fmt("nextdue", int(v))),
    ("#In/s", "timerEnqueueTps", str),
    ("#Out/s", "timerDequeueTps", str),
    ("#Delivered", "timerDelivered", str),
    ("#Cancelled", "timerCancelled", str),
    ("#Rolled", "timerRolled", str),
    ("#Rejected", "timerRejected", str),
    ("#Behind ms", "timerReadBehind", str),
]


def _timers_table(info: dict[str, dict[str, str]]) -> None:
    """One line per broker: the wheel's backlog and rates, and lateness as in `scheduled levels`."""
    rows = []
    for addr, t in info.items():
        if not any(k.startswith("timer") for k in t):
            continue
        exact = "timerLatenessWindow" in t
        window = t.get("timerLatenessWindow", "-")
        if exact:
            late = ["-", "-", "-"] if window == "0" else [t["timerLatenessP50"], t["timerLatenessP99"],
                                                           t["timerLatenessMax"]]
        else:  # an older broker: only the histogram's p99 bound
            late = ["-", _lateness(t.get("rocketmq_delay_message_latency_p99"), False), "-"]
        rows.append([addr, *(fmt(t[key]) if t.get(key, "") != "" else "-" for _, key, fmt in _TIMER_COLUMNS),
                     *late, window])
    if not rows:
        _out("no timer statistics reported by the broker")
        return
    _table(rows, ["#Broker", *(h for h, _, _ in _TIMER_COLUMNS), *_LATENESS_HEADER])


def _fmt(col: str, v: int | None) -> str:
    if v is None:
        return "-"
    if col == "nextdue":
        if v <= 0:
            return "-"
        return datetime.fromtimestamp(v / 1000).isoformat(sep=" ", timespec="milliseconds")
    if col == "delayms":
        return _fmt_delay(int(v))
    return str(v)


def _fmt_delay(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


async def _levels_from_offsets(admin: Admin) -> list[dict[str, int]]:
    route = await admin.instance.fetch_route(SCHEDULE_TOPIC)
    out: list[dict[str, int]] = []
    for name in sorted(route.brokers) if route else []:
        for qid in range(18):
            try:
                mx = await query_offset(admin.instance, w.GET_MAX_OFFSET, MessageQueue(SCHEDULE_TOPIC, name, qid))
            except MQClientError:
                continue
            if mx:
                out.append({"level": qid + 1, "maxOffset": mx})
    return out
