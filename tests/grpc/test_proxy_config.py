"""delaymq-proxy's send-coalescing keys and gRPC server stack (server.proxy.config): defaults, a file's values, and
a bad value refused with the key named (the one line a bad config stops the proxy with)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.proxy.config import load_proxy_config


def test_send_coalescing_is_on_by_default_and_the_file_can_turn_it_off(tmp_path: Path) -> None:
    cfg = load_proxy_config(None, {"namesrvAddr": "127.0.0.1:9876"})
    assert (cfg.send_coalesce, cfg.send_coalesce_linger_ms, cfg.send_coalesce_max_frames) == (True, 10, 128)
    conf = tmp_path / "proxy.conf"
    conf.write_text("sendCoalesce=false\nsendCoalesceLingerMs=0\nsendCoalesceMaxFrames=16\n")
    cfg = load_proxy_config(str(conf), {"namesrvAddr": "127.0.0.1:9876"})
    assert (cfg.send_coalesce, cfg.send_coalesce_linger_ms, cfg.send_coalesce_max_frames) == (False, 0, 16)


@pytest.mark.parametrize(("key", "value"), [("sendCoalesceMaxFrames", "0"), ("sendCoalesceLingerMs", "-1"),
                                            ("sendCoalesceLingerMs", "5000"), ("sendCoalesce", "maybe")])
def test_a_bad_send_coalescing_value_is_refused_naming_its_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"^{key}: "):
        load_proxy_config(None, {"namesrvAddr": "127.0.0.1:9876", key: value})


def test_the_grpc_server_stack_is_envoy_by_default_and_the_file_can_choose_grpcio(tmp_path: Path) -> None:
    assert load_proxy_config(None, {"namesrvAddr": "127.0.0.1:9876"}).grpc_server_stack == "envoy"
    conf = tmp_path / "proxy.conf"
    conf.write_text("grpcServerStack=grpcio\n")
    assert load_proxy_config(str(conf), {"namesrvAddr": "127.0.0.1:9876"}).grpc_server_stack == "grpcio"
    with pytest.raises(ValueError, match="^grpcServerStack: "):
        load_proxy_config(None, {"namesrvAddr": "127.0.0.1:9876", "grpcServerStack": "granian"})
