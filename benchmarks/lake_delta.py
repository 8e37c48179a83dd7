"""A Delta table scan: Squall (W=2, local workers) vs deltalake's own engine vs DuckDB over the same active
files (vs Polars ``scan_delta`` when polars is installed), in the same run.

    python benchmarks/lake_delta.py [--sf 0.1] [--workers 2] [--repeat 3] [--keep DIR]

The table is TPC-H lineitem (``tpchgen-cli``) written by deltalake, partitioned by ``l_year`` (year of
``l_shipdate``, 7 partitions), in three appends and one delete (copy-on-write: the folder then holds
removed files, which only the log tells apart). Queries: a ``count(*)`` and a group-by filtered to one
year (partition pruning). Each engine runs each query once as a warm-up whose result is checked against
DuckDB's, then ``--repeat`` timed runs, best counted (wall clock, query text → Arrow table; Squall's
plan cache and footers warm, deltalake's and Polars' tables opened once outside the timing). Prints one
line per query with the times and Squall's ratio to each; exits 1 if a result differs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from timing import best_of

import squall
from squall.testing import compare_results

QUERIES = {
    "count": "SELECT count(*) AS n FROM lineitem",
    "group_1995": "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, sum(l_extendedprice) AS p, "
    "count(*) AS n FROM lineitem WHERE l_year = 1995 GROUP BY l_returnflag, l_linestatus",
}


def build(root: Path, sf: float) -> Path:
    """lineitem at ``sf`` as a Delta table under ``root/data/lineitem`` (3 appends, 1 delete)."""
    from deltalake import DeltaTable, write_deltalake

    raw = root / "raw"
    subprocess.run(
        [
            str(Path(sys.executable).with_name("tpchgen-cli")),
            "parquet",
            "-s",
            str(sf),
            "--tables=lineitem",
            f"--output-dir={raw}",
        ],
        check=True,
        capture_output=True,
    )
    table = pq.read_table(raw / "lineitem.parquet")
    table = table.cast(
        pa.schema(
            [
                pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type)
                for f in table.schema
            ]
        )
    )
    table = table.append_column("l_year", pc.year(table.column("l_shipdate")).cast(pa.int32()))
    path = root / "data" / "lineitem"
    third = table.num_rows // 3
    for i in range(3):
        part = table.slice(i * third, third if i < 2 else table.num_rows - 2 * third)
        write_deltalake(str(path), part, partition_by=["l_year"], mode="append")
    DeltaTable(str(path)).delete("l_quantity < 2")
    return path


def _differs(engine: str, got: pa.Table, expected: pa.Table, sql: str) -> str | None:
    """How ``got`` differs from DuckDB's answer (None: the same); a peer's columns are taken by position and
    its types cast where Arrow can do so safely, Squall's answer as it is."""
    if engine != "squall":
        got = got.rename_columns(expected.column_names)
        try:
            got = got.cast(expected.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return compare_results(got, expected, sql)


def engines(path: Path, con: squall.Connection) -> dict[str, Callable[[str], pa.Table]]:
    """Each engine's ``sql -> Arrow table`` over the table (opened once here)."""
    from deltalake import DeltaTable, QueryBuilder

    delta = DeltaTable(str(path))
    files = delta.file_uris()
    duck = duckdb.connect()
    listed = ", ".join(f"'{f}'" for f in files)
    duck.sql(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet([{listed}], hive_partitioning = true)")
    builder = QueryBuilder().register("lineitem", delta)
    out: dict[str, Callable[[str], pa.Table]] = {
        "squall": lambda sql: con.sql(sql).arrow(),
        "deltalake": lambda sql: pa.table(builder.execute(sql).read_all()),
        "duckdb": lambda sql: duck.sql(sql).to_arrow_table(),
    }
    try:
        import polars as pl
    except ImportError:
        return out
    ctx = pl.SQLContext(lineitem=pl.scan_delta(str(path)))
    out["polars"] = lambda sql: ctx.execute(sql).collect().to_arrow()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", help="build the table in this folder and keep it (reused when present)")
    args = parser.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="squall-lake-delta-"))
    try:
        path = root / "data" / "lineitem"
        if not (path / "_delta_log").is_dir():
            path = build(root, args.sf)
        failed = 0
        with squall.connect(str(root / "data"), workers=args.workers) as con:
            runs = engines(path, con)
            print(
                f"Delta lineitem SF{args.sf}, Squall W={args.workers}; best of {args.repeat} (s); ratio = squall / other"
            )
            for name, sql in QUERIES.items():
                expected = runs["duckdb"](sql)
                times = {}
                for engine, run in runs.items():
                    times[engine], answers = best_of(lambda r=run, q=sql: r(q), args.repeat)
                    problem = next(
                        (p for got in answers if (p := _differs(engine, got, expected, sql))), None
                    )
                    if problem:  # every timed run's answer is checked; a differing engine leaves the ratios
                        print(f"  {name}: {engine} DIFFERS: {problem}")
                        failed += 1
                        times.pop(engine)
                ratios = "  ".join(
                    f"{e} {times['squall'] / t:.2f}x"
                    for e, t in times.items()
                    if e != "squall" and "squall" in times
                )
                cells = "  ".join(f"{e} {t:.3f}" for e, t in times.items())
                print(f"  {name:<11} {cells}  |  {ratios}")
            sources = con.sql(QUERIES["group_1995"]).stats["sources"]
            print(
                "  source: " + (", ".join(f"{k} {v}" for k, v in sources[0].items()) if sources else "(none)")
            )
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
