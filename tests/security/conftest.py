"""Fixtures for the security tests: a broker with aclEnable and a plain_acl.yml in tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import register_diagnostics
from tests.helpers.agents import AgentProcess

CPP_ACL_AGENT = Path(__file__).with_name("cpp_acl_agent.py")

ADMIN_AK, ADMIN_SK = "adminKey01", "adminSecret01"
USER_AK, USER_SK = "userKey001", "userSecret001"
SUBONLY_AK, SUBONLY_SK = "subOnlyKey1", "subOnlySecret1"

ACL_YAML = f"""\
globalWhiteRemoteAddresses:
  - 127.0.0.{{200,201}}
accounts:
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    whiteRemoteAddress:
    admin: true
  - accessKey: {USER_AK}
    secretKey: {USER_SK}
    whiteRemoteAddress: 127.0.0.50-60
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB|SUB
      - TopicDenied=DENY
    groupPerms:
      - GID_denied=DENY
  - accessKey: {SUBONLY_AK}
    secretKey: {SUBONLY_SK}
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


@pytest.fixture
def acl_file(tmp_path) -> Path:
    p = tmp_path / "plain_acl.yml"
    p.write_text(ACL_YAML)
    return p


@pytest.fixture
def acl_broker(broker_factory, acl_file):
    return broker_factory({"aclEnable": "true", "aclFile": str(acl_file)})


@pytest.fixture
def cpp_signed(tmp_path, request):
    """`start(cmd, broker, ak, sk, channel="LOCAL", **opts) -> AgentProcess` (cpp_agent.py CLI, signed)."""
    started: list[AgentProcess] = []

    def start(cmd: str, broker, ak: str, sk: str, channel: str = "LOCAL", **opts) -> AgentProcess:
        work = tmp_path / "agents" / f"{len(started):02d}-{cmd}"
        argv = [sys.executable, str(CPP_ACL_AGENT), cmd, "--namesrv", broker.namesrv]
        for key, val in opts.items():
            flag = "--" + key.replace("_", "-")
            if val is True:
                argv.append(flag)
            elif val not in (None, False):
                argv += [flag, str(val)]
        agent = AgentProcess(f"cpp-acl-{cmd}", argv, work, env={
            "HOME": str(work), "ACL_ACCESS_KEY": ak, "ACL_SECRET_KEY": sk, "ACL_CHANNEL": channel})
        register_diagnostics(request, f"agent {agent.name}", agent.diagnostics)
        started.append(agent)
        return agent.start()

    yield start
    for a in started:
        a.kill()
