"""Result encodings the API serves: Arrow IPC stream (exact types, what the SDK reads), Parquet, CSV, JSON.

Shared by the SDK (:mod:`squall.result`), the CLI and the service, below all three: imports nothing of Squall.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import re
from typing import Any, Literal

import pyarrow as pa

Format = Literal["arrow", "parquet", "csv", "json"]
FORMATS: tuple[str, ...] = ("arrow", "parquet", "csv", "json")

CONTENT_TYPES: dict[str, str] = {
    "arrow": "application/vnd.apache.arrow.stream",
    "parquet": "application/vnd.apache.parquet",
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
}
#: Formats that are text (sent as UTF-8 text, not base64, through API Gateway).
TEXT_FORMATS = frozenset({"csv", "json"})


def duck() -> Any:
    """A private in-memory DuckDB (no file or network access) for converting and rendering Arrow results."""
    import duckdb

    config: dict[str, Any] = {
        "enable_external_access": False,
        "autoload_known_extensions": False,
        "lock_configuration": True,
    }
    return duckdb.connect(config=config)


def _needs_text(t: pa.DataType) -> bool:
    return (
        pa.types.is_interval(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def printable(table: pa.Table) -> pa.Table:
    """``table`` with INTERVAL and BLOB columns as DuckDB prints them (``3 days``, ``\\x00ab``), not Python reprs."""
    idx = [i for i, f in enumerate(table.schema) if _needs_text(f.type)]
    if not idx:
        return table
    con = duck()
    try:
        for i in idx:
            col = pa.table({"v": table.column(i)})
            rel = con.from_arrow(col).project("CAST(v AS VARCHAR) AS v")
            text = rel.arrow().read_all().column(0).cast(pa.string())
            table = table.set_column(i, pa.field(table.schema.field(i).name, pa.string()), text)
    finally:
        con.close()
    return table


def sql_types(types: list[pa.DataType]) -> list[str]:
    """DuckDB's SQL names of Arrow types (``BIGINT``, ``DECIMAL(15,2)``, ``DATE``, ``VARCHAR`` …)."""
    if not types:
        return []
    schema = pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(types)])
    con = duck()
    try:
        return [str(t) for t in con.from_arrow(schema.empty_table()).types]
    finally:
        con.close()


def sql_type(t: pa.DataType) -> str:
    """DuckDB's SQL name of one Arrow type."""
    return sql_types([t])[0]


_DECIMAL = re.compile(r"decimal(?:32|64|128|256)?\((\d+), ?(\d+)\)")
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]")


def sql_type_of_name(arrow_name: str) -> str:
    """DuckDB's SQL name for an Arrow type's printed name (``decimal128(15, 2)`` → ``DECIMAL(15,2)``);
    the name itself when it does not parse (nested types)."""
    if m := _DECIMAL.fullmatch(arrow_name):
        return f"DECIMAL({m.group(1)},{m.group(2)})"
    if m := _TIMESTAMP.fullmatch(arrow_name):
        return sql_type(pa.timestamp(m.group(1), tz=m.group(2)))
    aliases = {"date32[day]": pa.date32(), "date64[ms]": pa.date64(), "time64[us]": pa.time64("us"),
               "month_day_nano_interval": pa.month_day_nano_interval()}  # fmt: skip
    try:
        t = aliases.get(arrow_name) or pa.type_for_alias(arrow_name)
    except (ValueError, KeyError):
        return arrow_name
    return sql_type(t)


def json_value(v: Any) -> Any:
    """A JSON-friendly value, the same conversions as ``squall query --format json``."""
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (dt.date, dt.datetime, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.hex()
    return v


def encode(table: pa.Table, fmt: str) -> bytes:
    """``table`` in format ``fmt``."""
    if fmt == "arrow":
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        pq.write_table(table, buf)
        return buf.getvalue()
    if fmt == "csv":
        import pyarrow.csv as pcsv

        table = printable(table)
        sink = pa.BufferOutputStream()
        pcsv.write_csv(table, sink)
        return sink.getvalue().to_pybytes()
    if fmt == "json":
        rows = [{k: json_value(v) for k, v in row.items()} for row in printable(table).to_pylist()]
        return json.dumps(rows).encode()
    raise ValueError(f"unknown result format {fmt!r}")


def decode_arrow(data: bytes) -> pa.Table:
    """The table in an Arrow IPC stream."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
