"""ORDER BY of the whole lineitem (no LIMIT): range-partitioned vs gathered to rank 0 vs DuckDB, same run.

    python benchmarks/range_sort.py --data /work/tpch-cache/sf1 --workers 4 [--columns all] [--repeat 1]

Runs the query once per mode: DuckDB (one process), Squall with the range-partitioned sort
(``range_sort_rows=0``) and Squall gathering to rank 0 (``range_sort_rows=inf``). Correctness is
checked cheaply: the row count and a SHA-256 of the ordered sort-key columns (the keys end with
l_orderkey, l_linenumber, unique, so the order is total) must equal DuckDB's. Prints the wall
time of each, the ratio to DuckDB, and each Squall mode's per-rank rows sorted and peak rows held
(``Result.stats``). By default only the key columns and l_extendedprice are selected (the whole
table's rows, fewer bytes: this machine is shared); ``--columns all`` selects every column.
Exits 1 if a result differs.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa

import squall
from squall.driver.options import PlannerOptions

KEYS = ("l_shipdate", "l_orderkey", "l_linenumber")
ORDER = "l_shipdate DESC, l_orderkey, l_linenumber"


def key_digest(table: pa.Table) -> str:
    """SHA-256 over the sort-key columns of ``table`` in row order."""
    h = hashlib.sha256()
    for name in KEYS:
        column = table.column(name).combine_chunks()
        for buf in column.buffers():
            if buf is not None:
                h.update(memoryview(buf))
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--columns", choices=("keys", "all"), default="keys")
    ap.add_argument("--threads", type=int, default=0, help="DuckDB threads (default: all cores)")
    args = ap.parse_args(argv)
    select = "*" if args.columns == "all" else ", ".join((*KEYS, "l_extendedprice"))
    sql = f"SELECT {select} FROM lineitem ORDER BY {ORDER}"
    print(f"query: {sql}\nworkers: {args.workers}")

    ref = duckdb.connect()
    if args.threads:
        ref.execute(f"SET threads = {args.threads}")
    files = sorted((args.data / "lineitem").glob("*.parquet")) or [args.data / "lineitem.parquet"]
    ref.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet({[str(f) for f in files]!r})")
    t0 = time.perf_counter()
    expected = ref.sql(sql).to_arrow_table()
    duck_s = time.perf_counter() - t0
    want = (expected.num_rows, key_digest(expected))
    del expected
    ref.close()
    print(f"duckdb          {duck_s:7.2f} s  rows {want[0]:,}")

    failed = False
    for mode, limit in (("squall range", 0.0), ("squall gather", math.inf)):
        with squall.connect(
            data=str(args.data), workers=args.workers, planner_options=PlannerOptions(range_sort_rows=limit)
        ) as con:
            con.sql("SELECT count(*) FROM lineitem")  # start the pool
            t0 = time.perf_counter()
            result = con.sql(sql)
            took = time.perf_counter() - t0
            got = (result.num_rows, key_digest(result.to_arrow()))
        ok = got == want
        failed |= not ok
        peaks = [w["peak_rows"] for w in result.stats["per_worker"]]
        sorted_rows = result.stats.get("sort", {}).get("rows_sorted_per_rank", ["rank 0 sorts all"])
        print(
            f"{mode:15s} {took:7.2f} s  x{took / duck_s:.2f} vs duckdb  {'ok' if ok else 'DIFFERS'}"
            f"  rows sorted per rank {sorted_rows}  peak rows per rank {peaks}"
        )
        for st in result.stats["stages"]:
            print(
                f"    stage {st['stage']} ({st['output']}, {st['ranks']} ranks): slowest rank {st['time_s']:.2f} s"
                f" = scan {st['scan_s']:.2f} + compute {st['compute_s']:.2f} + send {st['send_s']:.2f}"
                f" (partition {st['partition_s']:.2f}) + receive {st['receive_s']:.2f}"
            )
        del result
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
