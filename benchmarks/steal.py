"""Work stealing of scan splits (I-Store) with one slow rank: stealing on vs off, same run.

    SQUALL_TPCH_CACHE=/work/tpch-cache python benchmarks/steal.py --sf 0.1 --workers 4 --queries 1,6 --delay 0.5

Rank ``--slow-rank`` sleeps ``--delay`` seconds before every row group it scans (``SQUALL_FAULTS=slow_scan:…``,
a slow or overloaded worker). For each query and each setting (``off``: planned splits only; ``on``:
``PlannerOptions(work_stealing=True)``) a fresh local connection runs the query once as a warm-up, checked
against DuckDB on the same files, then ``--repeat`` timed runs (the fastest counts). Printed per query and
setting: wall time, the row groups each rank read (``off``: from the plan; ``on``: from
``Result.stats["steals"]``), splits stolen and claim requests; then the ratio on/off of the wall times
measured in this run. ``--delay 0`` measures what stealing costs when no rank is slow (per-row-group
claims, Arrow instead of DuckDB's fused Parquet scan). Exits 1 if a result differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import duckdb

import squall
import squall.tpch as tpch
from squall.driver.options import PlannerOptions
from squall.plan import Plan, ScanInput
from squall.testing import compare_results


def _planned_row_groups(plan: Plan) -> list[int]:
    per = [0] * plan.world_size
    for stage in plan.stages:
        for inp in stage.inputs:
            if isinstance(inp, ScanInput) and not inp.replicated:
                for r in range(plan.world_size):
                    per[r] += sum(len(s.row_groups) for s in inp.splits_for(r))
    return per


def _stolen_row_groups(stats: dict, world: int) -> tuple[list[int], int, int]:
    per, stolen, claims = [0] * world, 0, 0
    for scan in stats["steals"]:
        stolen += scan["stolen"]
        claims += scan["claims"]
        for r in scan["per_rank"]:
            per[r["rank"]] += r["read"]
    return per, stolen, claims


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--queries", default="1,6")
    ap.add_argument("--delay", type=float, default=0.5, help="seconds per row group on the slow rank")
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--data", help="TPC-H Parquet folder (default: $SQUALL_TPCH_CACHE/sf<SF>)")
    args = ap.parse_args(argv)
    data = args.data or os.path.join(os.environ.get("SQUALL_TPCH_CACHE", "."), f"sf{args.sf:g}")
    reference = duckdb.connect()
    for name in ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region"):
        reference.sql(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{data}/{name}*.parquet')")
    if args.delay > 0:
        os.environ["SQUALL_FAULTS"] = f"slow_scan:rank={args.slow_rank}:seconds={args.delay}"
    print(
        f"SF{args.sf:g}, W={args.workers}, rank {args.slow_rank} sleeps {args.delay} s per row group it scans"
    )
    failed = 0
    for n in (int(q) for q in args.queries.split(",")):
        sql = tpch.query(n, sf=args.sf)
        expected = reference.sql(sql).to_arrow_table()
        times: dict[str, float] = {}
        for setting in ("off", "on"):
            options = PlannerOptions(work_stealing=setting == "on")
            with squall.connect(data=data, workers=args.workers, planner_options=options) as con:
                plan = con.plan(sql)
                result = con.sql(sql)  # warm-up, checked
                problem = compare_results(result.to_arrow(), expected, sql)
                if problem:
                    print(f"Q{n} {setting}: WRONG RESULT: {problem}")
                    failed += 1
                best = float("inf")
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    result = con.sql(sql)
                    best = min(best, time.perf_counter() - t0)
            times[setting] = best
            if setting == "off":
                per, stolen, claims = _planned_row_groups(plan), 0, 0
            else:
                per, stolen, claims = _stolen_row_groups(result.stats, args.workers)
            print(
                f"Q{n:<2} stealing {setting:3}  wall {best:6.2f} s  row groups read per rank {per}"
                f"  stolen {stolen}  claims {claims}"
            )
        print(f"Q{n:<2} on/off wall time ratio {times['on'] / times['off']:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
