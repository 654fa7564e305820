"""Run load-generator coroutines in separate processes, each on its own uvloop event loop."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor


def run_job(module: str, name: str, kwargs: dict) -> dict:
    """In a generator process: the coroutine `module.name(**kwargs)` on a fresh uvloop."""
    import importlib

    import uvloop

    return uvloop.run(getattr(importlib.import_module(module), name)(**kwargs))


def _run(name: str, kwargs: dict) -> dict:
    return run_job("bench.workers", name, kwargs)


def run_one(name: str, **kwargs) -> dict:
    return run_parallel([(name, kwargs)])[0]


def run_parallel(jobs: list[tuple[str, dict]]) -> list[dict]:
    """Each (worker name, kwargs) in its own fresh process (spawn); results in order."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(jobs), mp_context=ctx) as pool:
        futs = [pool.submit(_run, name, kw) for name, kw in jobs]
        return [f.result() for f in futs]


def run_here(coro_factory) -> dict:
    """Run a coroutine in this (orchestrator) process on uvloop."""
    import uvloop

    return uvloop.run(coro_factory()) if not _in_loop() else asyncio.run(coro_factory())


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False
