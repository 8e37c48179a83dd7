"""S3 Select scan (the Modularis smart-storage operator): projection and simple filters run in S3.

Opt-in per table (``con.register(name, "s3://b/x.csv", format="csv", scan="s3select")``,
formats ``csv`` with a header line and ``json`` lines) or for every S3 table of a connection
(``connect(..., scan="s3select")`` / ``squall query --scan s3select``, Parquet input). The
planner only knows "this table's scan is s3select": the ScanInput carries the table's
format, the source columns and the pushed filters (DuckDB SQL text). The catalog half
(listing the objects, inferring the schema from a sample) is
:mod:`squall.driver.catalog.s3select`; this module is the worker half, the
``s3select`` reader of :mod:`squall.operators.scan_kinds`:

- :func:`read_s3select`: for each object of the rank's splits, one
  ``SelectObjectContent`` with ``SELECT <columns> FROM S3Object s [WHERE …]``, CSV or JSON
  output decoded into Arrow with the scan's types. Filters are pushed only when they are
  ``column <op> literal`` on a string (``=``/``<>``) or integer column (any comparison,
  compared after ``CAST(… AS INT)``); DuckDB applies every filter again, so a filter that
  is not pushed only costs bytes. Requests are counted on the Storage as ``select``
  (and ``get`` for the samples).

S3 Select is closed to new AWS accounts (July 2024) and emulators implement a subset
(moto: CSV ``SELECT *`` and JSON projections, no WHERE). Whatever the service refuses
becomes one line: ``S3 Select refused … (the service supports only part of S3 Select;
use scan='parquet')``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import sqlglot
from sqlglot import exp

from squall import aws
from squall.errors import DataError
from squall.operators.s3storage import S3Storage
from squall.operators.scan import scan_schema
from squall.operators.storage import Storage
from squall.plan import ScanInput

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}


def s3_storage(storage: Storage) -> S3Storage:
    """``storage`` as an S3Storage; DataError when the table is not on S3."""
    if not isinstance(storage, S3Storage):
        raise DataError("scan='s3select' needs an s3:// location")
    return storage


def _quote(name: str, fmt: str) -> str:
    if fmt == "json" and _IDENT.match(name):
        return name  # bare attribute names (JSON lines)
    return 's."' + name.replace('"', '""') + '"'


def _literal(node: exp.Expression) -> str | int | None:
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def pushable_filters(filters: Sequence[str], columns: Sequence[tuple[str, str]], schema: pa.Schema,
                     fmt: str) -> list[str]:  # fmt: skip
    """S3 Select WHERE terms for the filters of the form ``column <op> literal`` (see module doc)."""
    source = {internal: src for src, internal in columns}
    types = {f.name: f.type for f in schema}
    out = []
    for text in filters:
        try:
            node = sqlglot.parse_one(text, read="duckdb")
        except sqlglot.errors.ParseError:
            continue
        op = _OPS.get(type(node))
        if op is None or not isinstance(node.this, exp.Column):
            continue
        internal, value = node.this.name, _literal(node.expression)
        src, typ = source.get(internal), types.get(internal)
        if src is None or typ is None or value is None:
            continue
        column = _quote(src, fmt)
        if pa.types.is_string(typ) and isinstance(value, str) and op in ("=", "<>"):
            out.append(f"{column} {op} '{value.replace(chr(39), chr(39) * 2)}'")
        elif pa.types.is_integer(typ) and isinstance(value, int):
            out.append(f"CAST({column} AS INT) {op} {value}")
    return out


def select_expression(spec: ScanInput, schema: pa.Schema) -> str:
    """The S3 Select SQL of a scan: ``SELECT *`` when every column is read, else the projection."""
    fmt = dict(spec.scan_options).get("format", "csv")
    sources = [src for src, _internal in spec.columns]
    table_columns = dict(spec.scan_options).get("columns", "")
    projection = (
        "*"
        if table_columns and sources == table_columns.split(",")
        else ", ".join(_quote(s, fmt) for s in sources)
    )
    where = pushable_filters(spec.filters, spec.columns, schema, fmt)
    if projection == "*" and not where:
        return "SELECT * FROM S3Object"
    return f"SELECT {projection} FROM S3Object s" + (f" WHERE {' AND '.join(where)}" if where else "")


def _select(storage: S3Storage, path: str, expression: str, fmt: str) -> bytes:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = aws.parse_s3_url(path)
    inp: dict[str, Any] = (
        {"CSV": {"FileHeaderInfo": "USE"}} if fmt == "csv"
        else {"JSON": {"Type": "LINES"}} if fmt == "json"
        else {"Parquet": {}}
    )  # fmt: skip
    out_fmt: dict[str, Any] = {"JSON": {}} if fmt == "json" else {"CSV": {}}
    storage.count("select")
    try:
        resp = storage.client.select_object_content(
            Bucket=bucket, Key=key, Expression=expression, ExpressionType="SQL",
            InputSerialization=inp, OutputSerialization=out_fmt,
        )  # fmt: skip
        chunks = [ev["Records"]["Payload"] for ev in resp["Payload"] if "Records" in ev]
    except (ClientError, BotoCoreError) as exc:
        code = aws.error_code(exc) or type(exc).__name__
        raise DataError(
            f"S3 Select refused {expression!r} on {path}: {code} (the service supports only part of "
            "S3 Select; use scan='parquet')"
        ) from None
    body = b"".join(chunks)
    storage.count("select_bytes", 0, len(body))
    return body


def _decode(body: bytes, names: list[str], schema: pa.Schema, fmt: str) -> pa.Table:
    if not body.strip():
        return schema.empty_table()
    types = dict(zip(names, schema.types))
    try:
        if fmt == "json":
            return pjson.read_json(
                io.BytesIO(body), parse_options=pjson.ParseOptions(explicit_schema=pa.schema(types.items()))
            ).select(names)
        return pcsv.read_csv(
            io.BytesIO(body),
            read_options=pcsv.ReadOptions(column_names=names),
            convert_options=pcsv.ConvertOptions(column_types=types),
        )
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"cannot decode the S3 Select result: {exc}".splitlines()[0]) from None


def read_s3select(spec: ScanInput, rank: int, storage_of: Callable[[str], Storage]) -> pa.Table:
    """Rows of ``spec`` for ``rank`` through S3 Select, columns renamed to the stage's names."""
    schema = scan_schema(spec)
    fmt = dict(spec.scan_options).get("format", "csv")
    expression = select_expression(spec, schema)
    sources = [src for src, _internal in spec.columns]
    star = expression.startswith("SELECT * ")
    tables = []
    for split in spec.splits_for(rank):
        storage = s3_storage(storage_of(split.path))
        body = _select(storage, split.path, expression, fmt)
        if star:  # every column of the object, in file order: keep the scan's
            all_names = dict(spec.scan_options)["columns"].split(",")
            full = pa.schema([(n, schema.field(sources.index(n)).type if n in sources else pa.string())
                              for n in all_names])  # fmt: skip
            table = _decode(body, all_names, full, fmt).select(sources)
        else:
            table = _decode(body, sources, schema, fmt)
        tables.append(table.rename_columns(schema.names).cast(schema))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)
