"""Iceberg partition transforms for the writers: the spec of a new table from its text, and for every
partition field a DuckDB expression the ranks split their files by (``WriteSpec.partition_exprs``).

A rank writes one folder per value of its keys, so every file holds rows of one partition. Each key is an
integer that *is* the Iceberg partition value whenever that value is an integer (``year``, ``month``,
``day``, ``hour``: units since 1970; ``bucket``; ``identity``/``truncate`` of int, long, date, time,
timestamps; boolean), so the commit reads it back from the file's folder name; for other values (strings,
decimals, binary) the key is an MD5 of the value and the commit takes the value from the file's column
statistics (:mod:`.iceberg`). Keys are digits or hex: file paths stay plain. Identity partitions of float and
double columns are refused: pyiceberg 0.12 stores their partition values as 32-bit floats, so readers
would prune the wrong files.

``bucket(N, c)`` hashes with Iceberg's 32-bit Murmur3 (x86, seed 0) in DuckDB SQL — ``hash_long`` for int,
long, date (days), time and timestamps (microseconds), ``hash_bytes`` for strings (UTF-8), binary and uuid
(16 big-endian bytes) — exactly as the spec says (checked against pyiceberg's own transform); decimal and
fixed sources are refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

from squall.errors import NotSupportedError, OptionError

M32 = 4294967295
_C1, _C2 = 0xCC9E2D51, 0x1B873593

#: ``month(d)``, ``bucket(16, k)`` (Athena, Spark) or ``bucket(k, 16)`` (Trino), ``d``
_FIELD = re.compile(
    r'^\s*(?:(?P<fn>[A-Za-z_]+)\s*\(\s*(?P<a>"[^"]+"|[^,()]+?)\s*(?:,\s*(?P<b>"[^"]+"|[^,()]+?)\s*)?\)'
    r'|(?P<col>"[^"]+"|[^(),]+?))\s*$'
)
_TEMPORAL = ("year", "month", "day", "hour")
_NAMES = {"years": "year", "months": "month", "days": "day", "hours": "hour", "trunc": "truncate"}
_INT_SOURCES = ("int", "long", "date", "time", "timestamp", "timestamptz", "boolean")


def _unquote(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) > 1 and text[0] == text[-1] == '"' else text


def parse_field(text: str) -> tuple[str, str, int | None]:
    """``(transform, column, argument)`` of one partition field's text (``identity`` for a bare column)."""
    m = _FIELD.match(text)
    if m is None:
        raise OptionError(f"cannot read the partition field {text!r}: name a column or a transform such as "
                          "month(d), bucket(16, k), truncate(10, s)")  # fmt: skip
    if m.group("col"):
        return "identity", _unquote(m.group("col")), None
    fn = m.group("fn").lower()
    fn = _NAMES.get(fn, fn)
    a, b = m.group("a"), m.group("b")
    if fn in ("bucket", "truncate"):
        if b is None:
            raise OptionError(f"partition field {text!r}: {fn} takes a number and a column, e.g. {fn}(16, c)")
        number, column = (a, b) if a.strip().isdigit() else (b, a)
        if not number.strip().isdigit() or int(number) < 1:
            raise OptionError(f"partition field {text!r}: {fn} needs a positive whole number")
        return fn, _unquote(column), int(number)
    if b is not None or fn not in (*_TEMPORAL, "identity", "void"):
        raise OptionError(f"partition transform {text!r}: use a column, year(c), month(c), day(c), hour(c), "
                          "bucket(N, c) or truncate(W, c)")  # fmt: skip
    return fn, _unquote(a), None


