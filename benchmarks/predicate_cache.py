"""Predicate cache (HRDBMS predicate-based data skipping): a repeated scan query, first run vs second run.

    python benchmarks/predicate_cache.py --lineitem data/sf1/lineitem.parquet --workers 2 --row-group-rows 100000

Writes a copy of ``lineitem`` ordered by ``l_orderkey`` (so min/max statistics of l_shipdate, l_discount and
l_quantity span their whole domains in every row group and prune nothing), then per query: a fresh Squall
connection runs it twice (first run: every row group read and probed; second: row groups the cache knows held
no match are skipped; best of ``--repeat``), and the same with the cache off (planner option) as the peer,
and DuckDB (best of ``--repeat``) over the same file. Every answer is checked against DuckDB's. Prints row
groups read on the first and second run, the probe's seconds (slowest rank), the times, and the ratios
1st/off-1st (the probe's overhead; both plan from scratch), 2nd/off and 2nd/duckdb. Queries: TPC-H Q6 as specified (a year, 2 % of the rows: every
row group matches, nothing to skip), a selective Q6 variant (one day, one discount, few quantities) and a
narrower variant of it (implied by the cached predicate: skipped without its own first run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import squall
from squall.driver.planner import PlannerOptions
from squall.testing import compare_results

Q6 = """SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem
WHERE l_shipdate >= DATE '{lo}' AND l_shipdate < DATE '{hi}' AND l_discount BETWEEN {dlo} AND {dhi} AND l_quantity < {q}"""
QUERIES = {
    "q6": Q6.format(lo="1994-01-01", hi="1995-01-01", dlo=0.05, dhi=0.07, q=24),
    "q6-selective": Q6.format(lo="1994-01-01", hi="1994-01-02", dlo=0.06, dhi=0.06, q=4),
    "q6-narrower": Q6.format(lo="1994-01-01", hi="1994-01-02", dlo=0.06, dhi=0.06, q=2),
}


def _timed(con: squall.Connection, sql: str) -> tuple[float, dict, pa.Table]:
    t0 = time.perf_counter()
    result = con.sql(sql)
    table = result.to_arrow()
    return time.perf_counter() - t0, result.stats["data_skipping"], table


def _run(con: squall.Connection, sql: str, answers: list[pa.Table], stats: list[dict]) -> float:
    """One timed run; its answer and skipping stats are appended to the lists."""
    t, sk, table = _timed(con, sql)
    answers.append(table)
    stats.append(sk)
    return t


def _duck(ref: duckdb.DuckDBPyConnection, sql: str) -> float:
    t0 = time.perf_counter()
    ref.sql(sql).to_arrow_table()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lineitem", required=True, help="a TPC-H lineitem Parquet file")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--row-group-rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs after the first; the best counts")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pcache-bench-") as tmp:
        folder = Path(tmp)
        ref = duckdb.connect()
        ordered = ref.sql(
            f"SELECT * FROM read_parquet('{args.lineitem}') ORDER BY l_orderkey, l_linenumber"
        ).to_arrow_table()
        pq.write_table(ordered, folder / "lineitem.parquet", row_group_size=args.row_group_rows)
        del ordered
        ref.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{folder / 'lineitem.parquet'}')")
        print(f"lineitem ordered by l_orderkey, {args.row_group_rows} rows per row group, W={args.workers}")
        print(
            f"{'query':<14}{'groups':>7}{'read 1st':>9}{'read 2nd':>9}{'probe s':>8}{'1st s':>8}{'off 1st':>8}"
            f"{'2nd s':>8}{'off s':>8}{'duck s':>8}{'1st/off1':>9}{'2nd/off':>8}{'2nd/duck':>9}"
        )
        failed = False
        with (
            squall.connect(data=str(folder), workers=args.workers) as con,
            squall.connect(
                data=str(folder), workers=args.workers, planner_options=PlannerOptions(predicate_cache=False)
            ) as off,
        ):
            con.sql("SELECT count(*) FROM lineitem WHERE l_orderkey < 0")  # start the worker pools
            off.sql("SELECT count(*) FROM lineitem WHERE l_orderkey < 0")
            for name, sql in QUERIES.items():
                expected = ref.sql(sql).to_arrow_table()
                answers: list[pa.Table] = []
                on_stats: list[dict] = []
                t1 = _run(con, sql, answers, on_stats)
                t_off1 = _run(off, sql, answers, [])
                t2 = min(_run(con, sql, answers, on_stats) for _ in range(args.repeat))
                t_off = min(_run(off, sql, answers, []) for _ in range(args.repeat))
                t_duck = min(_duck(ref, sql) for _ in range(args.repeat))
                for got in answers:
                    problem = compare_results(got, expected, sql)
                    if problem:
                        print(f"{name}: WRONG ANSWER: {problem}")
                        failed = True
                first, second = on_stats[0], on_stats[1]
                probe_s = max((s["probe_s"] for s in first["scans"]), default=0.0)
                print(
                    f"{name:<14}{first['total']['planned']:>7}{first['total']['read']:>9}{second['total']['read']:>9}"
                    f"{probe_s:>8.3f}{t1:>8.3f}{t_off1:>8.3f}{t2:>8.3f}{t_off:>8.3f}{t_duck:>8.3f}"
                    f"{t1 / t_off1:>9.2f}{t2 / t_off:>8.2f}{t2 / t_duck:>9.2f}"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
