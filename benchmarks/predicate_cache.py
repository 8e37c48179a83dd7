"""Predicate cache (HRDBMS predicate-based data skipping): a repeated scan query, first run vs second run.

    python benchmarks/predicate_cache.py --lineitem data/sf1/lineitem.parquet --workers 2 --row-group-rows 100000
    python benchmarks/predicate_cache.py --lineitem data/sf1/lineitem.parquet --section page-index

Writes a copy of ``lineitem`` ordered by ``l_orderkey`` (so min/max statistics of l_shipdate, l_discount and
l_quantity span their whole domains in every row group and prune nothing), then per query: a fresh Squall
connection runs it twice (first run: every row group read and probed; second: row groups the cache knows held
no match are skipped; best of ``--repeat``), and the same with the cache off (planner option) as the peer,
and DuckDB (best of ``--repeat``) over the same file. Every answer is checked against DuckDB's. Prints row
groups read on the first and second run, the probe's seconds (slowest rank), the times, and the ratios
1st/off-1st (the probe's overhead; both plan from scratch), 2nd/off and 2nd/duckdb. Queries: TPC-H Q6 as specified (a year, 2 % of the rows: every
row group matches, nothing to skip), a selective Q6 variant (one day, one discount, few quantities) and a
narrower variant of it (implied by the cached predicate: skipped without its own first run).

A second section (``--section page-index``) measures row groups skipped by Parquet page indexes: ``lineitem``
ordered by ``l_shipdate``, its first and second halves interleaved row group by row group (row group g holds
the g-th chunk of the earlier half, then the g-th chunk of the later half, each sorted by date: two sorted runs
about 3.5 years apart), written with page indexes and pages of at most ``--page-rows`` rows (10,000; tpchgen-cli's files
have ~20,000). A row group's min/max span both runs, so a date range in
between prunes nothing by min/max; its pages (each inside one run) do. Per query, page index on and off
(predicate cache off in both, so only footer indexes act): row groups skipped by min/max and by page index,
row groups read, rows and bytes the workers scanned (``--arrow-path``: read with PyArrow, as S3 and Lambda
workers do, instead of DuckDB's Parquet views), the driver's planning seconds (first plan in the process: reads the page index; then
cached), the best query time, and DuckDB's over the same file; answers checked against DuckDB.
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
from squall.driver.options import PlannerOptions
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
    ap.add_argument("--section", choices=("all", "cache", "page-index"), default="all")
    ap.add_argument("--page-rows", type=int, default=10_000, help="page-index section: rows per page at most")
    ap.add_argument(
        "--arrow-path",
        action="store_true",
        help="page-index section: workers read with PyArrow (as S3 and Lambda do), not DuckDB's Parquet views",
    )
    args = ap.parse_args(argv)
    failed = False
    if args.section in ("all", "cache"):
        failed |= _cache_section(args)
    if args.section in ("all", "page-index"):
        failed |= _page_index_section(args)
    return 1 if failed else 0


def _cache_section(args: argparse.Namespace) -> bool:
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
    return failed


PAGE_QUERIES = {
    # TPC-H Q6 as specified: 1994 lies in the earlier half (row groups whose first run reaches 1994 match)
    "q6": Q6.format(lo="1994-01-01", hi="1995-01-01", dlo=0.05, dhi=0.07, q=24),
    "q6-month": Q6.format(lo="1994-03-01", hi="1994-04-01", dlo=0.05, dhi=0.07, q=24),
    "q6-day": Q6.format(lo="1996-06-01", hi="1996-06-02", dlo=0.05, dhi=0.07, q=24),
    "q14-shipdate": "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem "
    "WHERE l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'",
}


def _two_runs(ref: duckdb.DuckDBPyConnection, lineitem: str, rows_per_group: int) -> pa.Table:
    """``lineitem`` by ship date, its two halves interleaved row group by row group (see the module doc)."""
    n = ref.sql(f"SELECT count(*) FROM read_parquet('{lineitem}')").fetchall()[0][0]
    half, run = (n + 1) // 2, rows_per_group // 2
    return ref.sql(
        f"""SELECT * EXCLUDE (rn) FROM (
              SELECT *, row_number() OVER (ORDER BY l_shipdate, l_orderkey, l_linenumber) - 1 AS rn
              FROM read_parquet('{lineitem}'))
            ORDER BY (rn % {half}) // {run}, rn // {half}, rn"""
    ).to_arrow_table()


def _page_index_section(args: argparse.Namespace) -> bool:
    failed = False
    with tempfile.TemporaryDirectory(prefix="pageindex-bench-") as tmp:
        folder = Path(tmp)
        ref = duckdb.connect()
        table = _two_runs(ref, args.lineitem, args.row_group_rows)
        pq.write_table(
            table,
            folder / "lineitem.parquet",
            row_group_size=args.row_group_rows,
            write_page_index=True,
            max_rows_per_page=args.page_rows,
        )
        del table
        ref.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{folder / 'lineitem.parquet'}')")
        print()
        reader = "PyArrow reads (as S3/Lambda)" if args.arrow_path else "DuckDB Parquet views (local)"
        print(
            f"page index: lineitem in two interleaved runs by l_shipdate, {args.row_group_rows} rows per row group, "
            f"{args.page_rows} rows per page, W={args.workers}, predicate cache off, {reader}"
        )
        print(
            f"{'query':<14}{'mode':>5}{'groups':>7}{'minmax':>7}{'pages':>6}{'read':>6}{'rows scanned':>13}"
            f"{'MB scanned':>11}{'plan 1st':>9}{'plan':>7}{'best s':>8}{'duck s':>8}{'/duck':>7}"
        )
        modes = {"on": True, "off": False}
        cons = {
            mode: squall.connect(
                data=str(folder),
                workers=args.workers,
                planner_options=PlannerOptions(predicate_cache=False, page_index=on),
                storage_options={"native_scans": False} if args.arrow_path else None,
            )
            for mode, on in modes.items()
        }
        try:
            for con in cons.values():
                con.sql("SELECT count(*) FROM lineitem WHERE l_orderkey < 0")  # start the worker pools
            for name, sql in PAGE_QUERIES.items():
                expected = ref.sql(sql).to_arrow_table()
                t_duck = min(_duck(ref, sql) for _ in range(args.repeat))
                for mode, con in cons.items():
                    first = con.sql(sql)
                    runs = []
                    for _ in range(args.repeat):
                        t, _sk, got = _timed(con, sql)
                        runs.append(t)
                        problem = compare_results(got, expected, sql)
                        if problem:
                            print(f"{name} ({mode}): WRONG ANSWER: {problem}")
                            failed = True
                    total = first.stats["data_skipping"]["total"]
                    plan_first = first.stats["planning_breakdown"].get("plan_s", 0.0)
                    again = con.sql(sql + " -- replanned")
                    plan_again = again.stats["planning_breakdown"].get("plan_s", 0.0)
                    best = min(runs)
                    print(
                        f"{name:<14}{mode:>5}{total['planned']:>7}{total['minmax']:>7}{total['page_index']:>6}"
                        f"{total['read']:>6}{first.stats['rows_scanned']:>13}"
                        f"{first.stats['bytes_scanned'] / 1e6:>11.1f}{plan_first:>9.3f}{plan_again:>7.3f}{best:>8.3f}{t_duck:>8.3f}"
                        f"{best / t_duck:>7.2f}"
                    )
        finally:
            for con in cons.values():
                con.close()
    return failed


if __name__ == "__main__":
    sys.exit(main())
