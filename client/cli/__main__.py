"""`delaymq` entry point: argparse subcommands, structlog setup, one-line errors with non-zero exits."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

import structlog

from remoting import loop as event_loop

from .._wire import MQClientError
from . import admin_cmds, messaging
from .parse import delay_level, duration_ms, non_negative_float, positive_float, positive_int, time_ms

EXIT_ERROR, EXIT_USAGE = 1, 2

# what `set_defaults(func=...)` names: a subcommand, called with the parsed Namespace (which has the
# attributes of that subcommand's Protocol in `.args`), returning the exit code
Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


class _Help(argparse.HelpFormatter):
    """Every option's help line ends with its default (when it has one worth showing)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if action.option_strings and d is not None and d is not False and d != argparse.SUPPRESS \
                and not isinstance(action, argparse._CountAction) and "default" not in text:
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # ArgumentParser's own parameters, passed on
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one clear line instead of usage + error
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


# help for the options declared without one (applied to every subcommand by _fill_help)
_HELP = {
    "--topic": "topic name", "--count": "number of messages to send", "--tags": "the messages' tag (TAGS)",
    "--transaction": "send as transactional (half) messages, then commit or roll them back",
    "--output": "output format", "--from-where": "where a group without committed offsets starts",
    "--progress": "draw a progress bar even if stderr is no TTY", "--read-queues": "read queue count",
    "--write-queues": "write queue count", "--perm": "permission: 2 read, 4 write, 6 read and write",
    "--order": "an ordered topic", "--uniq-key": "UNIQ_KEY of a timer (with -t and --deliver-at, instead of --id)",
    "--deliver-at": "the timer's deliver time (with -t and --uniq-key)", "--group": "group name",
    "--role": "broker role",
}


