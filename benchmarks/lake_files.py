"""Many small files: one table of N Parquet files, Squall warm at W=2 vs DuckDB warm in one process.

    python benchmarks/lake_files.py                       # 500 files of lineitem SF0.1 (default)
    python benchmarks/lake_files.py --files 500 --sf 0.1 --workers 2 --repeat 5

Makes TPC-H ``lineitem`` with ``tpchgen-cli`` (in the venv) and cuts it into ``--files`` files of equal row
counts under a temporary folder (``lineitem/part-NNNNN.parquet``), then:

- **query**: ``SELECT sum(l_quantity) …`` (and a filtered variant) on ``squall.connect(data=…, workers=W)``,
  best of ``--repeat`` warm runs (the first run, which lists the folder and reads every footer, is reported
  apart), vs DuckDB ``read_parquet('dir/*.parquet')`` best of ``--repeat`` warm runs in one process; answers
  checked equal; prints the ratio (goal: ≤ 1.5) and Squall's planning breakdown of the best run;
- **planning**: seconds per 1,000 files to plan the table from scratch (listing and footers, fresh
  process-wide footer cache) and warm (footers cached by path, size and mtime).

:func:`run` does it all and returns the numbers (a dict) for other scripts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
from timing import best_of

import squall
from squall.testing import compare_results

QUERIES = {
    "sum": "SELECT sum(l_quantity) AS q FROM lineitem",
    "filtered": "SELECT sum(l_extendedprice) AS r FROM lineitem WHERE l_shipdate < DATE '1993-01-01'",
}


def make_files(folder: Path, files: int, sf: float) -> Path:
    """``folder/lineitem/part-NNNNN.parquet``: TPC-H lineitem at ``sf`` cut into ``files`` files."""
    table_dir = folder / "lineitem"
    if table_dir.is_dir() and len(list(table_dir.glob("*.parquet"))) == files:
        return table_dir
    gen = folder / "gen"
    tpchgen = Path(sys.executable).with_name("tpchgen-cli")
    subprocess.run(
        [str(tpchgen), "parquet", "-s", str(sf), "--tables", "lineitem", "--output-dir", str(gen)],
        check=True,
        capture_output=True,
    )
    table = pq.read_table(next(gen.rglob("lineitem*.parquet")))
    table_dir.mkdir(parents=True, exist_ok=True)
    per = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * per, per), table_dir / f"part-{i:05d}.parquet")
    return table_dir


def _one_query(con: Any, duck: duckdb.DuckDBPyConnection, sql: str, glob: str, repeat: int) -> dict[str, Any]:
    """Squall's first and best warm seconds, DuckDB's best warm seconds (runs interleaved, so both see the
    machine's load alike), their ratio, and the planning breakdown of Squall's best run."""
    t0 = time.perf_counter()
    cold = con.sql(sql)
    cold.to_arrow()
    first = time.perf_counter() - t0
    duck_sql = sql.replace("FROM lineitem", f"FROM read_parquet('{glob}')")
    duck.sql(duck_sql).to_arrow_table()  # warm
    ours = theirs = float("inf")
    stats: dict[str, Any] = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = con.sql(sql)
        answer = result.to_arrow()
        mine = time.perf_counter() - t0
        if mine < ours:
            ours, stats = mine, result.stats
        t0 = time.perf_counter()
        expected = duck.sql(duck_sql).to_arrow_table()
        theirs = min(theirs, time.perf_counter() - t0)
        problem = compare_results(answer, expected, sql)  # every timed run's answer
        if problem:
            raise AssertionError(problem)
    return {
        "squall_first_s": first,
        "first_planning_s": cold.stats["planning_s"],
        "first_planning_breakdown": cold.stats["planning_breakdown"],
        "squall_s": ours,
        "duckdb_s": theirs,
        "ratio": ours / theirs,
        "planning_s": stats["planning_s"],
        "planning_breakdown": stats["planning_breakdown"],
    }


def bench_queries(data: Path, workers: int, repeat: int) -> dict[str, Any]:
    """:func:`_one_query` of each of :data:`QUERIES` on ``squall.connect(data=…, workers=W)``."""
    glob = str(data / "lineitem" / "*.parquet")
    duck = duckdb.connect()
    with squall.connect(data=str(data), workers=workers) as con:
        return {name: _one_query(con, duck, sql, glob, repeat) for name, sql in QUERIES.items()}


def bench_planning(data: Path, repeat: int) -> dict[str, float]:
    """Seconds per 1,000 files to make the table's TableInfo: cold (listing + every footer, the
    process-wide footer cache emptied) and warm (listing; footers from the cache)."""
    from squall.driver.catalog.parquet import forget_tables, load_table
    from squall.operators.storage import storage_for

    location = str(data / "lineitem")
    n = len(list((data / "lineitem").glob("*.parquet")))

    def cold() -> Any:  # listing, every footer, the table built
        forget_tables()
        return load_table("lineitem", location, storage_for(location))

    cold_s, _ = best_of(cold, repeat)
    warm_s, _ = best_of(lambda: load_table("lineitem", location, storage_for(location)), repeat)  # listing
    return {"files": n, "cold_s_per_1000": cold_s / n * 1000, "warm_s_per_1000": warm_s / n * 1000}


def run(
    files: int = 500, sf: float = 0.1, workers: int = 2, repeat: int = 10, folder: str | None = None
) -> dict:
    """Make the files (in ``folder``, else a temporary folder), run both benchmarks, print and return them."""
    with tempfile.TemporaryDirectory(prefix="squall-lake-files-") as tmp:
        data = Path(folder or tmp)
        make_files(data, files, sf)
        (data / "gen").exists() and subprocess.run(["rm", "-rf", str(data / "gen")], check=True)
        queries = bench_queries(data, workers, repeat)
        planning = bench_planning(data, repeat)
    print(f"{files} files of lineitem SF{sf}, W={workers}, best of {repeat} warm runs")
    for name, q in queries.items():
        cold = sorted(q["first_planning_breakdown"].items(), key=lambda kv: -kv[1])[:4]
        steps = ", ".join(f"{k} {v * 1000:.1f}" for k, v in cold)
        print(
            f"  {name:9s} squall {q['squall_s'] * 1000:7.1f} ms (first {q['squall_first_s'] * 1000:.0f} ms, "
            f"of it planning {q['first_planning_s'] * 1000:.0f} ms; warm "
            f"planning {q['planning_s'] * 1000:.1f} ms)  duckdb {q['duckdb_s'] * 1000:7.1f} ms  "
            f"ratio {q['ratio']:.2f} (goal <= 1.5)"
        )
        print(f"            first run's planning, largest steps (ms): {steps}")
    print(
        f"  planning per 1,000 files: cold {planning['cold_s_per_1000'] * 1000:.1f} ms (listing + footers), "
        f"warm {planning['warm_s_per_1000'] * 1000:.1f} ms (listing, cached footers)"
    )
    return {"queries": queries, "planning": planning}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--folder", help="keep the files here (made once) instead of a temporary folder")
    args = parser.parse_args()
    run(args.files, args.sf, args.workers, args.repeat, args.folder)


if __name__ == "__main__":
    main()
