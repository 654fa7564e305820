"""Each atheris target for a few seconds in a subprocess; any non-CodecError exception fails it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.fuzz import run, targets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")


def test_harness_and_targets_agree():
    assert set(run.TARGETS) == set(targets.TARGETS)


@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_seeds_pass_their_target(name):
    for seed in targets.seeds(name):
        targets.TARGETS[name](seed)


@pytest.mark.process
@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_fuzz_target_briefly(name):
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz.run", "--target", name, "--seconds", "4"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Done" in proc.stderr  # libFuzzer really ran to its time limit

