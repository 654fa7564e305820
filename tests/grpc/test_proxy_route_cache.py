"""delaymq-proxy's cached route (server.proxy.routes.CachedRoute): the writable queues every send picks from are
computed once when the route is cached, and are what the per-call reference (`writable_reference`) computes, for
routes of several brokers with any permissions, queue counts and missing masters."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codec.bodies import BrokerData, QueueData, TopicRouteData
from server.proxy.routes import CachedRoute
from tests.codec.strategies import BOUNDED

NAMES = ["broker-c", "broker-a", "broker-b"]
_queue = st.builds(QueueData, st.sampled_from(NAMES), st.integers(0, 8), st.integers(0, 8), st.sampled_from([0, 2, 4, 6]))
_broker = st.builds(lambda name, addrs: BrokerData("DefaultCluster", name, addrs), st.sampled_from(NAMES),
                    st.dictionaries(st.sampled_from([0, 1]), st.just("127.0.0.1:10911"), max_size=2))


@BOUNDED
@given(st.lists(_queue, max_size=4), st.lists(_broker, max_size=3))
def test_the_cached_writable_queues_are_the_reference(queues: list[QueueData], brokers: list[BrokerData]) -> None:
    route = CachedRoute(TopicRouteData(queues, brokers), 0.0)
    assert route.writable() == route.writable_reference()
    assert all(route.master(q.broker_name) for q, _ in route.writable())
