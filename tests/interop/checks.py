"""Assertions and multi-consumer choreography shared by the interop tests."""

from __future__ import annotations

from collections import Counter

from tests.helpers.agents import AgentProcess


def sent_ok(producer: AgentProcess, count: int) -> list[dict]:
    """All `count` sends acknowledged, each exactly once; returns the 'sent' events."""
    errors = producer.of("send_error")
    sent = producer.of("sent")
    assert not errors, f"send errors: {errors[:3]}\n{producer.diagnostics()}"
    assert sorted(e["i"] for e in sent) == list(range(count)), producer.diagnostics()
    return sent


def bodies(events: list[dict], acked_only: bool = True) -> list[str]:
    return [e["body"] for e in events if e.get("ack", True) or not acked_only]


def received(agent: AgentProcess, prefix: str | None = None) -> list[dict]:
    evs = [e for e in agent.of("received") if e.get("ack", True)]
    return [e for e in evs if prefix is None or (e.get("body") or "").startswith(prefix)]


def assert_exactly(received_events: list[dict], sent_events: list[dict], what: str) -> None:
    """The received set equals the sent set, no duplicates, and keys/tags/body travelled intact."""
    got = Counter(e["body"] for e in received_events)
    want = {e["body"]: e for e in sent_events}
    dupes = {b: n for b, n in got.items() if n > 1}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, f"{what}: missing {missing[:5]} ({len(missing)}), extra {extra[:5]} ({len(extra)})"
    assert not dupes, f"{what}: delivered more than once: {dict(list(dupes.items())[:5])}"
    for e in received_events:
        s = want[e["body"]]
        assert (e.get("keys") or None) == s.get("keys"), f"{what}: keys {e.get('keys')!r} != sent {s.get('keys')!r}"
        assert (e.get("tags") or None) == s.get("tags"), f"{what}: tags {e.get('tags')!r} != sent {s.get('tags')!r}"


def acked_bodies(consumers: list[AgentProcess], prefix: str | None = None) -> set[str]:
    return {e["body"] for c in consumers for e in received(c, prefix)}


def wait_bodies(consumers: list[AgentProcess], want: set[str], timeout: float, what: str) -> None:
    """Wait until the consumers together have acknowledged every body in `want` (shared Condition)."""
    consumers[0].wait_for(lambda _a: want <= acked_bodies(consumers), timeout,
                          f"{what}: bodies still missing", stop_on_exit=False)


def warm_up(produce, consumers: list[AgentProcess], queues: int, clustering: bool,
            rounds: int = 12, round_timeout: float = 6.0) -> int:
    """Send one message per queue per round until the consumers' queue ownership is settled.

    `produce(prefix)` must send `queues` messages, one per queue, with bodies starting with prefix.
    Broadcasting: settled when every consumer acknowledged the whole round.
    Clustering: settled when each message of the round reached exactly one consumer and every
    consumer got at least one (rebalancing has split the queues). Returns the rounds used.
    """
    for r in range(rounds):
        prefix = f"warm{r}-"
        want = {e["body"] for e in sent_ok(produce(prefix), queues)}
        if clustering:
            def settled(_a, p=prefix, want=want):
                return acked_bodies(consumers, p) >= want
        else:
            def settled(_a, p=prefix, want=want):
                return all(acked_bodies([c], p) >= want for c in consumers)
        try:
            consumers[0].wait_for(settled, round_timeout, f"warm-up round {r}", stop_on_exit=False)
        except AssertionError:
            continue
        if not clustering:
            return r + 1
        per = [Counter(bodies(received(c, prefix))) for c in consumers]
        total = sum(per, Counter())
        if all(n == 1 for n in total.values()) and all(per):
            return r + 1
    raise AssertionError(f"consumers did not settle after {rounds} warm-up rounds:\n"
                         + "\n".join(c.diagnostics() for c in consumers))
