"""`delaymq analytics report --input DIR --out DIR [--master URL]` (also `python -m analytics`)."""

from __future__ import annotations

import argparse
import os
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="analytics_cmd", required=True)
    rep = sub.add_parser("report", help="aggregate exported metrics and traces with Spark into Parquet + HTML")
    rep.add_argument("--input", required=True, help="export directory (e.g. store/export)")
    rep.add_argument("--out", required=True, help="output directory for tables/, charts/ and report.html")
    rep.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    rep.add_argument("--bucket-seconds", type=int, default=None, help="time bucket size (default: about 60 buckets)")


KINDS = ("traces", "metrics", "rmq_trace")


def input_problem(path: str) -> str | None:
    """Why `path` is not an export directory, or None (remote URLs are left to Spark)."""
    if "://" in path and not path.startswith("file://"):
        return None
    local = path.removeprefix("file://")
    if not os.path.isdir(local):
        return f"input directory not found: {path}"
    for kind in KINDS:
        d = os.path.join(local, kind)
        if os.path.isdir(d) and any(n.endswith(".msgpack") for n in os.listdir(d)):
            return None
    return (f"no delaymq exports in {path} (expected {', '.join(k + '/' for k in KINDS)} holding *.msgpack "
            "files; point --input at <store>/export)")


def run(args: argparse.Namespace) -> int:
    problem = input_problem(args.input)
    if problem:
        print(f"delaymq analytics: {problem}", file=sys.stderr)
        return 1
    from analytics.report import build_report

    started = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    try:
        result = build_report(args.input, args.out, master=args.master, bucket_seconds=args.bucket_seconds,
                              progress=progress)
    except ValueError as e:  # files there, but no record in them
        print(f"delaymq analytics: {e}", file=sys.stderr)
        return 1
    print(result.html_path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="delaymq analytics")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
