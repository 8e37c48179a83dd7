"""Hive partitions: ``key=value`` folders below a table's location, as typed columns, and pruning by them.

As DuckDB 2.0 reads them (``read_parquet(…, hive_partitioning = true)``, checked against it in
``tests/test_hive_partitions.py``):

- every folder component ``key=value`` (one ``=``) between the table's location and a file is a partition,
  at any depth; every file must have the same keys (a DataError names two files that differ);
- the columns come in key order (sorted), after the files' columns; a file column named like a key (case
  aside) keeps its place, and its values come from the path;
- a key's type is the first of DATE, TIMESTAMP, BIGINT that every value of it casts to strictly
  (``hive_types_autocast``: ``2024-1-1`` is a date, ``01`` and ``+1`` are not integers, ``1.5`` is text),
  else VARCHAR; ``__HIVE_DEFAULT_PARTITION__`` is NULL (and so is ``NULL`` in a typed key); text values are
  URL-decoded (``a%20b`` is ``a b``). Forms DuckDB reads that Squall does not (``infinity`` dates, years past
  9999, time zones) are refused with one line naming the value.

:func:`prune` keeps the files whose partition values may pass a scan's filters: each filter over partition
columns only is evaluated by DuckDB on the table's distinct partition values (so ``year = 1990 + 5``,
``IN``, ranges, ``OR``, functions all prune, as in DuckDB's own file pruning); a filter it cannot evaluate
prunes nothing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.errors import DataError, NotSupportedError

#: the folder value of a NULL partition (Hive's, and DuckDB's ``COPY … PARTITION_BY``)
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_TYPES = {"date": pa.date32(), "timestamp": pa.timestamp("us"), "bigint": pa.int64(), "varchar": pa.string()}
_DATE = re.compile(r"^\s*(\d+)-(\d{1,2})-(\d{1,2})\s*$")
_TIMESTAMP = re.compile(
    r"^\s*(\d+)-(\d{1,2})-(\d{1,2})(?:T| +)(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?\s*(?:Z|UTC)?\s*$"
)
_TIMESTAMP_LIKE = re.compile(r"^\s*\d+-\d{1,2}-\d{1,2}(?:T| +)\d")
_INTEGER = re.compile(r"^\s*(-?)(\d+)\s*$")
_PREFIXED = re.compile(r"^\s*0([xXbB])([0-9a-fA-F]+)\s*$")


@dataclass(frozen=True)
class Partitioning:
    """A table's partition columns and each file's values."""

    #: (column name in the table, key in the paths), in column order
    columns: tuple[tuple[str, str], ...]
    #: column -> Arrow type
    types: Mapping[str, pa.DataType]
    #: path -> column -> typed value (None: NULL)
    values: Mapping[str, Mapping[str, Any]]

    def text(self, path: str, column: str) -> str | None:
        """The value of ``column`` in ``path`` as text a worker casts to the column's type (None: NULL)."""
        value = self.values[path][column]
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ", timespec="microseconds")
        return value.isoformat() if isinstance(value, dt.date) else str(value)

    def partition(self, path: str) -> tuple[Any, ...]:
        """The file's partition: its values in column order."""
        return tuple(self.values[path][c] for c, _k in self.columns)


def parse(relative: str) -> dict[str, str]:
    """The ``key=value`` folder components of a file's path relative to its table (raw values)."""
    out: dict[str, str] = {}
    for part in relative.split("/")[:-1]:
        key, sep, value = part.partition("=")
        if sep and key and "=" not in value:
            out.setdefault(key, value)
    return out


def partitioning(table: str, relative: Mapping[str, str], file_columns: Sequence[str]) -> Partitioning | None:
    """The partitioning of ``table`` whose files have paths ``relative`` (path -> path below the table's
    location); None when there are no ``key=value`` folders. ``file_columns``: the files' column names (a key
    named like one takes its place)."""
    raw = {path: parse(rel) for path, rel in relative.items()}
    first_path = next(iter(raw), None)
    if first_path is None or not raw[first_path]:
        if any(raw.values()):
            other = next(p for p, r in raw.items() if r)
            raise DataError(f"table {table}: {other} is in a partition folder but {first_path} is not")
        return None
    keys = sorted(raw[first_path])
    for path, parts in raw.items():
        if sorted(parts) != keys:
            raise DataError(
                f"table {table}: files with different partition keys: {first_path} has {', '.join(keys)}, "
                f"{path} has {', '.join(sorted(parts)) or 'none'}"
            )
    by_lower = {c.lower(): c for c in file_columns}
    columns = tuple((by_lower.get(k.lower(), k), k) for k in keys)
    types = {column: _TYPES[_key_type([parts[key] for parts in raw.values()])] for column, key in columns}
    values = {
        path: {column: _value(table, key, parts[key], types[column]) for column, key in columns}
        for path, parts in raw.items()
    }
    return Partitioning(columns, types, values)


