"""Fixtures: delaymq name servers (`namesrv_factory`) and brokers registered with them (`cluster_broker`)."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import register_diagnostics
from tests.helpers.cluster import NamesrvProcess


@pytest.fixture
def namesrv_factory(tmp_path, request):
    made: list[NamesrvProcess] = []
    counter = itertools.count()

    def make(config=None) -> NamesrvProcess:
        ns = NamesrvProcess(tmp_path / f"namesrv{next(counter)}", config)
        register_diagnostics(request, f"namesrv {ns.addr}", ns.diagnostics)
        made.append(ns)
        return ns.start()

    yield make
    for ns in made:
        if ns.running:
            ns.stop()


@pytest.fixture
def cluster_broker(broker_factory):
    """`make(name, *namesrvs, **config)`: a delaymq broker named `name` registered with the name servers."""

    def make(name: str, *namesrvs: NamesrvProcess, **config):
        conf = {"brokerName": name, "namesrvAddr": ";".join(ns.addr for ns in namesrvs), **config}
        return broker_factory(conf)

    return make
