"""S3 Select scan (the Modularis smart-storage operator): projection and simple filters run in S3.

Opt-in per table (``con.register(name, "s3://b/x.csv", format="csv", scan="s3select")``,
formats ``csv`` with a header line and ``json`` lines) or for every S3 table of a connection
(``connect(..., scan="s3select")`` / ``squall query --scan s3select``, Parquet input). The
planner only knows "this table's scan is s3select": the ScanInput carries the table's
format, the source columns and the pushed filters (DuckDB SQL text); this module

- :func:`load_s3select_table` (driver): lists the objects, infers the schema from one
  ranged GET of each object's first ``sample_bytes`` (64 KiB; Parquet: the footers),
  estimates rows from object sizes, one pseudo row group per object (no pruning);
- :func:`read_s3select` (worker): for each object of the rank's splits, one
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
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import sqlglot
from sqlglot import exp

from squall.driver.catalog import RowGroup, TableInfo, load_table
from squall.errors import DataError
from squall.operators.s3storage import S3Storage, parse_s3_url
from squall.operators.scan import scan_schema
from squall.operators.storage import Storage
from squall.plan import ScanInput

SAMPLE_BYTES = 64 * 1024
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}


def _s3(storage: Storage) -> S3Storage:
    if not isinstance(storage, S3Storage):
        raise DataError("scan='s3select' needs an s3:// location")
    return storage


def _sample_table(storage: S3Storage, path: str, fmt: str) -> tuple[pa.Table, int]:
    """The first complete lines of an object, parsed; (table, bytes they took)."""
    body = storage._get_range(path, 0, min(SAMPLE_BYTES, storage._size(path)))
    if len(body) == SAMPLE_BYTES and b"\n" in body:
        body = body[: body.rindex(b"\n") + 1]
    try:
        if fmt == "csv":
            table = pcsv.read_csv(io.BytesIO(body))
        else:
            table = pjson.read_json(io.BytesIO(body))
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"cannot read {fmt} sample of {path}: {exc}".splitlines()[0]) from None
    return table, len(body)


def load_s3select_table(name: str, location: str, storage: Storage, fmt: str) -> TableInfo:
    """Catalog entry of an S3 Select table (see module doc)."""
    s3 = _s3(storage)
    if fmt == "parquet":
        info = load_table(name, location, s3)
        options = (("columns", ",".join(info.schema.names)), ("format", "parquet"))
        return TableInfo(info.name, info.location, info.files, info.schema, info.row_groups, info.footers,
                         "s3select", options)  # fmt: skip
    bucket, key = parse_s3_url(location)
    suffix = f".{fmt}" if fmt == "csv" else (".json", ".jsonl", ".ndjson")
    if not key or key.endswith("/") or any(ch in key for ch in "*?["):
        listed = s3._list(bucket, key if not any(ch in key for ch in "*?[") else key.rpartition("/")[0] + "/")
        import fnmatch

        files = sorted(
            f"s3://{bucket}/{k}"
            for k in listed
            if k.endswith(suffix)
            and not k.rpartition("/")[2].startswith((".", "_"))
            and (not any(ch in key for ch in "*?[") or fnmatch.fnmatchcase(k, key))
        )
        with s3._lock:
            s3._sizes.update({f"s3://{bucket}/{k}": size for k, size in listed.items()})
    else:
        files = [location]
    if not files:
        raise DataError(f"no {fmt} objects at {location}")
    sample, used = _sample_table(s3, files[0], fmt)
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in sample.schema])
    bytes_per_row = used / max(sample.num_rows, 1)
    groups = tuple(
        RowGroup(path, 0, max(1, math.ceil(s3._size(path) / bytes_per_row)) if sample.num_rows else 0, {})
        for path in files
    )
    options = (("columns", ",".join(schema.names)), ("format", fmt))
    return TableInfo(name, location, tuple(files), schema, groups, {}, "s3select", options)


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

    bucket, key = parse_s3_url(path)
    inp: dict[str, Any] = (
        {"CSV": {"FileHeaderInfo": "USE"}} if fmt == "csv"
        else {"JSON": {"Type": "LINES"}} if fmt == "json"
        else {"Parquet": {}}
    )  # fmt: skip
    out_fmt = {"JSON": {}} if fmt == "json" else {"CSV": {}}
    storage.count("select")
    try:
        resp = storage.client.select_object_content(
            Bucket=bucket, Key=key, Expression=expression, ExpressionType="SQL",
            InputSerialization=inp, OutputSerialization=out_fmt,
        )  # fmt: skip
        chunks = [ev["Records"]["Payload"] for ev in resp["Payload"] if "Records" in ev]
    except (ClientError, BotoCoreError) as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) or type(exc).__name__
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
        storage = _s3(storage_of(split.path))
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
