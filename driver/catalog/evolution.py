"""Schema evolution across a table's files: their schemas united by column name, with safe widening.

As DuckDB's ``union_by_name = true`` reads them, with one difference: where DuckDB falls back to a type that
holds both (``BIGINT`` and ``VARCHAR`` become ``VARCHAR``), Squall refuses — a one-line DataError naming the
column, both types and both files.

- Columns are matched by name; a table's columns come in the order they first appear in its files (in path
  order); a file without a column reads NULLs for it.
- Safe widening: integers to the wider integer (signed and unsigned: a signed type that holds both, up to
  64 bits), integers of up to 32 bits and FLOAT to DOUBLE, DECIMALs (and integers) to the DECIMAL with the
  most integer digits and the largest scale (as DuckDB: ``DECIMAL(10,2)`` and ``DECIMAL(12,4)`` give
  ``DECIMAL(12,4)``; at most 38 digits), ``string``/``large_string``/``string_view`` (and the binary
  kinds) to one (``large_string`` when they differ), a column of nulls only to any type. Nested types
  must agree.
- A column is nullable when any file has it nullable or lacks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from squall.errors import DataError

_DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


@dataclass(frozen=True)
class UnitedSchema:
    """The table's schema and, per file, the table columns it lacks and whether it differs at all."""

    schema: pa.Schema
    #: path -> table columns the file does not hold
    missing: dict[str, tuple[str, ...]]
    #: paths that hold a column in another type than the table's, or lack one (read through a FileRead)
    differs: frozenset[str]


def _strings(t: pa.DataType) -> str | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return None


def _as_decimal(t: pa.DataType) -> tuple[int, int] | None:
    """(integer digits, scale) of a decimal or integer type."""
    if pa.types.is_decimal(t):
        return t.precision - t.scale, t.scale
    if pa.types.is_integer(t):
        return _DECIMAL_DIGITS[t.bit_width], 0
    return None


def _integers(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    sa, sb = pa.types.is_signed_integer(a), pa.types.is_signed_integer(b)
    if sa == sb:
        return a if a.bit_width >= b.bit_width else b
    signed, unsigned = (a, b) if sa else (b, a)
    if unsigned.bit_width < signed.bit_width:
        return signed
    bits = unsigned.bit_width * 2
    return {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}.get(bits)


def wider(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both ``a`` and ``b`` widen to safely, or None when there is none (see the module doc)."""
    if a == b:
        return a
    if pa.types.is_null(a) or pa.types.is_null(b):
        return b if pa.types.is_null(a) else a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return _integers(a, b)
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        others = [t for t in (a, b) if not pa.types.is_floating(t)]
        if all(pa.types.is_integer(t) and t.bit_width <= 32 for t in others):
            return pa.float64()
        return None
    if (da := _as_decimal(a)) and (db := _as_decimal(b)):
        scale = max(da[1], db[1])
        precision = max(da[0], db[0]) + scale
        return pa.decimal128(precision, scale) if precision <= 38 else None
    kind = _strings(a)
    if kind is not None and kind == _strings(b):
        return pa.large_string() if kind == "string" else pa.large_binary()
    return None


def unite(table: str, schemas: Sequence[tuple[str, pa.Schema]]) -> UnitedSchema:
    """The table schema of files ``schemas`` ((path, schema) in path order); DataError on a column whose
    types do not widen to one. Each distinct schema is looked at once (many files usually share a few)."""
    firsts: dict[pa.Schema, str] = {}  # distinct schema -> the first file holding it
    for path, schema in schemas:
        firsts.setdefault(schema, path)
    types: dict[str, pa.DataType] = {}
    nullable: dict[str, bool] = {}
    since: dict[str, tuple[str, pa.DataType]] = {}  # column -> (file that set its type, that file's type)
    for schema, path in firsts.items():
        for f in schema:
            if f.name not in types:
                types[f.name], nullable[f.name], since[f.name] = f.type, f.nullable, (path, f.type)
                continue
            w = wider(types[f.name], f.type)
            if w is None:
                first, first_type = since[f.name]
                raise DataError(
                    f"table {table}: column {f.name} is {first_type} in {first} but {f.type} in {path} "
                    "(no safe widening between them)"
                )
            if w != types[f.name]:
                types[f.name], since[f.name] = w, (path, f.type)
            nullable[f.name] = nullable[f.name] or f.nullable
    lacking = {schema: tuple(c for c in types if c not in schema.names) for schema in firsts}
    for lacks in lacking.values():
        nullable.update((c, True) for c in lacks)
    united = pa.schema([pa.field(c, t, nullable[c]) for c, t in types.items()])
    other = {s for s in firsts if lacking[s] or any(f.type != types[f.name] for f in s)}
    return UnitedSchema(
        united,
        {path: lacking[schema] for path, schema in schemas if lacking[schema]},
        frozenset(path for path, schema in schemas if schema in other),
    )
