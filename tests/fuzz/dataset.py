"""The data the fuzzer queries: TPC-H SF0.01 plus NULL-heavy and empty twins of some tables, or TPC-DS SF0.01.

TPC-H has no NULLs, so the folder also holds (deterministically derived with DuckDB, several row groups each
so scans really split):

- ``orders_n``, ``customer_n``, ``nation_n``: subsets of the TPC-H table with 10-30% NULLs in most columns,
  keys included (NULL join keys, ``NOT IN`` over NULLs);
- ``nation_e``: an empty table with nation's schema.

TPC-DS (``schema=TPCDS``) is queried as ``squall.tpcds`` generates it (``tpcds-sf0.01``: real NULLs in most
columns, fact tables in row groups of 2,048 rows), without twins.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb

from squall import tpcds
from squall.tpch import dataset_files

VERSION = "fuzz-data-1"

# name -> SELECT over the TPC-H views (deterministic: NULLs chosen by arithmetic on the keys)
DERIVED = {
    "orders_n": """
        SELECT CASE WHEN o_orderkey % 17 = 0 THEN NULL ELSE o_orderkey END AS o_orderkey,
               CASE WHEN (o_orderkey * 7) % 10 < 2 THEN NULL ELSE o_custkey END AS o_custkey,
               CASE WHEN (o_orderkey * 3) % 10 = 1 THEN NULL ELSE o_orderstatus END AS o_orderstatus,
               CASE WHEN (o_orderkey * 13) % 10 < 3 THEN NULL ELSE o_totalprice END AS o_totalprice,
               CASE WHEN (o_orderkey * 11) % 10 = 4 THEN NULL ELSE o_orderdate END AS o_orderdate,
               CASE WHEN (o_orderkey * 19) % 10 = 5 THEN NULL ELSE o_orderpriority END AS o_orderpriority
        FROM orders WHERE o_orderkey % 3 = 0 ORDER BY o_orderkey""",
    "customer_n": """
        SELECT c_custkey,
               CASE WHEN c_custkey % 5 = 0 THEN NULL ELSE c_name END AS c_name,
               CASE WHEN (c_custkey * 7) % 10 < 2 THEN NULL ELSE c_nationkey END AS c_nationkey,
               CASE WHEN (c_custkey * 3) % 10 < 3 THEN NULL ELSE c_acctbal END AS c_acctbal,
               CASE WHEN (c_custkey * 11) % 10 = 1 THEN NULL ELSE c_mktsegment END AS c_mktsegment
        FROM customer WHERE c_custkey % 2 = 0 ORDER BY c_custkey""",
    "nation_n": """
        SELECT CASE WHEN n_nationkey % 6 = 5 THEN NULL ELSE n_nationkey END AS n_nationkey,
               CASE WHEN n_nationkey % 4 = 1 THEN NULL ELSE n_name END AS n_name,
               CASE WHEN n_nationkey % 5 = 2 THEN NULL ELSE n_regionkey END AS n_regionkey
        FROM nation ORDER BY n_nationkey""",
    "nation_e": "SELECT * FROM nation WHERE false",
}


def fuzz_dataset(tpch: str | Path, out: str | Path | None = None) -> Path:
    """Build (once) the fuzz folder from the TPC-H folder ``tpch``; default ``<tpch>-fuzz`` beside it."""
    src = Path(tpch)
    dst = Path(out) if out is not None else src.with_name(src.name + "-fuzz")
    marker = dst / ".complete"
    if marker.is_file() and marker.read_text() == VERSION:
        return dst
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    con = duckdb.connect()
    try:
        for table, files in dataset_files(src).items():
            paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{paths}])")
            # several row groups, so W workers really split the scans
            con.execute(
                f"COPY (SELECT * FROM {table}) TO '{tmp / (table + '.parquet')}' (FORMAT parquet, ROW_GROUP_SIZE 2048)"
            )
        for name, select in DERIVED.items():
            con.execute(
                f"COPY ({select}) TO '{tmp / (name + '.parquet')}' (FORMAT parquet, ROW_GROUP_SIZE 512)"
            )
    finally:
        con.close()
    (tmp / ".complete").write_text(VERSION)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


def tpcds_dataset(sf: float = 0.01, base: str | Path | None = None) -> Path:
    """The TPC-DS folder ``<base>/tpcds-sf<SF>`` (base: ``$SQUALL_TPCH_CACHE``, else ``data/``), generated with
    ``squall.tpcds`` if it is missing (the first time also builds the generator's venv, some 20 s)."""
    if base is None:
        base = os.environ.get("SQUALL_TPCH_CACHE") or Path(__file__).resolve().parents[2] / "data"
    out = Path(base) / f"tpcds-sf{sf:g}"
    if tpcds.dataset_sf(out) != float(sf):
        tpcds.generate(sf, out)
    return out


def duckdb_reference(data: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per Parquet file of ``data`` (the oracle)."""
    con = duckdb.connect()
    for f in sorted(Path(data).glob("*.parquet")):
        con.execute(f"CREATE VIEW {f.stem} AS SELECT * FROM read_parquet('{f}')")
    return con
