"""Column types between DuckDB (what a query yields) and Iceberg (what a table holds), for the writers.

A new table (CREATE TABLE AS) gets an Iceberg column per result column; types Iceberg lacks are cast safely
or refused, in one line (BindError), before anything runs:

- cast: TINYINT, SMALLINT, UTINYINT, USMALLINT → int; UINTEGER → long; ENUM, JSON → string; UUID → string
  (the ranks exchange uuids as Arrow text, so the files could not hold Iceberg's 16-byte uuid);
  TIMESTAMP_S/_MS → timestamp; TIMESTAMP_NS, TIMESTAMPTZ_NS, TIME_NS → timestamp, timestamptz, time
  (microseconds: nanoseconds are cut, as Athena and Trino store them); fixed-size arrays → lists;
- refused: HUGEINT, UHUGEINT, UBIGINT, BIGNUM (cast them to BIGINT or DECIMAL(38, 0)), INTERVAL, BIT,
  TIME WITH TIME ZONE, UNION, GEOMETRY, VARIANT, and an untyped NULL column;
- the rest map one to one (boolean, int, long, float, double, decimal, string, binary, date, time,
  timestamp, timestamptz, lists, structs, maps).

An INSERT casts the query to the table's columns: each Iceberg type as the DuckDB type that writes it
(:func:`duck_type`); uuid, fixed(n) and the v3-only types are refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import count
from typing import Any

from sqlglot import exp

from squall.errors import BindError

T = exp.DataType.Type
#: nanosecond types sqlglot does not read: written with microseconds
_NS = re.compile(r"\b(TIMESTAMPTZ|TIME)_NS\b")
_REFUSED = {
    T.INT128: "HUGEINT", T.UINT128: "UHUGEINT", T.UBIGINT: "UBIGINT", T.BIGNUM: "BIGNUM",
    T.INTERVAL: "INTERVAL", T.BIT: "BIT", T.TIMETZ: "TIME WITH TIME ZONE", T.UNION: "UNION",
    T.GEOMETRY: "GEOMETRY", T.VARIANT: "VARIANT", T.NULL: "NULL",
}  # fmt: skip
_HINTS = {T.INT128: "BIGINT or DECIMAL(38, 0)", T.UINT128: "DECIMAL(38, 0)", T.UBIGINT: "BIGINT or DECIMAL(20, 0)",
          T.BIGNUM: "DECIMAL(38, 0)", T.INTERVAL: "a number of seconds or VARCHAR", T.NULL: "a type"}  # fmt: skip
#: DuckDB type -> (Iceberg primitive, the DuckDB type written)
_PRIMITIVES = {
    T.BOOLEAN: ("boolean", "BOOLEAN"),
    **{t: ("int", "INTEGER") for t in (T.TINYINT, T.SMALLINT, T.INT, T.UTINYINT, T.USMALLINT)},
    **{t: ("long", "BIGINT") for t in (T.BIGINT, T.UINT)},
    T.FLOAT: ("float", "FLOAT"),
    T.DOUBLE: ("double", "DOUBLE"),
    **{t: ("string", "VARCHAR") for t in (T.VARCHAR, T.TEXT, T.CHAR, T.NVARCHAR, T.ENUM, T.JSON, T.UUID)},
    **{t: ("binary", "BLOB") for t in (T.VARBINARY, T.BINARY, T.BLOB)},
    T.DATE: ("date", "DATE"),
    T.TIME: ("time", "TIME"),
    **{
        t: ("timestamp", "TIMESTAMP")
        for t in (T.TIMESTAMP, T.TIMESTAMPNTZ, T.TIMESTAMP_S, T.TIMESTAMP_MS, T.TIMESTAMP_NS, T.DATETIME)
    },
    T.TIMESTAMPTZ: ("timestamptz", "TIMESTAMPTZ"),
}


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def new_schema(names: Sequence[str], types: Sequence[str], table: str) -> tuple[Any, tuple[str, ...]]:
    """The Iceberg schema of a result's columns, and the DuckDB type each column is written as (see the
    module doc); NotSupportedError naming the column for a type Iceberg cannot hold."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    ids = count(1)
    fields, written = [], []
    for name, text in zip(names, types):
        try:
            dtype = exp.DataType.build(_NS.sub(lambda m: m.group(1), text), dialect="duckdb")
        except Exception:
            raise BindError(f"CREATE TABLE {table}: column {name} has type {text}, which an Iceberg "
                                    "table cannot hold") from None  # fmt: skip
        field_id = next(ids)
        iceberg, duck = _convert(dtype, name, table, ids)
        fields.append(NestedField(field_id, name, iceberg, required=False))
        written.append(duck)
    return Schema(*fields), tuple(written)


