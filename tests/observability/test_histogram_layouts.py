from codec.histogram import Histogram
from scheduler.stats import LevelStats
from scheduler.timer.metrics import TimerMetrics
from server.observability.registry import Registry, RpcLatency


def test_every_user_keeps_its_bucket_layout():
    # the layouts the Prometheus page and the msgpack exports (and the analytics reading them) have always had
    assert LevelStats(1).lateness.bounds == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000)
    assert TimerMetrics().lateness.bounds == (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                                              30000, 60000)
    assert Registry().histogram("x_ms").bounds == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                                                   30000, 60000)
    rpc = RpcLatency()
    rpc.observe(10, 0.003)
    assert rpc.by_code[10].bounds == (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                      0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
    assert type(LevelStats(1).lateness) is type(TimerMetrics().lateness) is type(rpc.by_code[10]) is Histogram
