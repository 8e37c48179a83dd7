"""PIVOT / UNPIVOT over TPC-H lineitem: distributed (grouped FILTER aggregates, unnest) vs the one-rank
fallback vs one DuckDB process, on the same Parquet files in the same run.

    python benchmarks/pivot.py --data $SQUALL_TPCH_CACHE/sf1 --workers 2 --repeat 3

Each query runs once per engine as a warm-up whose result is checked against DuckDB's
(``squall.testing.compare_results``), then ``--repeat`` timed runs of which the best counts (wall clock
around ``sql → Arrow``; for Squall that includes a dynamic PIVOT's first query). "one rank" plans the
same text with the PIVOT rewrite switched off (what Squall did before: the whole PIVOT on rank 0). Prints
one line per query with the three times and the ratios; exits 1 if a result differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

import squall
from squall.driver import compile as compile_module
from squall.driver.frontend.pivot import Rewritten
from squall.testing import compare_results

QUERIES = {
    "dynamic": "PIVOT lineitem ON l_shipmode USING sum(l_extendedprice) AS s, count(*) AS n "
    "GROUP BY l_returnflag, l_linestatus",
    "standard": "SELECT * FROM lineitem PIVOT (sum(l_quantity) FOR l_returnflag IN ('A', 'N', 'R') "
    "GROUP BY l_shipmode)",
    "unpivot": "SELECT k, count(*) AS n, sum(v) AS s FROM (UNPIVOT (SELECT l_orderkey, l_quantity, "
    "l_discount * 100 AS d100, l_tax * 100 AS t100 FROM lineitem) ON l_quantity, d100, t100 "
    "INTO NAME k VALUE v) GROUP BY k",
}


def _best(run: Callable[[], pa.Table], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    default = os.path.join(os.environ.get("SQUALL_TPCH_CACHE", "data"), "sf1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=default, help="folder of TPC-H Parquet files (default: %(default)s)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    lineitem = Path(args.data) / "lineitem.parquet"
    if not lineitem.exists() or args.workers < 1 or args.repeat < 1:
        print(f"need {lineitem}, --workers >= 1, --repeat >= 1", file=sys.stderr)
        return 2
    ref = duckdb.connect()
    ref.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{lineitem}')")
    dist = squall.connect(data=str(args.data), workers=args.workers)
    onerank = squall.connect(data=str(args.data), workers=args.workers)
    plain = compile_module.plain_pivots

    def without_rewrite(sql: str) -> pa.Table:
        compile_module.plain_pivots = lambda text, binder: Rewritten(text)  # type: ignore[assignment]
        try:
            return onerank.sql(sql).to_arrow()
        finally:
            compile_module.plain_pivots = plain

    print(f"PIVOT/UNPIVOT on {args.data}, W={args.workers}, best of {args.repeat}")
    failed = False
    for name, sql in QUERIES.items():
        expected = ref.sql(sql).to_arrow_table()
        runs = {
            "squall": lambda sql=sql: dist.sql(sql).to_arrow(),
            "one rank": lambda sql=sql: without_rewrite(sql),
        }
        for label, run in runs.items():
            diff = compare_results(run(), expected, sql)
            if diff:
                print(f"{name}: {label} differs from DuckDB: {diff}")
                failed = True
        notes = [n for n in dist.plan(sql).notes if "PIVOT" in n]
        t_duck = _best(lambda sql=sql: ref.sql(sql).to_arrow_table(), args.repeat)
        t_dist = _best(runs["squall"], args.repeat)
        t_one = _best(runs["one rank"], args.repeat)
        print(
            f"{name:9s} squall {t_dist:6.3f} s  one rank {t_one:6.3f} s  duckdb {t_duck:6.3f} s  "
            f"one rank/squall {t_one / t_dist:5.2f}  squall/duckdb {t_dist / t_duck:5.2f}  ({'; '.join(notes)})"
        )
    dist.close()
    onerank.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
