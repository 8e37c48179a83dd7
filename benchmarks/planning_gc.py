"""Python's garbage collector while queries are planned (``driver/planning_gc.py``): TPC-DS queries each sent once.

    python benchmarks/planning_gc.py --data data/tpcds-sf1 --workers 2 --rounds 3

Per round, two fresh processes one after the other (the order alternates between rounds), each with one Squall
connection that sends every query once, as a user who sends many different queries does (nothing cached but
what the connection learned from earlier queries): one with the planning threshold as shipped
(:data:`~squall.driver.planning_gc.PLANNING_THRESHOLD`), the peer with CPython's default 700 while planning.
Each prints the collector's time and collections (per generation) over the queries, its longest pause, the
median planning time, the geometric mean of the query times and their sum; the last lines give the ratios shipped/peer
over the rounds. Answers are not checked here (``benchmarks/tpcds.py`` checks them).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _measure(data: str, workers: int, threshold: int, queries: list[int]) -> dict[str, float]:
    import squall
    import squall.driver.planning_gc as planning
    from squall import tpcds

    planning.PLANNING_THRESHOLD = threshold
    pauses: list[tuple[int, float]] = []
    started: list[float] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append((info["generation"], time.perf_counter() - started.pop()))

    with squall.connect(data=data, workers=workers) as con:
        con.sql(tpcds.query(3)).to_arrow()  # the worker pool started, the catalog read
        gc.callbacks.append(watch)
        times, plannings = [], []
        for n in queries:
            t0 = time.perf_counter()
            result = con.sql(tpcds.query(n))
            result.to_arrow()
            times.append(time.perf_counter() - t0)
            plannings.append(result.stats["planning_s"])
        gc.callbacks.remove(watch)
    return {
        "gc_s": sum(p for _g, p in pauses),
        "full": sum(1 for g, _p in pauses if g == 2),
        "collections": len(pauses),
        "longest_s": max((p for _g, p in pauses), default=0.0),
        "planning_median_s": statistics.median(plannings),
        "geomean_s": math.exp(sum(map(math.log, times)) / len(times)),
        "total_s": sum(times),
    }


def _child(args: argparse.Namespace) -> None:
    queries = [int(q) for q in args.queries.split(",")] if args.queries else list(range(1, 100))
    print(json.dumps(_measure(args.data, args.workers, args.threshold, queries)))


def _line(name: str, m: dict[str, float]) -> str:
    return (
        f"{name:<9} gc {m['gc_s'] * 1e3:6.0f} ms in {m['collections']:5.0f} collections ({m['full']:.0f} full), "
        f"longest {m['longest_s'] * 1e3:5.1f} ms; planning median {m['planning_median_s'] * 1e3:5.1f} ms; "
        f"queries geomean {m['geomean_s'] * 1e3:6.1f} ms, all {m['total_s']:5.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/tpcds-sf1", help="TPC-DS Parquet folder (squall gen-tpcds)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", default="", help="e.g. 1,5,9 (default all 99)")
    parser.add_argument("--threshold", type=int, default=0, help=argparse.SUPPRESS)  # a child process's
    args = parser.parse_args()
    if args.threshold:
        _child(args)
        return
    if not Path(args.data).is_dir():
        sys.exit(
            f"planning_gc: no TPC-DS data in {args.data} (make it with: squall gen-tpcds --sf 1 --out {args.data})"
        )
    from squall.driver.planning_gc import PLANNING_THRESHOLD

    runs: dict[str, list[dict[str, float]]] = {"shipped": [], "peer": []}
    for r in range(args.rounds):
        order = [("shipped", PLANNING_THRESHOLD), ("peer", 700)]
        for name, threshold in order if r % 2 == 0 else order[::-1]:
            command = [sys.executable, __file__, "--data", args.data, "--workers", str(args.workers)]
            command += ["--threshold", str(threshold), "--queries", args.queries]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r + 1} " + _line(name, runs[name][-1]), flush=True)
    for key, what in (
        ("gc_s", "gc time"),
        ("longest_s", "longest pause"),
        ("geomean_s", "queries geomean"),
        ("total_s", "all queries"),
    ):
        ratios = [a[key] / b[key] for a, b in zip(runs["shipped"], runs["peer"]) if b[key]]
        if ratios:
            print(f"{what}: shipped/peer {statistics.median(ratios):.2f} (median of {len(ratios)} rounds)")


if __name__ == "__main__":
    main()
