"""PEP 249 (DB-API 2.0) over Squall, embedded or remote.

>>> from squall import dbapi
>>> con = dbapi.connect(data="data/sf1", workers=2)                 # embedded
>>> con = dbapi.connect(endpoint="http://127.0.0.1:8080", token="…") # remote (squall serve / API Gateway)
>>> cur = con.cursor()
>>> cur.execute("SELECT n_name FROM nation WHERE n_regionkey = ? AND n_name <> ?", (1, "BRAZIL"))
>>> cur.fetchall()

Parameters use the ``qmark`` style and are bound on the client as SQL literals — Squall has no server-side
prepared statements. The placeholders are found with sqlglot's tokenizer, so a ``?`` inside a string
literal, a quoted identifier or a comment is not a parameter. Accepted values: None (NULL), bool, int,
float (NaN and ±inf too), Decimal, str, bytes/bytearray/memoryview (BLOB), datetime.date, datetime.datetime
(TIMESTAMP, or TIMESTAMPTZ when it has a tzinfo), datetime.time; anything else is a ProgrammingError.

Squall is read-only: ``commit()`` does nothing, ``rollback()`` raises NotSupportedError, ``rowcount`` is the
number of rows of the last result. ``threadsafety`` is 1: threads may share the module, not connections.
Errors are the PEP 249 classes below, mapped from ``squall.errors`` (the original is ``__cause__``).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

import squall.errors as se

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "Warning",
    "apilevel",
    "bind",
    "connect",
    "paramstyle",
    "threadsafety",
]


# --- exceptions (PEP 249 hierarchy) ------------------------------------------------------------------


class Warning(Exception):
    """Important warnings."""


class Error(Exception):
    """Base class of every DB-API error."""


class InterfaceError(Error):
    """A problem with the interface rather than the database (e.g. a closed cursor)."""


class DatabaseError(Error):
    """A problem with the database."""


class DataError(DatabaseError):
    """A problem in the processed data (e.g. a failed cast)."""


class OperationalError(DatabaseError):
    """A problem in operating the database: unreachable service, lost worker, cancelled query, bad data files."""


class IntegrityError(DatabaseError):
    """Relational integrity (never raised: Squall is read-only)."""


class InternalError(DatabaseError):
    """An internal error of the service."""


class ProgrammingError(DatabaseError):
    """Bad SQL, unknown table or column, wrong parameters."""


class NotSupportedError(DatabaseError):
    """Valid SQL or a method Squall does not support."""


def _map(err: se.SquallError) -> Error:
    if isinstance(err, se.NotSupportedError):
        cls: type[Error] = NotSupportedError
    elif isinstance(err, (se.SqlSyntaxError, se.BindError, se.UnsafeQueryError, se.OptionError)):
        cls = ProgrammingError
    elif isinstance(err, se.QueryRuntimeError):
        cls = DataError
    elif isinstance(err, (se.DataError, se.QueryCancelled, se.WorkerError)):
        cls = OperationalError
    elif isinstance(err, se.UserError):
        cls = ProgrammingError
    elif isinstance(err, se.InternalError):  # a bug in Squall: PEP 249's InternalError
        cls = InternalError
    else:
        from squall.client import RemoteError

        cls = OperationalError if isinstance(err, RemoteError) else DatabaseError
    mapped = cls(str(err))
    mapped.squall_error = err  # type: ignore[attr-defined]
    return mapped


# --- type objects and constructors ----------------------------------------------------------------


class _TypeObject:
    """Compares equal to the Arrow type codes (``str(arrow type)``) of one PEP 249 type group."""

    def __init__(self, name: str, *predicates: Any) -> None:
        self.name = name
        self._predicates = predicates

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _TypeObject):
            return other is self
        if isinstance(other, str):
            try:
                other = _parse_type(other)
            except (ValueError, TypeError):
                return False
        return isinstance(other, pa.DataType) and any(p(other) for p in self._predicates)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<dbapi type {self.name}>"


def _parse_type(code: str) -> pa.DataType:
    simple = {
        "string": pa.string(), "large_string": pa.large_string(), "string_view": pa.string_view(),
        "binary": pa.binary(), "large_binary": pa.large_binary(), "binary_view": pa.binary_view(),
        "bool": pa.bool_(), "date32[day]": pa.date32(), "date64[ms]": pa.date64(),
    }  # fmt: skip
    if code in simple:
        return simple[code]
    if code.startswith("decimal"):
        return pa.decimal128(1, 0)
    if code.startswith("timestamp"):
        return pa.timestamp("us")
    if code.startswith("time"):
        return pa.time64("us")
    if code.startswith("duration"):
        return pa.duration("us")
    return pa.type_for_alias(code)


STRING = _TypeObject("STRING", pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
BINARY = _TypeObject("BINARY", pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view,
                     pa.types.is_fixed_size_binary)  # fmt: skip
NUMBER = _TypeObject(
    "NUMBER", pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_boolean
)
DATETIME = _TypeObject(
    "DATETIME", pa.types.is_date, pa.types.is_timestamp, pa.types.is_time, pa.types.is_duration
)
ROWID = _TypeObject("ROWID")

Date = dt.date
Time = dt.time
Timestamp = dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> dt.date:
    return dt.date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> dt.time:
    return dt.time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> dt.datetime:
    return dt.datetime(*time.localtime(ticks)[:6])


# --- parameter binding ----------------------------------------------------------------------------


def literal(value: Any) -> str:
    """``value`` as a DuckDB SQL literal (:func:`squall.params.literal`); ProgrammingError for types that
    have none here."""
    from squall.params import literal as to_literal

    try:
        return to_literal(value)
    except se.OptionError as err:
        raise ProgrammingError(str(err)) from None


def _placeholders(sql: str) -> list[int]:
    """Offsets of the ``?`` parameters in ``sql`` (not those in strings, identifiers or comments)."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = Dialect.get_or_raise("duckdb").tokenize(sql)
    except TokenError as err:
        raise ProgrammingError(f"syntax error: {str(err).splitlines()[0]}") from None
    placeholder = (TokenType.PLACEHOLDER, TokenType.QDCOLON)  # "?::INT" tokenizes as one "?::" operator
    return [t.start for t in tokens if t.token_type in placeholder and t.text.startswith("?")]


