"""Reusable TPC-DS datasets for tests: generated once per test session, then cached (like ``tpch_data``).

The cache folder is ``$SQUALL_TPCH_CACHE`` if set (kept across sessions; a complete dataset of the right scale
factor is reused), else a folder of pytest's session temp dir. The first generation also creates the generator's
own venv (``build/tpcds-venv``, duckdb 1.5.5 + its tpcds extension from PyPI), which takes some 20 s once.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from squall import tpcds

_datasets: dict[float, Path] = {}


def tpcds_dataset(sf: float, *, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder holding TPC-DS at scale factor ``sf`` (``<table>.parquet``), made on first use."""
    key = float(sf)
    if key not in _datasets:
        cache = os.environ.get("SQUALL_TPCH_CACHE")
        base = Path(cache) if cache else tmp_path_factory.getbasetemp() / "tpcds"
        out = base / f"tpcds-sf{sf:g}"
        if tpcds.dataset_sf(out) != key:
            tpcds.generate(sf, out)
        _datasets[key] = out
    return _datasets[key]


def duckdb_over(data: str | Path) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB connection with one view per TPC-DS table over the Parquet files in ``data``."""
    con = duckdb.connect()
    for table, files in tpcds.dataset_files(data).items():
        paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        con.execute(f"create view {table} as select * from read_parquet([{paths}])")
    return con