def _is_null(raw: str) -> bool:
    return raw == DEFAULT_PARTITION or raw.upper() == "NULL"


def _key_type(raws: Sequence[str]) -> str:
    """DuckDB's autocast type of a key from its raw values: one type all non-NULL values agree on, else text."""
    found = {_detect(r) for r in raws if not _is_null(r)}
    return found.pop() if len(found) == 1 else "varchar"


def _detect(raw: str) -> str:
    if _DATE.match(raw) or raw.strip().lower() in ("epoch", "infinity", "-infinity"):
        return "date"
    if _TIMESTAMP.match(raw) or _TIMESTAMP_LIKE.match(raw):
        return "timestamp"
    if (m := _INTEGER.match(raw)) and (m.group(1) or len(m.group(2)) == 1 or m.group(2)[0] != "0"):
        return "bigint" if -(2**63) <= int(raw) < 2**63 else "varchar"
    if (m := _PREFIXED.match(raw)) and _prefixed(m) is not None:
        return "bigint"
    return "varchar"


def _prefixed(m: re.Match[str]) -> int | None:
    try:
        value = int(m.group(2), 16 if m.group(1) in "xX" else 2)
    except ValueError:
        return None
    return value if value < 2**63 else None


def _value(table: str, key: str, raw: str, type_: pa.DataType) -> Any:
    """The typed value of one raw partition value (None: NULL); NotSupportedError for forms not read."""
    if raw == DEFAULT_PARTITION:
        return None
    if pa.types.is_string(type_):
        return unquote(raw)
    if _is_null(raw):
        return None
    try:
        if pa.types.is_int64(type_):
            m = _PREFIXED.match(raw)
            return _prefixed(m) if m else int(raw)
        if raw.strip().lower() == "epoch":
            return dt.date(1970, 1, 1) if pa.types.is_date32(type_) else dt.datetime(1970, 1, 1)
        m = (_DATE if pa.types.is_date32(type_) else _TIMESTAMP).match(raw)
        if m is None:
            raise ValueError(raw)
        y, mo, d, h, mi, sec = (int(g) if g else 0 for g in (m.groups() + (None,) * 3)[:6])
        if pa.types.is_date32(type_):
            return dt.date(y, mo, d)
        micros = int((m.group(7) or "0")[:6].ljust(6, "0"))
        return dt.datetime(y, mo, d, h, mi, sec, micros)
    except ValueError:
        raise NotSupportedError(
            f"table {table}: partition value {key}={raw} is a {type_} form Squall does not read yet "
            "(rename the folder, e.g. to an ISO date)"
        ) from None


def filters_on(part: Partitioning, filters: Sequence[exp.Expression]) -> list[exp.Expression]:
    """The filters that read partition columns only."""
    names = {c for c, _k in part.columns}
    out = []
    for f in filters:
        columns = [c.name for c in f.find_all(exp.Column)]
        if columns and all(c in names for c in columns) and not f.find(exp.Subquery, exp.Select):
            out.append(f)
    return out


def prune(part: Partitioning, filters: Sequence[exp.Expression]) -> tuple[set[tuple[Any, ...]], list[str]]:
    """The partitions (value tuples) that may pass every filter over partition columns, and the filters
    that pruned (SQL); every partition when none applies."""
    distinct = sorted(set(map(part.partition, part.values)), key=repr)
    usable = filters_on(part, filters)
    if not usable:
        return set(distinct), []
    names = [c for c, _k in part.columns]
    arrays = [pa.array([p[i] for p in distinct], part.types[c]) for i, c in enumerate(names)]
    table = pa.Table.from_arrays(
        [*arrays, pa.array(range(len(distinct)), pa.int64())], [*names, "__squall_row"]
    )
    keep = set(range(len(distinct)))
    used = []
    con = duckdb.connect(config={"enable_external_access": False})
    try:
        con.register("__squall_partitions", table)
        for f in usable:
            sql = f.sql(dialect="duckdb")
            try:
                rows = con.execute(f"SELECT __squall_row FROM __squall_partitions WHERE {sql}").fetchall()
            except duckdb.Error:
                continue  # not something DuckDB evaluates over the values alone: prunes nothing
            keep &= {r[0] for r in rows}
            used.append(sql)
    finally:
        con.close()
    return {distinct[i] for i in keep}, used