def _fill_help(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _fill_help(sub)
        elif action.help is None and action.option_strings:
            long = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
            action.help = _HELP.get(long, long.lstrip("-").replace("-", " "))


def _version() -> str:
    try:
        return importlib.metadata.version("delaymq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876",
                   help="name server address(es), ';' separated; $NAMESRV_ADDR if set")
    p.add_argument("--timeout", type=positive_float, default=3.0, help="request timeout in seconds")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="delaymq", description="delaymq / RocketMQ 4.x client tool")
    ap.add_argument("--version", action="version", version=f"delaymq {_version()}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("produce", help="send messages")
    _common(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="delaymq-cli-producer", help="producer group")
    p.add_argument("--count", type=positive_int, default=1)
    p.add_argument("--rate", type=non_negative_float, default=0.0, help="messages per second (0 = as fast as possible)")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", default="hello delaymq {i}", help="body text; {i} is the message index")
    body.add_argument("--size", type=positive_int, help="body of SIZE bytes")
    p.add_argument("--tags")
    p.add_argument("--keys", help="space-separated keys; {i} is the message index")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay-level", type=delay_level, help="delay level 1..18")
    when.add_argument("--deliver-at", type=time_ms, help="timer deliver time: epoch ms or ISO time")
    when.add_argument("--delay", type=duration_ms, help="timer delay, e.g. 30s, 1500ms, 2h")
    p.add_argument("--transaction", choices=["commit", "rollback"],
                   help="send as transactional (half) messages, then commit or roll them back")
    p.add_argument("--inflight", type=positive_int, default=64, help="sends in flight at once")
    p.add_argument("--output", choices=["summary", "lines", "json"], default="summary",
                   help="summary: one line at the end; lines: status, UNIQ_KEY, offset msgId per message; json")
    p.add_argument("--print-ids", action="store_true",
                   help="print 'UNIQ_KEY offsetMsgId' per message (the ids scheduled cancel / message view take)")
    p.add_argument("--progress", action="store_true", help="draw a progress bar even if stderr is no TTY")
    p.set_defaults(func=messaging.produce)

    p = sub.add_parser("consume", help="consume messages with a push consumer")
    _common(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="delaymq-cli-consumer", help="consumer group")
    p.add_argument("--from-where", choices=["first", "last", "timestamp"], default="last")
    p.add_argument("--timestamp", type=time_ms, help="start time for --from-where timestamp")
    flt = p.add_mutually_exclusive_group()
    flt.add_argument("--expr", default="*", help="tag filter, e.g. 'TagA || TagB'")
    flt.add_argument("--sql", help="SQL92 property filter, e.g. \"region = 'eu' AND amount > 100\" "
                                   "(the broker needs enablePropertyFilter=true)")
    p.add_argument("--max", type=positive_int, help="exit after N messages")
    p.add_argument("--idle-timeout", type=non_negative_float, default=0.0, help="exit after S seconds without messages")
    p.add_argument("--broadcast", action="store_true", help="BROADCASTING model (offsets kept locally)")
    p.add_argument("--orderly", action="store_true", help="orderly consumption (queue locks)")
    p.add_argument("--output", choices=["lines", "json"], default="lines")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(func=messaging.consume)

    p = sub.add_parser("topic", help="create, list, status")
    tsub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    c = tsub.add_parser("create", help="create or update a topic (mqadmin updateTopic)")
    _common(c)
    c.add_argument("-t", "--topic", required=True)
    c.add_argument("-r", "--read-queues", type=positive_int, default=8)
    c.add_argument("-w", "--write-queues", type=positive_int, default=8)
    c.add_argument("-p", "--perm", type=int, choices=range(0, 8), metavar="PERM", default=6)
    c.add_argument("-o", "--order", action="store_true")
    c.add_argument("-b", "--broker", help="broker address (default: every master in the route)")
    c.add_argument("-c", "--cluster", help="cluster name (accepted; the masters come from the route)")
    c.set_defaults(func=admin_cmds.topic_create)
    c = tsub.add_parser("list", help="all topics (mqadmin topicList)")
    _common(c)
    c.set_defaults(func=admin_cmds.topic_list)
    c = tsub.add_parser("status", help="min/max offset per queue (mqadmin topicStatus)")
    _common(c)
    c.add_argument("-t", "--topic", required=True)
    c.add_argument("--output", choices=["table", "json"], default="table")
    c.set_defaults(func=admin_cmds.topic_status)

    p = sub.add_parser("group", help="consumer group progress")
    gsub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    c = gsub.add_parser("progress", help="lag per queue (mqadmin consumerProgress)")
    _common(c)
    c.add_argument("-g", "--group", required=True)
    c.add_argument("-t", "--topic", action="append",
                   help="topic (repeatable; default: every topic the group has committed offsets for)")
    c.add_argument("--no-retry", action="store_true", help="leave out %%RETRY%%<group>")
    c.add_argument("--output", choices=["table", "json"], default="table")
    c.set_defaults(func=admin_cmds.group_progress)
    c = gsub.add_parser("connections", help="online clients and subscriptions (mqadmin consumerConnection)")
    _common(c)
    c.add_argument("-g", "--group", required=True)
    c.add_argument("--output", choices=["table", "json"], default="table")
    c.set_defaults(func=admin_cmds.group_connections)

    p = sub.add_parser("message", help="look messages up")
    msub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    c = msub.add_parser("view", help="by msgId (queryMsgById) or by key (queryMsgByKey)")
    _common(c)
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", "-i", help="offset msgId (or UNIQ_KEY together with -t)")
    which.add_argument("--key", "-k", help="message key (needs -t)")
    c.add_argument("-t", "--topic")
    c.add_argument("--output", choices=["lines", "json"], default="lines")
    c.set_defaults(func=admin_cmds.message)

    p = sub.add_parser("scheduled", help="delay levels, timer wheel, cancel timers")
    ssub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for name, hlp in (("levels", "pending messages per delay level"), ("timers", "timer wheel statistics")):
        c = ssub.add_parser(name, help=hlp)
        _common(c)
        c.add_argument("-b", "--broker", help="broker address (default: every master)")
        c.add_argument("--output", choices=["table", "json"], default="table")
        c.set_defaults(func=admin_cmds.scheduled_stats)
    c = ssub.add_parser("list", help="pending delay-level and timer messages, page by page (delaymq's own request)")
    _common(c)
    c.add_argument("-b", "--broker", help="broker address (default: every master)")
    c.add_argument("-t", "--topic", help="only messages for this (real) topic")
    only = c.add_mutually_exclusive_group()
    only.add_argument("--level", type=delay_level, help="only this delay level")
    only.add_argument("--timers", action="store_true", help="only timer messages")
    c.add_argument("--due-before", type=time_ms, help="only messages due before this time (epoch ms or ISO 8601)")
    c.add_argument("--key", "-k", help="only messages with this KEYS entry or UNIQ_KEY")
    c.add_argument("--limit", type=positive_int, default=100, help="print at most N messages (default: 100)")
    c.add_argument("--output", choices=["table", "json"], default="table", help="output format")
    c.set_defaults(func=admin_cmds.scheduled_list)
    c = ssub.add_parser("cancel", help="cancel a scheduled message (delay level or timer) by its id")
    _common(c)
    c.add_argument("--id", "-i", help="UNIQ_KEY (the id produce prints) or offset msgId of the scheduled message")
    c.add_argument("-b", "--broker", help="broker address (default: every master)")
    c.add_argument("--output", choices=["lines", "json"], default="lines", help="output format")
    c.add_argument("-t", "--topic", help="topic (with --uniq-key and --deliver-at instead of --id)")
    c.add_argument("--uniq-key")
    c.add_argument("--deliver-at", type=time_ms)
    c.add_argument("-g", "--group", default="delaymq-cli-producer")
    c.set_defaults(func=admin_cmds.scheduled_cancel)

    p = sub.add_parser("broker", help="master/slave: promote a slave")
    bsub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    c = bsub.add_parser("promote", help="make the slave at -b the master, live (delaymq's PROMOTE_BROKER)")
    _common(c)
    c.add_argument("-b", "--broker", required=True, help="the slave's broker address ip:port")
    c.add_argument("--role", choices=["ASYNC_MASTER", "SYNC_MASTER"], default="ASYNC_MASTER",
                   help="brokerRole it takes (default ASYNC_MASTER: it has no slave yet)")
    c.add_argument("--access-key", help="ACL: an admin account's accessKey (signs the request)")
    c.add_argument("--secret-key", help="ACL: its secretKey")
    c.add_argument("--output", choices=["lines", "json"], default="lines")
    c.set_defaults(func=admin_cmds.broker)

    from . import up

    p = sub.add_parser("up", help="a name server, N brokers and M proxies on this host (one process per core); "
                                  "Ctrl-C stops them all")
    up.add_arguments(p)

    # The analytics job reads exported files only; the CLI just gives analysts the same front door.
    from analytics.cli import add_arguments as add_analytics_arguments

    p = sub.add_parser("analytics", help="Spark report over the broker's exports (lateness, throughput, backlog, lag)")
    add_analytics_arguments(p)
    _fill_help(ap)
    return ap


def _configure_logging(verbose: int) -> None:
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                    structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False)


