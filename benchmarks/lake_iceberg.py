"""Iceberg scans: Squall over a pyiceberg catalog vs Polars ``scan_iceberg`` and DuckDB over the same files.

    python benchmarks/lake_iceberg.py --sf 0.1 --workers 2

Writes TPC-H ``lineitem`` at ``--sf`` (tpchgen-cli) into an Iceberg table of a pyiceberg SQL catalog (sqlite,
local warehouse), partitioned by ``month(l_shipdate)``, in two appends. Per query: Squall at ``--workers``
through ``catalogs={"lake": …}`` (warm: best of ``--repeat`` after a first run), Polars ``scan_iceberg`` on
the same table (when Polars is installed: ``pip install -e '.[peers]'``), and DuckDB over the table's current
data files (the list pyiceberg plans; the table has no deletes, so that is the table). Every answer is
checked against DuckDB's; a differing one prints DIFFERS and leaves the ratios. Prints seconds and the
ratios Squall/DuckDB and Squall/Polars, and the bytes Squall read (partition pruning).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from timing import best_of

import squall
from squall.testing import compare_results

QUERIES = {
    "count": "SELECT count(*) AS n FROM {t}",
    "month": "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS qty FROM {t} "
    "WHERE l_shipdate >= DATE '1995-03-01' AND l_shipdate < DATE '1995-04-01' GROUP BY l_returnflag",
    "full": "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_extendedprice) AS price FROM {t} "
    "GROUP BY l_returnflag, l_linestatus",
}


def build(root: Path, sf: float) -> dict[str, str]:
    """The Iceberg table ``ns.lineitem`` under ``root``; returns the catalog's properties."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.transforms import MonthTransform

    from squall.tpch import generate

    generate(sf, root / "tpch")
    rows = duckdb.sql(f"SELECT * FROM read_parquet('{root}/tpch/lineitem.parquet')").to_arrow_table()
    rows = rows.cast(
        pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f for f in rows.schema])
    )
    (root / "warehouse").mkdir()
    props = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    catalog = load_catalog("lake", **props)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.lineitem", schema=rows.schema)
    with table.update_spec() as spec:
        spec.add_field("l_shipdate", MonthTransform(), "l_month")
    half = rows.num_rows // 2
    table.append(rows.slice(0, half))
    table.append(rows.slice(half))
    return props


def _squall(con: squall.Connection, sql: str) -> tuple[pa.Table, dict[str, Any]]:
    result = con.sql(sql)
    return result.to_arrow(), result.stats


def _row(name: str, text: str, con: squall.Connection, duck: Any, polars_ctx: Any, repeat: int) -> str:
    """One query's line: every timed Squall answer checked against DuckDB's."""
    expected = duck.sql(text.format(t="lineitem")).to_arrow_table()
    sql = text.format(t="lake.ns.lineitem")
    con.sql(sql).to_arrow()  # warm-up
    squall_s, runs = best_of(lambda: _squall(con, sql), repeat)
    duck_s, _ = best_of(lambda: duck.sql(text.format(t="lineitem")).to_arrow_table(), repeat)
    polars_s = None
    if polars_ctx is not None:
        polars_s, _ = best_of(lambda: polars_ctx.execute(text.format(t="lineitem")).collect(), repeat)
    wrong = next((err for table, _stats in runs if (err := compare_results(table, expected, sql))), None)
    if wrong:
        return f"{name:8} DIFFERS: {wrong.splitlines()[0]}"
    polars = f"{polars_s:9.3f} {squall_s / polars_s:9.2f}" if polars_s else f"{'-':>9} {'-':>9}"
    scanned = runs[-1][1]["bytes_scanned"]
    return f"{name:8} {squall_s:9.3f} {duck_s:9.3f} {squall_s / duck_s:8.2f} {polars} {scanned:12,}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault(
        "POLARS_ICEBERG_PLANNER", "pyiceberg"
    )  # Polars plans with pyiceberg, as Squall does
    try:
        import polars as pl
    except ImportError:
        pl = None
    with tempfile.TemporaryDirectory(prefix="squall-lake-iceberg-") as tmp:
        root = Path(tmp)
        props = build(root, args.sf)
        from pyiceberg.catalog import load_catalog

        table = load_catalog("lake", **props).load_table("ns.lineitem")
        files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
        duck = duckdb.connect()
        duck.sql(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet({files!r})")
        con = squall.connect(workers=args.workers, catalogs={"lake": props})
        polars_ctx = pl.SQLContext(lineitem=pl.scan_iceberg(table)) if pl is not None else None
        print(f"Iceberg lineitem SF{args.sf:g}: {len(files)} data files, W={args.workers}")
        print(
            f"{'query':8} {'squall_s':>9} {'duckdb_s':>9} {'sq/duck':>8} {'polars_s':>9} {'sq/polars':>9} {'bytes':>12}"
        )
        failed = 0
        for name, text in QUERIES.items():
            line = _row(name, text, con, duck, polars_ctx, args.repeat)
            failed |= "DIFFERS" in line
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