def build_spec(fields: Sequence[str], schema: Any, *, first_id: int = 1000, spec_id: int = 0) -> Any:
    """The PartitionSpec of ``fields`` (partition text) over ``schema`` (a pyiceberg Schema), its field ids
    from ``first_id``; OptionError or NotSupportedError (one line) for a column the schema lacks or a
    transform its type cannot take."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import parse_transform

    out, names, ids = [], set(), count(first_id)
    by_lower = {f.name.lower(): f for f in schema.fields}
    for text in fields:
        fn, column, arg = parse_field(text)
        source = by_lower.get(column.lower())
        if source is None:
            raise OptionError(f"partition field {text!r}: the result has no column {column!r} "
                              f"(columns: {', '.join(f.name for f in schema.fields)})")  # fmt: skip
        transform = parse_transform(f"{fn}[{arg}]" if arg is not None else fn)
        check_transform(fn, source.name, source.field_type, transform)
        suffix = {"identity": "", "truncate": "_trunc", "void": "_null"}.get(fn, f"_{fn}")
        name = source.name + suffix
        if name.lower() in names:
            raise OptionError(f"partition field {text!r} is given twice")
        names.add(name.lower())
        out.append(PartitionField(source.field_id, next(ids), transform, name))
    return PartitionSpec(*out, spec_id=spec_id)


def check_transform(fn: str, column: str, field_type: Any, transform: Any) -> None:
    """NotSupportedError when the writers cannot split by ``transform`` of a ``field_type`` column."""
    kind = str(field_type)
    if not field_type.is_primitive:
        raise NotSupportedError(f"cannot partition by {column}: it is a {kind}; partition by a plain column")
    if not transform.can_transform(field_type):
        raise NotSupportedError(f"cannot partition by {fn}({column}): {fn} does not apply to a {kind} column")
    if fn == "identity" and kind in ("float", "double"):
        raise NotSupportedError(f"partitioning by the {kind} column {column}: pyiceberg stores such partition values "
                                "as 32-bit floats (readers would prune the wrong files); partition by a "
                                "decimal or integer column")  # fmt: skip
    if fn == "bucket" and not (kind in _INT_SOURCES[:-1] or kind in ("string", "binary", "uuid")):
        raise NotSupportedError(f"bucket({column}) of a {kind} column is not supported: bucket an integer, "
                                "string, date, timestamp or uuid column")  # fmt: skip
    if fn == "truncate" and kind not in ("int", "long", "string"):
        raise NotSupportedError(f"truncate({column}) of a {kind} column is not supported: truncate an integer "
                                "or string column")  # fmt: skip
    if fn not in ("identity", "void", "bucket", "truncate", *_TEMPORAL):
        raise NotSupportedError(f"partition transform {fn} is not supported")


@dataclass(frozen=True)
class Key:
    """One partition field's split key: its folder name, DuckDB SQL, and whether the folder's value is the
    partition value itself (``exact``; else the commit reads it from the file's statistics)."""

    name: str
    sql: str
    exact: bool


def keys(spec: Any, schema: Any, result_names: Sequence[str]) -> list[Key]:
    """The split keys of ``spec``'s fields (void fields have none: their value is always null)."""
    taken = {n.lower() for n in result_names}
    top = {f.field_id for f in schema.fields}
    out = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        if source.field_id not in top:
            raise NotSupportedError(f"partition field {field.name}: its source column is inside a struct; "
                                    "Squall writes tables partitioned by top-level columns")  # fmt: skip
        fn = str(field.transform).split("[")[0].lower()
        if fn == "void":
            continue
        name = re.sub(r"[^A-Za-z0-9_]", "_", field.name) or "p"
        while name.lower() in taken:
            name += "_p"
        taken.add(name.lower())
        arg = getattr(field.transform, "num_buckets", None) or getattr(field.transform, "width", None)
        sql, exact = key_sql(fn, _ident(source.name), str(source.field_type), arg)
        out.append(Key(name, sql, exact))
    return out


def key_sql(fn: str, col: str, kind: str, arg: int | None) -> tuple[str, bool]:
    """DuckDB SQL of one split key over column SQL ``col`` of Iceberg type ``kind``; and whether it is exact."""
    if fn in _TEMPORAL:
        if fn == "hour" or (fn == "day" and kind != "date"):
            unit = 3600_000_000 if fn == "hour" else 86400_000_000
            return _floor_div(f"epoch_us({col})", unit), True
        base = f"timezone('UTC', {col})" if kind == "timestamptz" else col
        if fn == "day":
            return f"({base} - DATE '1970-01-01')", True
        if fn == "year":
            return f"(year({base}) - 1970)", True
        return f"((year({base}) - 1970) * 12 + month({base}) - 1)", True
    if fn == "bucket":
        assert arg is not None
        return f"({bucket_hash(col, kind)} & 2147483647) % {arg}", True
    if fn == "truncate":
        assert arg is not None
        if kind in ("int", "long"):
            return f"({col} - ((({col} % {arg}) + {arg}) % {arg}))", True
        return f"md5(left({col}, {arg}))", False
    if kind in _INT_SOURCES:
        return _as_long(col, kind), True
    return (f"md5({col})" if kind == "binary" else f"md5(CAST({col} AS VARCHAR))"), False


def _as_long(col: str, kind: str) -> str:
    """An int/long/date/time/timestamp/boolean value as Iceberg's integer (days, microseconds)."""
    if kind == "date":
        return f"({col} - DATE '1970-01-01')"
    if kind in ("time", "timestamp", "timestamptz"):
        return f"epoch_us({col})"
    if kind == "boolean":
        return f"CAST({col} AS INTEGER)"
    return f"CAST({col} AS BIGINT)"


def _floor_div(value: str, unit: int) -> str:
    return f"(({value}) - ((({value}) % {unit}) + {unit}) % {unit}) // {unit}"


def bucket_hash(col: str, kind: str) -> str:
    """Iceberg's bucket hash (Murmur3 x86 32, seed 0) of column SQL ``col`` as an unsigned 32-bit UBIGINT."""
    if kind in ("string", "binary", "uuid"):
        hexed = {"string": f"hex(encode({col}))", "binary": f"hex({col})",
                 "uuid": f"replace(CAST({col} AS VARCHAR), '-', '')"}[kind]  # fmt: skip
        return hash_bytes(hexed)
    return hash_long(_as_long(col, kind))


# --- Murmur3 (x86, 32 bits, seed 0) in DuckDB SQL. Values are UBIGINT below 2**32; ``_let`` binds a value
# to a lambda parameter so each step's SQL stays linear in size.

_names = count()


def _let(value: str, body: Any) -> str:
    """``body(name)`` with ``name`` bound to ``value`` (DuckDB has no LET: a one-element list_transform)."""
    name = f"m{next(_names)}"
    return f"list_transform([{value}], lambda {name}: {body(name)})[1]"


def _rotl(x: str, r: int) -> str:
    return f"((({x} << {r}) | ({x} >> {32 - r})) & {M32})"


def _mix_k(k: str) -> str:
    return _let(
        f"(({k}) * {_C1}) & {M32}",
        lambda a: _let(_rotl(a, 15), lambda b: f"(({b}) * {_C2}) & {M32}"),
    )


def _mix_h(h: str, k: str) -> str:
    return _let(
        f"xor({h}, {k})",
        lambda c: _let(_rotl(c, 13), lambda d: f"(({d}) * 5 + {0xE6546B64}) & {M32}"),
    )


def _fmix(h: str, length: str) -> str:
    def steps(e: str) -> str:
        return _let(f"xor({e}, {e} >> 16)", lambda f: _let(f"(({f}) * {0x85EBCA6B}) & {M32}", lambda g: _let(
            f"xor({g}, {g} >> 13)", lambda i: _let(f"(({i}) * {0xC2B2AE35}) & {M32}",
                                                    lambda j: f"xor({j}, {j} >> 16)"))))  # fmt: skip

    return _let(f"xor({h}, CAST({length} AS UBIGINT))", steps)


def hash_long(value: str) -> str:
    """Murmur3 of a BIGINT's 8 little-endian bytes (Iceberg's hash of int, long, date, time, timestamps)."""
    return _let(
        f"CAST({value} AS BIGINT)",
        lambda v: _fmix(
            _mix_h(
                _mix_h("CAST(0 AS UBIGINT)", _mix_k(f"CAST({v} & {M32} AS UBIGINT)")),
                _mix_k(f"CAST(({v} >> 32) & {M32} AS UBIGINT)"),
            ),
            "8",
        ),
    )


def _word(x: str, offset: str) -> str:
    """The little-endian 32-bit word of hex string ``x`` at byte ``offset`` (fewer bytes at the end: the tail)."""
    pairs = " || ".join(f"substr({x}, 2 * ({offset}) + {2 * i + 1}, 2)" for i in (3, 2, 1, 0))
    return f"CAST('0x' || {pairs} AS UBIGINT)"


def hash_bytes(hexed: str) -> str:
    """Murmur3 of the bytes a hex string spells (strings' UTF-8, binary, uuid)."""

    def body(x: str) -> str:
        def with_length(n: str) -> str:
            i, h = f"i{next(_names)}", f"h{next(_names)}"
            blocks = (f"list_reduce(range(0, {n} // 4), lambda {h}, {i}: {_mix_h(h, _mix_k(_word(x, f'4 * {i}')))}, "
                      f"CAST(0 AS UBIGINT))")  # fmt: skip
            tail = _let(blocks, lambda b: f"CASE WHEN {n} % 4 = 0 THEN {b} ELSE "
                                          f"xor({b}, {_mix_k(_word(x, f'4 * ({n} // 4)'))}) END")  # fmt: skip
            return _fmix(tail, n)

        return _let(f"length({x}) // 2", with_length)

    return _let(hexed, body)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
