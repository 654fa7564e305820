"""The README's `delaymq` examples run as written (bash, against a real broker, NAMESRV_ADDR set)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.broker import REPO_ROOT
from tests.helpers.checks import present

pytestmark = pytest.mark.process


def cli_block() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("## The `delaymq` CLI"):]
    return present(re.search(r"```sh\n(.*?)```", section, re.S), "a sh block in the CLI section").group(1)


def test_readme_cli_examples_run_as_written(broker):
    block = cli_block()
    assert "export NAMESRV_ADDR=" in block and "D=.venv/bin/delaymq" in block
    delaymq = Path(sys.executable).with_name("delaymq")
    script = (block.replace("export NAMESRV_ADDR=127.0.0.1:9876", f"export NAMESRV_ADDR={broker.namesrv}")
              .replace("D=.venv/bin/delaymq", f"D={delaymq}"))
    lines = [ln for ln in script.splitlines() if ln.strip()]
    # each line echoed before it runs: a failure names its line
    traced = "\n".join(f"echo '>>> {i}' >&2\n{ln}" for i, ln in enumerate(lines))
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", traced], cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=240, env={**os.environ, "TZ": "UTC"}, stdin=subprocess.DEVNULL)
    failed = re.findall(r">>> (\d+)", r.stderr)
    where = lines[int(failed[-1])] if failed else "?"
    assert r.returncode == 0, f"README line failed: {where}\n{r.stderr[-3000:]}"
    assert r.stdout.count('"topic": "Orders"') >= 100  # the consume line printed its 100 messages
    assert "cancelled: timer message" in r.stdout