def _convert(dtype: exp.DataType, column: str, table: str, ids: Any) -> tuple[Any, str]:
    """(Iceberg type, DuckDB type written) of one DuckDB type; nested ids drawn from ``ids``."""
    from pyiceberg.types import DecimalType, ListType, MapType, NestedField, StructType

    kind = dtype.this
    if kind in _REFUSED:
        hint = _HINTS.get(kind)
        raise BindError(f"CREATE TABLE {table}: column {column} is {_REFUSED[kind]}, which Iceberg cannot "
                                f"hold" + (f"; cast it to {hint}" if hint else ""))  # fmt: skip
    if kind in _PRIMITIVES:
        iceberg, duck = _PRIMITIVES[kind]
        return _primitive(iceberg), duck
    if kind == T.DECIMAL:
        p, s = ([int(e.this.this) for e in dtype.expressions] + [18, 3])[:2] if dtype.expressions else (18, 3)
        if len(dtype.expressions) == 1:
            s = 0
        return DecimalType(p, s), f"DECIMAL({p}, {s})"
    if kind == T.ARRAY or kind == T.LIST:
        eid = next(ids)
        inner, duck = _convert(dtype.expressions[0], column, table, ids)
        return ListType(eid, inner, element_required=False), f"{duck}[]"
    if kind == T.MAP:
        kid, vid = next(ids), next(ids)
        (kt, kd), (vt, vd) = (_convert(e, column, table, ids) for e in dtype.expressions[:2])
        return MapType(kid, kt, vid, vt, value_required=False), f"MAP({kd}, {vd})"
    if kind == T.STRUCT:
        members, ducks = [], []
        for member in dtype.expressions:
            fid = next(ids)
            inner, duck = _convert(member.args["kind"], f"{column}.{member.name}", table, ids)
            members.append(NestedField(fid, member.name, inner, required=False))
            ducks.append(f"{quote(member.name)} {duck}")
        return StructType(*members), f"STRUCT({', '.join(ducks)})"
    raise BindError(f"CREATE TABLE {table}: column {column} has type {dtype.sql('duckdb')}, which an "
                            "Iceberg table cannot hold")  # fmt: skip


def duck_type(field_type: Any, column: str, table: str) -> str:
    """The DuckDB type that writes Iceberg type ``field_type`` (an INSERT's cast); NotSupportedError for
    types the writers cannot produce."""
    from pyiceberg import types as it

    simple: dict[type, str] = {
        it.BooleanType: "BOOLEAN", it.IntegerType: "INTEGER", it.LongType: "BIGINT", it.FloatType: "FLOAT",
        it.DoubleType: "DOUBLE", it.StringType: "VARCHAR", it.BinaryType: "BLOB", it.DateType: "DATE",
        it.TimeType: "TIME", it.TimestampType: "TIMESTAMP", it.TimestamptzType: "TIMESTAMPTZ",
    }  # fmt: skip
    for cls, name in simple.items():
        if type(field_type) is cls:
            return name
    if isinstance(field_type, it.DecimalType):
        return f"DECIMAL({field_type.precision}, {field_type.scale})"
    if isinstance(field_type, it.ListType):
        return duck_type(field_type.element_type, column, table) + "[]"
    if isinstance(field_type, it.MapType):
        return f"MAP({duck_type(field_type.key_type, column, table)}, {duck_type(field_type.value_type, column, table)})"
    if isinstance(field_type, it.StructType):
        inner = (
            f"{quote(f.name)} {duck_type(f.field_type, f'{column}.{f.name}', table)}"
            for f in field_type.fields
        )
        return f"STRUCT({', '.join(inner)})"
    raise BindError(f"INSERT INTO {table}: column {column} is an Iceberg {field_type}, which Squall "
                            "cannot write")  # fmt: skip


def table_types(schema: Any, table: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The table's column names and the DuckDB types an INSERT casts to."""
    names = tuple(f.name for f in schema.fields)
    return names, tuple(duck_type(f.field_type, f.name, table) for f in schema.fields)


def _primitive(name: str) -> Any:
    """The pyiceberg type of a primitive's name (``long``, ``timestamptz``, …)."""
    from pyiceberg import types as it

    kinds = {"boolean": it.BooleanType, "int": it.IntegerType, "long": it.LongType, "float": it.FloatType,
             "double": it.DoubleType, "string": it.StringType, "binary": it.BinaryType, "date": it.DateType,
             "time": it.TimeType, "timestamp": it.TimestampType, "timestamptz": it.TimestamptzType}  # fmt: skip
    return kinds[name]()
