"""What `build_parser` hands each subcommand: one Protocol per parser, the attributes argparse sets on
its Namespace (dest names, with the types the `type=` parsers give). A subcommand takes its Protocol,
so its body is type-checked; `tests/client/test_units.py` parses each subcommand and checks that the
Namespace carries every attribute declared here, so the two cannot drift apart."""

from __future__ import annotations

from typing import Protocol


class CommonArgs(Protocol):
    """`_common`: every subcommand that talks to a name server."""

    command: str
    namesrv: str
    timeout: float
    verbose: int


class ProduceArgs(CommonArgs, Protocol):
    topic: str
    group: str
    count: int
    rate: float
    body: str
    size: int | None
    tags: str | None
    keys: str | None
    delay_level: int | None
    deliver_at: int | None
    delay: int | None
    transaction: str | None  # "commit" | "rollback"
    inflight: int
    output: str  # "summary" | "lines" | "json"; produce turns --print-ids into "ids"
    print_ids: bool
    progress: bool


class ConsumeArgs(CommonArgs, Protocol):
    topic: str
    group: str
    from_where: str
    timestamp: int | None
    expr: str
    sql: str | None
    max: int | None
    idle_timeout: float
    broadcast: bool
    orderly: bool
    output: str
    progress: bool


class TopicCreateArgs(CommonArgs, Protocol):
    topic: str
    read_queues: int
    write_queues: int
    perm: int
    order: bool
    broker: str | None
    cluster: str | None


class TopicStatusArgs(CommonArgs, Protocol):
    topic: str
    output: str


class GroupProgressArgs(CommonArgs, Protocol):
    group: str
    topic: list[str] | None
    no_retry: bool
    output: str


class GroupConnectionsArgs(CommonArgs, Protocol):
    group: str
    output: str


class MessageViewArgs(CommonArgs, Protocol):
    id: str | None
    key: str | None
    topic: str | None
    output: str


class ScheduledStatsArgs(CommonArgs, Protocol):
    """`scheduled levels` and `scheduled timers`."""

    action: str
    broker: str | None
    output: str


class ScheduledListArgs(CommonArgs, Protocol):
    broker: str | None
    topic: str | None
    level: int | None
    timers: bool
    due_before: int | None
    key: str | None
    limit: int
    output: str


class ScheduledCancelArgs(CommonArgs, Protocol):
    id: str | None
    broker: str | None
    output: str
    topic: str | None
    uniq_key: str | None
    deliver_at: int | None
    group: str


class BrokerPromoteArgs(CommonArgs, Protocol):
    broker: str
    role: str
    access_key: str | None
    secret_key: str | None
    output: str