def bind(sql: str, params: Sequence[Any] | None) -> str:
    """``sql`` with each ``?`` parameter replaced by the literal of the matching value."""
    if params is None:
        params = ()
    if isinstance(params, (str, bytes, Mapping)) or not isinstance(params, Sequence):
        raise ProgrammingError("parameters must be a sequence (qmark style: ?), e.g. a tuple or a list")
    offsets = _placeholders(sql)
    if len(offsets) != len(params):
        raise ProgrammingError(
            f"the query has {len(offsets)} parameter(s) but {len(params)} value(s) were given"
        )
    out, last = [], 0
    for offset, value in zip(offsets, params):
        out.append(sql[last:offset])
        out.append(literal(value))
        last = offset + 1
    out.append(sql[last:])
    return "".join(out)


# --- connection and cursor ------------------------------------------------------------------------


def _description(schema: pa.Schema) -> list[tuple[Any, ...]]:
    out = []
    for field in schema:
        precision = scale = None
        if pa.types.is_decimal(field.type):
            precision, scale = field.type.precision, field.type.scale
        out.append((field.name, str(field.type), None, None, precision, scale, field.nullable))
    return out


class Cursor:
    """Runs queries and hands out their rows. ``arraysize`` (default 1) is fetchmany's default size."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self._table: pa.Table | None = None
        self._pos = 0
        self._closed = False
        self.stats: dict[str, Any] | None = None

    @property
    def description(self) -> list[tuple[Any, ...]] | None:
        """Seven-tuples ``(name, type_code, None, None, precision, scale, null_ok)`` of the last result;
        ``type_code`` is the Arrow type as text and compares equal to STRING/NUMBER/DATETIME/BINARY."""
        return None if self._table is None else _description(self._table.schema)

    @property
    def rowcount(self) -> int:
        """Rows of the last result, -1 before the first execute."""
        return -1 if self._table is None else self._table.num_rows

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("cursor is closed")
        self.connection._check()

    def execute(self, operation: str, parameters: Sequence[Any] | None = None) -> Cursor:
        """Run one query (``?`` parameters bound from ``parameters``); returns the cursor."""
        self._check()
        sql = bind(operation, parameters)
        try:
            result = self.connection._con.sql(sql)
        except se.SquallError as err:
            raise _map(err) from err
        self._table, self._pos, self.stats = result.to_arrow(), 0, result.stats
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        """Run the query once per parameter set; the cursor keeps the last result."""
        for params in seq_of_parameters:
            self.execute(operation, params)
        return self

    def _rows(self, n: int) -> list[tuple[Any, ...]]:
        self._check()
        if self._table is None:
            raise ProgrammingError("no result: call execute() first")
        chunk = self._table.slice(self._pos, max(n, 0))
        self._pos += chunk.num_rows
        columns = [c.to_pylist() for c in chunk.columns]
        return list(zip(*columns)) if columns else [() for _ in range(chunk.num_rows)]

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self._rows(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        return self._rows(self.arraysize if size is None else size)

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._table is None:
            return self._rows(0)
        return self._rows(self._table.num_rows - self._pos)

    def fetch_arrow_table(self) -> pa.Table:
        """The rows not fetched yet, as a pyarrow.Table (an extension to PEP 249)."""
        self._check()
        if self._table is None:
            raise ProgrammingError("no result: call execute() first")
        rest = self._table.slice(self._pos)
        self._pos = self._table.num_rows
        return rest

    def setinputsizes(self, sizes: Any) -> None:
        """Does nothing (PEP 249 allows that)."""

    def setoutputsize(self, size: Any, column: int | None = None) -> None:
        """Does nothing (PEP 249 allows that)."""

    def close(self) -> None:
        self._closed = True
        self._table = None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while (row := self.fetchone()) is not None:
            yield row

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Connection:
    """A DB-API connection over an embedded :class:`squall.Connection` or a remote one."""

    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, con: Any) -> None:
        self._con = con
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("connection is closed")

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def commit(self) -> None:
        """Nothing to commit: Squall is read-only."""
        self._check()

    def rollback(self) -> None:
        raise NotSupportedError("Squall is read-only: there are no transactions to roll back")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._con.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    data: str | None = None,
    *,
    endpoint: str | None = None,
    workers: int | None = None,
    **options: Any,
) -> Connection:
    """Open a DB-API connection: embedded over ``data`` (a folder, as :func:`squall.connect`), or remote
    when ``endpoint`` (or ``data``) is an ``http(s)://`` URL — options ``token``, ``auth="iam"``, ``region``.
    """
    import squall

    target = endpoint or data
    if endpoint is not None and data is not None:
        raise InterfaceError("give data (embedded) or endpoint (remote), not both")
    try:
        con = squall.connect(target, workers=workers, **options)
    except se.SquallError as err:
        raise _map(err) from err
    except TypeError as err:
        raise InterfaceError(str(err)) from None
    return Connection(con)
