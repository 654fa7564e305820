"""codec.cache.BoundedCache: hits are plain dict reads; misses are counted; a full cache starts over."""

import codec.command  # noqa: F401  (the modules whose caches are listed below)
import codec.delivery_batch  # noqa: F401
import codec.properties  # noqa: F401
import codec.pull_response  # noqa: F401
import codec.record_rewrite  # noqa: F401
from codec.cache import CACHES, BoundedCache


def test_bounded_cache_counts_misses_and_never_outgrows_its_bound():
    c: BoundedCache[int, str] = BoundedCache("test.cache", 3)
    assert c in CACHES
    for k in range(10):
        if c.get(k) is None:
            assert c.remember(k, str(k)) == str(k)
        assert len(c) <= 3
    assert c.get(9) == "9"
    assert c.stats() == {"size": 1, "misses": 10, "resets": 3}
    c.remember(9, "nine")  # replacing a present key never resets
    assert c.stats()["resets"] == 3 and c[9] == "nine"


def test_the_codec_hot_path_caches_are_all_bounded_caches():
    names = {c.name for c in CACHES}
    assert {"delivery.topic", "delivery.tags_code", "delivery.queue_id", "delivery.destination",
            "send.properties_shape", "rocketmq_header.layout", "rocketmq_header.key",
            "pull_response.remark"} <= names
