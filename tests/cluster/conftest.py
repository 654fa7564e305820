"""Cluster tests reuse the in-process broker fixtures of tests/server."""

from tests.server.conftest import broker_ctl, client, make_broker  # noqa: F401