def _validate(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command == "message" and args.key and not args.topic:
        ap.error("message view --key needs -t TOPIC")
    if args.command == "consume" and args.from_where == "timestamp" and not args.timestamp:
        ap.error("--from-where timestamp needs --timestamp")
    if args.command == "scheduled" and args.action == "cancel" and not args.id and not (
            args.topic and args.uniq_key and args.deliver_at):
        ap.error("scheduled cancel needs --id, or -t with --uniq-key and --deliver-at")


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    _validate(ap, args)
    if args.command == "analytics":
        from analytics.cli import run as run_analytics

        return run_analytics(args)
    if args.command == "up":  # child processes and signals, no event loop of its own
        from . import up

        return up.run(args)
    _configure_logging(args.verbose)
    command: Command = args.func
    try:
        return event_loop.run(command(args))
    except KeyboardInterrupt:
        return 130
    except MQClientError as e:
        sys.stderr.write(f"delaymq: error: {e}\n")
    except TimeoutError:
        sys.stderr.write(f"delaymq: error: no answer from {args.namesrv} within {args.timeout}s\n")
    except OSError as e:
        sys.stderr.write(f"delaymq: error: cannot reach {args.namesrv}: {e.strerror or e}\n")
    except ValueError as e:
        sys.stderr.write(f"delaymq: error: {e}\n")
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
