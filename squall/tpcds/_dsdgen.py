"""Runs inside the TPC-DS generator venv (``duckdb==1.5.5`` + ``duckdb-extension-tpcds``), never imported by Squall.

    python -I _dsdgen.py data EXTENSION SF OUT ROW_GROUP_SIZE   # dsdgen, then one <table>.parquet per table
    python -I _dsdgen.py queries EXTENSION OUT                  # tpcds_queries() as OUT/qNN.sql

Only the standard library and that venv's ``duckdb`` are used. The extension is loaded from its file with
extension autoloading and autoinstalling off, so nothing is downloaded.
"""

import os
import sys
from collections.abc import Callable

import duckdb


def _connect(extension: str, database: str = ":memory:") -> "duckdb.DuckDBPyConnection":
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_unsigned_extensions": False,
    }
    con = duckdb.connect(database, config=config)
    con.execute("LOAD '" + extension.replace("'", "''") + "'")
    return con


def data(extension: str, sf: str, out: str, row_group_size: str) -> None:
    scale = float(sf)
    con = _connect(extension, os.path.join(out, ".dsdgen.duckdb"))
    con.execute(f"SET temp_directory = '{out.replace(chr(39), chr(39) * 2)}/.dsdgen.tmp'")
    con.execute("SET preserve_insertion_order = true")
    con.execute(f"CALL dsdgen(sf = {scale!r})")
    tables = [
        row[0] for row in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()
    ]
    for table in tables:
        path = os.path.join(out, table + ".parquet").replace("'", "''")
        con.execute(
            f"COPY (SELECT * FROM {table}) TO '{path}' (FORMAT parquet, COMPRESSION zstd, "
            f"ROW_GROUP_SIZE {int(row_group_size)}, KV_METADATA {{tpcds_sf: '{scale!r}'}})"
        )
    con.close()
    os.remove(os.path.join(out, ".dsdgen.duckdb"))


def queries(extension: str, out: str) -> None:
    con = _connect(extension)
    for number, text in con.execute(
        "SELECT query_nr, query FROM tpcds_queries() ORDER BY query_nr"
    ).fetchall():
        with open(os.path.join(out, f"q{int(number):02d}.sql"), "w", encoding="utf-8") as f:
            f.write(text.strip() + "\n")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    commands: dict[str, Callable[..., None]] = {"data": data, "queries": queries}
    commands[command](*args)
