"""Runs one function per rank in real, separate processes (spawned, like workers)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from squall.exchange.base import open_exchange


def _rank_main(fn, args, config, rank, world, env, queue) -> None:  # pragma: no cover - child process
    os.environ.update(env or {})
    try:
        exchange = open_exchange(config, rank, world)
        try:
            result = fn(exchange, rank, world, *args)
            queue.put((rank, "ok", result, exchange.stats().to_dict()))
        finally:
            exchange.close()
    except BaseException as exc:
        queue.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", None))


def run_ranks(
    fn: Callable[..., Any],
    config: Mapping[str, Any],
    world: int,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120,
    args: tuple = (),
) -> tuple[dict[int, Any], dict[int, dict]]:
    """Run ``fn(exchange, rank, world, *args)`` on ``world`` processes; results and stats by rank.

    ``fn`` must be a module-level function (it is pickled into spawned processes).
    Raises AssertionError with the rank's traceback if any rank failed.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, args=(fn, args, dict(config), r, world, dict(env or {}), queue))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    stats: dict[int, dict] = {}
    errors: dict[int, str] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while len(results) + len(errors) < world:
            try:
                rank, status, payload, st = queue.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [
                    r
                    for r, p in enumerate(procs)
                    if not p.is_alive() and r not in results and r not in errors
                ]
                for r in dead:  # died without reporting (crash, kill): fail now, not at the timeout
                    errors[r] = f"process exited with code {procs[r].exitcode} before reporting"
                if time.monotonic() > deadline:
                    missing = [r for r in range(world) if r not in results and r not in errors]
                    raise AssertionError(f"ranks {missing} did not finish within {timeout_s} s") from None
                continue
            if status == "ok":
                results[rank] = payload
                stats[rank] = st
            else:
                errors[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if errors:
        raise AssertionError("\n".join(f"rank {r}: {msg}" for r, msg in sorted(errors.items())))
    return results, stats
