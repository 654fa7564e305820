"""The stock Java mqadmin 4.9.7 against a delaymq broker: the harness works and the basics answer."""

from __future__ import annotations

import pytest

from tests.helpers.java import mqadmin, requires_java

pytestmark = [requires_java, pytest.mark.java]


def test_mqadmin_topic_list_and_update_topic(broker):
    created = mqadmin("updateTopic", "-n", broker.namesrv, "-b", broker.addr, "-t", "JavaSmoke", "-r", "4", "-w", "4")
    assert "create topic to" in created.stdout and "success" in created.stdout, created.stdout + created.stderr
    listed = mqadmin("topicList", "-n", broker.namesrv)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "JavaSmoke" in listed.stdout.split()
