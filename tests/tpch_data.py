"""Reusable TPC-H datasets for tests: generated once per test session, then cached.

Use it from a session-scoped fixture::

    @pytest.fixture(scope="session")
    def sf001(tmp_path_factory):
        return tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)

The first call picks the cache folder: ``$SQUALL_TPCH_CACHE`` if set (kept across sessions, reused when the
dataset is complete), else a folder of pytest's session temp dir (given ``tmp_path_factory``), else a
process-wide temp dir removed at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import duckdb
import pytest

from squall.errors import DataError
from squall.tpch import dataset_files, generate

_datasets: dict[tuple[float, int | None], Path] = {}
_base: Path | None = None


def _cache_base(tmp_path_factory: pytest.TempPathFactory | None) -> Path:
    global _base
    if _base is None:
        if os.environ.get("SQUALL_TPCH_CACHE"):
            _base = Path(os.environ["SQUALL_TPCH_CACHE"])
        elif tmp_path_factory is not None:
            _base = tmp_path_factory.mktemp("tpch")
        else:
            _base = Path(tempfile.mkdtemp(prefix="squall-tpch-"))
            atexit.register(shutil.rmtree, _base, True)
    return _base


def tpch_dataset(
    sf: float, parts: int | None = None, *, tmp_path_factory: pytest.TempPathFactory | None = None
) -> Path:
    """Folder holding TPC-H at scale factor ``sf`` (``parts`` files per table if given), made on first use."""
    key = (float(sf), parts)
    if key not in _datasets:
        out = _cache_base(tmp_path_factory) / (f"sf{sf:g}" + (f"-parts{parts}" if parts else ""))
        try:
            dataset_files(out)
        except DataError:
            generate(sf, out, parts=parts)
        _datasets[key] = out
    return _datasets[key]


def duckdb_over(data: str | Path) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB connection with one view per TPC-H table over the Parquet files in ``data``."""
    con = duckdb.connect()
    for table, files in dataset_files(data).items():
        paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        con.execute(f"create view {table} as select * from read_parquet([{paths}])")
    return con
