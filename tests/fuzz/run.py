"""atheris harness over the codec decoders: `python -m tests.fuzz.run --seconds N [--target NAME]`.

Without --target every target runs in its own subprocess, one after another, sharing the --seconds
budget. A crash (any exception other than CodecError, or an input slower than --timeout) makes
the run exit non-zero; libFuzzer writes the input under tests/fuzz/artifacts/<target>/, and the
growing corpus lives in tests/fuzz/artifacts/corpus/<target>/ (both gitignored).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

TARGETS = ("frame", "json_header", "rocketmq_header", "record", "batch", "heartbeat", "route", "admin", "misc",
           "delivery", "rewrite", "namesrv", "timer", "sql92")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _run_one(name: str, seconds: int, timeout: int, max_len: int) -> None:
    import atheris

    assert "codec" not in sys.modules, "codec must be imported under instrumentation"
    with atheris.instrument_imports(include=["codec"]):
        from tests.fuzz import targets
    target = targets.TARGETS[name]
    # a persistent corpus (gitignored) so later runs start from what earlier ones found
    corpus = os.path.join(HERE, "artifacts", "corpus", name)
    os.makedirs(corpus, exist_ok=True)
    for i, seed in enumerate(targets.seeds(name)):
        with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
            f.write(seed)
    artifacts = os.path.join(HERE, "artifacts", name)
    os.makedirs(artifacts, exist_ok=True)
    argv = [sys.argv[0], f"-max_total_time={seconds}", f"-timeout={timeout}", f"-max_len={max_len}",
            "-rss_limit_mb=2048", f"-artifact_prefix={artifacts}/", "-print_final_stats=1", corpus]
    atheris.Setup(argv, target)
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=int, default=60, help="total budget (split across targets)")
    p.add_argument("--target", help="run only this target, in this process")
    p.add_argument("--timeout", type=int, default=5, help="seconds one input may take (hang detection)")
    p.add_argument("--max-len", type=int, default=4096)
    args = p.parse_args(argv)
    if args.target:
        if args.target not in TARGETS:
            p.error(f"unknown target {args.target}; choose from {', '.join(TARGETS)}")
        _run_one(args.target, max(1, args.seconds), args.timeout, args.max_len)
        return 0
    per = max(1, args.seconds // len(TARGETS))
    failed = []
    for name in TARGETS:
        rc = subprocess.call([sys.executable, "-m", "tests.fuzz.run", "--target", name, "--seconds", str(per),
                              "--timeout", str(args.timeout), "--max-len", str(args.max_len)], cwd=ROOT)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"fuzz: crashes in {', '.join(failed)} (inputs under {os.path.join(HERE, 'artifacts')})",
              file=sys.stderr)
        return 1
    print(f"fuzz: {len(TARGETS)} targets x {per}s, no crash", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
