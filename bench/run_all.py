"""`python -m bench.run_all [--only NAME[,NAME]] [--quick] [--list]`: run benchmarks, write
bench/results/<name>.json, print a table."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

from bench.common import RESULTS, write_result


def registry() -> dict:
    from bench import broker_core, cluster, controller, delay, grpc, ha, meta, sql92_filter, timer
    from bench import grpc_floor as floor
    from bench import grpc_topology as topology

    return {**broker_core.BENCHES, **delay.BENCHES, **timer.BENCHES, **ha.BENCHES, **grpc.BENCHES,
            **floor.BENCHES, **topology.BENCHES, **cluster.BENCHES, **meta.BENCHES, **controller.BENCHES,
            **sql92_filter.BENCHES}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(rows: list[dict]) -> str:
    lines = ["| benchmark | result | target | met |", "|---|---|---|---|"]
    for r in rows:
        head = ", ".join(f"{k}={_fmt(v)}" for k, v in (r.get("headline") or {}).items())
        met = {True: "yes", False: "NO", None: "-"}.get(r.get("met"), str(r.get("met")))
        lines.append(f"| {r['name']} | {head or r.get('error', '')} | {r.get('target', '')} | {met} |")
    return "\n".join(lines)


def host_speed_s() -> float:
    """Seconds this host takes for a fixed pure-Python loop (10 million additions), best of three: one
    number before and one after each benchmark, so runs on a shared host can be compared (its module-level
    form took 0.63 s at 22:35, 1.26 s at 00:23 and 0.66 s a minute later, UTC, 2026-11-24: this host's speed
    halves and recovers within minutes)."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        acc = 0
        for i in range(10_000_000):
            acc += i
        best = min(best, time.perf_counter() - t)
    return round(best, 3)


def main(argv: list[str] | None = None) -> int:
    reg = registry()
    p = argparse.ArgumentParser(prog="python -m bench.run_all")
    p.add_argument("--only", help="comma-separated benchmark names: " + ",".join(reg))
    p.add_argument("--quick", action="store_true", help="smaller N (smoke run)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--table", action="store_true", help="print the table of the existing result files")
    a = p.parse_args(argv)
    if a.list:
        print("\n".join(reg))
        return 0
    names = list(reg) if not a.only else [n.strip() for n in a.only.split(",") if n.strip()]
    if a.table:
        rows = [json.loads((RESULTS / f"{n}.json").read_text()) for n in names if (RESULTS / f"{n}.json").exists()]
        print(table(rows))
        return 0
    bad = [n for n in names if n not in reg]
    if bad:
        p.error(f"unknown benchmark(s) {bad}; known: {', '.join(reg)}")
    rows, failed = [], 0
    for name in names:
        t0 = time.monotonic()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        try:
            speed = host_speed_s()
            res = reg[name](a.quick)
            res["quick"] = a.quick
            res["host_loop_s_before"] = speed
            res["host_loop_s_after"] = host_speed_s()
            res["bench_wall_s"] = round(time.monotonic() - t0, 1)
            path = write_result(name, res)
            print(f"   {json.dumps(res.get('headline'))} -> {path}", file=sys.stderr, flush=True)
            rows.append({"name": name, **res})
        except Exception as e:  # a failing benchmark must not hide the others
            failed += 1
            traceback.print_exc()
            rows.append({"name": name, "error": f"FAILED: {e!r}"[:200], "met": False})
    print(table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
