"""Result encodings the API serves: Arrow IPC stream (exact types, what the SDK reads), Parquet, CSV, JSON."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
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

        sink = pa.BufferOutputStream()
        pcsv.write_csv(table, sink)
        return sink.getvalue().to_pybytes()
    if fmt == "json":
        rows = [{k: json_value(v) for k, v in row.items()} for row in table.to_pylist()]
        return json.dumps(rows).encode()
    raise ValueError(f"unknown result format {fmt!r}")


def decode_arrow(data: bytes) -> pa.Table:
    """The table in an Arrow IPC stream."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
