#!/usr/bin/env python
"""Communication scheduling of the fabric exchange (Neo-Join §III-C): model and real runs.

Two parts, both printed as tables:

1. **Model** (Neo-Join's Fig. 13 question, on a star network where every rank has one link of one
   speed each way). For byte matrices of W ranks — uniform, one hot receiver, Zipf-sized partitions
   assigned by hash — the finish time of: the bound (the busiest link: no schedule is shorter),
   Squall's open-shop schedule (``exchange/schedule.py``, with the exchange's quantum), the
   synchronized round-robin schedule (phase k: rank s sends to s+k), and every sender writing to all
   receivers at once under ideal max-min fair sharing (what the rotated exchange does; real
   switches do worse, which is Neo-Join's point). Bandwidth utilization = bytes / (W * finish time).
2. **Real**: W processes on this machine exchange a skewed matrix over libfabric (``tcp`` and
   ``shm``), ``schedule="open-shop"`` vs ``"rotated"`` in the same run, every result checked; the
   median of ``--repeat`` after a warm-up. On one machine the providers copy through memory and
   the kernel, so there is no switch port to contend for: this measures the schedule's cost (its
   size gather and per-transfer releases), not its benefit on a network.

    python benchmarks/fabric_schedule.py                 # model W=4,8,16; real W=4, 16 MiB per rank
    python benchmarks/fabric_schedule.py --model-only
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
import uuid
from typing import Any

import numpy as np

from squall.exchange.schedule import bound, open_shop, round_robin_length

QUANTUM = 256 << 10


# --- 1. model --------------------------------------------------------------------------------------


def fair_share_length(matrix: list[list[int]]) -> float:
    """Finish time when every transfer starts at once and links are shared max-min fairly (fluid)."""
    n = len(matrix)
    left = {(s, r): float(matrix[s][r]) for s in range(n) for r in range(n) if s != r and matrix[s][r] > 0}
    now = 0.0
    while left:
        # progressive filling: every active flow's rate rises alike until a link (s's uplink,
        # r's downlink) is full; its flows stop rising; repeat until none rises
        rate = dict.fromkeys(left, 0.0)
        cap = {("up", s): 1.0 for s in range(n)} | {("down", r): 1.0 for r in range(n)}
        active = set(left)
        while active:
            users: dict[tuple[str, int], int] = {}
            for s, r in active:
                users[("up", s)] = users.get(("up", s), 0) + 1
                users[("down", r)] = users.get(("down", r), 0) + 1
            rise = min(cap[link] / k for link, k in users.items())
            for s, r in active:
                rate[(s, r)] += rise
                cap[("up", s)] -= rise
                cap[("down", r)] -= rise
            active = {(s, r) for s, r in active if cap[("up", s)] > 1e-12 and cap[("down", r)] > 1e-12}
        step = min(left[f] / rate[f] for f in left)
        now += step
        for f in list(left):
            left[f] -= rate[f] * step
            if left[f] <= 1e-9 * matrix[f[0]][f[1]]:
                del left[f]
    return now


def matrices(world: int, per_rank: int, seed: int = 0) -> dict[str, list[list[int]]]:
    """Bytes each rank sends each rank: uniform, one hot receiver, Zipf keys hashed to 64·W partitions."""
    rng = np.random.default_rng(seed)

    def spread(weights: np.ndarray, jitter: float) -> list[list[int]]:
        noise = rng.uniform(1 - jitter, 1 + jitter, (world, world))  # senders hold different amounts
        share = weights / weights.sum()
        return [
            [int(per_rank * share[r] * noise[s][r]) if s != r else 0 for r in range(world)]
            for s in range(world)
        ]

    hot = np.full(world, 0.7 / (world - 1))
    hot[0] = 0.3
    out = {"uniform": spread(np.ones(world), 0.0), "hot receiver 30%": spread(hot, 0.0)}
    for a in (1.0, 1.5):
        parts = 64 * world
        freq = 1.0 / np.arange(1, 100_001) ** a  # key k's share of the rows
        part_weight = np.bincount(rng.integers(0, parts, freq.size), weights=freq, minlength=parts)
        owner = rng.permutation(parts) % world  # the hash assignment of partitions to ranks
        out[f"zipf {a}"] = spread(np.bincount(owner, weights=part_weight, minlength=world), 0.5)
    return out


def model(worlds: list[int], per_rank: int) -> None:
    print(
        f"model: star network, {per_rank >> 20} MiB per rank; finish time relative to the bound, utilization"
    )
    header = f"{'W':>3} {'matrix':<18}{'open-shop':>11}{'phases':>8}{'round-robin':>13}{'all at once':>13}"
    print(header + f"{'ms to plan':>12}")
    print("-" * (len(header) + 12))
    for world in worlds:
        for name, m in matrices(world, per_rank).items():
            alpha = bound(m)
            total = sum(map(sum, m))
            t0 = time.perf_counter()
            sched = open_shop(m, QUANTUM)
            plan_ms = (time.perf_counter() - t0) * 1000

            def cell(length: float, alpha: int = alpha, total: int = total, world: int = world) -> str:
                return f"{length / alpha:.2f} ({total / (world * length):.0%})"

            print(
                f"{world:>3} {name:<18}{cell(sched.length):>11}{len(sched.phases):>8}"
                f"{cell(round_robin_length(m)):>13}{cell(fair_share_length(m)):>13}{plan_ms:>12.1f}"
            )


# --- 2. real runs ----------------------------------------------------------------------------------


def _rows(rank: int, receiver: int, per_rank_rows: int, world: int) -> int:
    share = 0.3 if receiver == 0 else 0.7 / (world - 1)  # one hot receiver
    return int(per_rank_rows * share)


def _table(rank: int, receiver: int, per_rank_rows: int, world: int) -> Any:
    import pyarrow as pa

    n = _rows(rank, receiver, per_rank_rows, world)
    rng = np.random.default_rng(rank * 1000 + receiver)
    return pa.table({"key": np.arange(n, dtype=np.int64) + rank * 10**9, "value": rng.random(n)})


def _rank(config: dict, rank: int, world: int, per_rank_rows: int, repeat: int, queue: Any) -> None:
    from squall.exchange.base import ExchangeSpec, open_exchange

    exchange = open_exchange(config, rank, world)
    try:
        parts = {r: _table(rank, r, per_rank_rows, world) for r in range(world)}
        expected = sum(_rows(s, rank, per_rank_rows, world) for s in range(world))
        everyone = tuple(range(world))
        times = []
        for rep in range(repeat + 1):
            exchange.barrier(f"start{rep}")
            t0 = time.perf_counter()
            spec = ExchangeSpec(config["query_id"], rep + 1, everyone, everyone, "hash")
            exchange.send(spec, parts)
            got = exchange.receive(spec)
            exchange.barrier(f"end{rep}")
            if got.num_rows != expected:
                raise AssertionError(f"rank {rank}: {got.num_rows} rows, expected {expected}")
            if rep:
                times.append(time.perf_counter() - t0)
        notes = [e.get("schedule", "") for e in exchange.stats().per_exchange if "schedule" in e]
        queue.put((rank, times, notes[-1] if notes else ""))
    finally:
        exchange.close()


def real(world: int, mib: int, repeat: int, providers: list[str]) -> None:
    from squall.exchange.fabric import FabricExchangeFactory, native_available

    reason = native_available()
    if reason:
        print(f"real runs skipped: {reason}")
        return
    per_rank_rows = (mib << 20) // 16
    print(f"\nreal: {world} processes, {mib} MiB per rank, one receiver gets 30 %; median of {repeat}")
    print(f"{'provider':<10}{'schedule':<11}{'ms':>9}{'vs rotated':>12}  note")
    ctx = mp.get_context("spawn")
    for provider in providers:
        env = {"FI_TCP_IFACE": "lo"} if provider == "tcp" else {}
        medians: dict[str, float] = {}
        for schedule in ("rotated", "open-shop"):
            factory = FabricExchangeFactory(provider=provider, timeout_s=120, env=env, schedule=schedule)
            config = factory.prepare(f"sched-{uuid.uuid4().hex[:8]}", world)
            queue = ctx.Queue()
            procs = [
                ctx.Process(target=_rank, args=(config, r, world, per_rank_rows, repeat, queue))
                for r in range(world)
            ]
            for p in procs:
                p.start()
            try:
                results = [queue.get(timeout=600) for _ in procs]
            finally:
                for p in procs:
                    p.join(timeout=30)
                factory.cleanup(config)
                factory.close()
            per_rep = [max(r[1][i] for r in results) for i in range(repeat)]  # the slowest rank counts
            medians[schedule] = statistics.median(per_rep)
            note = next(r[2] for r in results if r[0] == 0)
            ratio = medians[schedule] / medians["rotated"]
            print(f"{provider:<10}{schedule:<11}{medians[schedule] * 1000:>9.1f}{ratio:>12.2f}  {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default="4,8,16", help="W for the model, default 4,8,16")
    parser.add_argument("--model-mib", type=int, default=256, help="MiB per rank in the model")
    parser.add_argument("--ranks", type=int, default=4, help="processes for the real runs, default 4")
    parser.add_argument("--mib", type=int, default=16, help="MiB per rank in the real runs, default 16")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions after one warm-up")
    parser.add_argument("--providers", default="tcp,shm", help="libfabric providers for the real runs")
    parser.add_argument("--model-only", action="store_true", help="skip the real runs")
    args = parser.parse_args(argv)
    model([int(w) for w in args.worlds.split(",")], args.model_mib << 20)
    if not args.model_only:
        real(args.ranks, args.mib, args.repeat, [p for p in args.providers.split(",") if p])
    return 0


if __name__ == "__main__":
    sys.exit(main())
