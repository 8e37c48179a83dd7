"""A sandboxed DuckDB session: it sees only the Arrow inputs Squall registers.

External access (files, network), extension installing and loading are off
and the configuration is locked before any user-derived SQL runs, on workers
and on the driver alike.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

_LOCKDOWN = (
    # DuckDB 2.0's late materialization fails with an INTERNAL error on top-N over our
    # file_row_number-filtered Parquet views; the stage plans do not need it
    "SET disabled_optimizers = 'late_materialization'",
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET lock_configuration = true",
)


@dataclass(frozen=True)
class ParquetView:
    """Rows [start, end) of local Parquet files, read by DuckDB itself, as a named view.

    ``columns`` are (column in the file, name in the view); ``parts`` are
    (path, row ranges) — an empty range list means the whole file.
    """

    columns: tuple[tuple[str, str], ...]
    parts: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]
    #: a condition on the file's columns every row must meet too (a key range, see ScanInput.key_bounds)
    where: str = ""
    #: (path, select list) for files whose columns are not read as written (see :func:`file_read_select`)
    selects: tuple[tuple[str, str], ...] = ()

    def sql(self) -> str:
        plain = ", ".join(f"{ident(src)} AS {ident(name)}" for src, name in self.columns)
        select_of = dict(self.selects)
        selects = []
        whole: dict[str, list[str]] = {}  # select list -> the whole files read with it
        for path, ranges in self.parts:
            if not ranges:
                whole.setdefault(select_of.get(path, plain), []).append(path)
        grouped = {path for paths in whole.values() if len(paths) > 1 for path in paths}
        for select, paths in whole.items():
            if len(paths) > 1:  # one scan of these whole files: binds once, reads them in parallel
                listed = ", ".join(_literal(path) for path in paths)
                # files read through FileReads may differ in physical types (float32 and float64 under one
                # select list): united by name, not read as the first file's types; files of one schema need not
                united = ", union_by_name = true" if paths[0] in select_of else ""
                text = f"SELECT {select} FROM read_parquet([{listed}], hive_partitioning = false{united})"
                selects.append(text + (f" WHERE ({self.where})" if self.where else ""))
        for path, ranges in self.parts:
            if path in grouped and not ranges:
                continue
            text = f"SELECT {select_of.get(path, plain)} FROM read_parquet({_literal(path)}, hive_partitioning = false)"
            conditions = [f"({self.where})"] if self.where else []
            if ranges:
                conditions.append(
                    "("
                    + " OR ".join(f"(file_row_number >= {a} AND file_row_number < {b})" for a, b in ranges)
                    + ")"
                )
            if conditions:
                text += " WHERE " + " AND ".join(conditions)
            selects.append(text)
        return "\nUNION ALL\n".join(selects)


def duck_type(type_: pa.DataType) -> str | None:
    """DuckDB's name of an Arrow type a scan casts to, or None when there is no plain one."""
    simple = {
        pa.bool_(): "BOOLEAN",
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.uint8(): "UTINYINT",
        pa.uint16(): "USMALLINT",
        pa.uint32(): "UINTEGER",
        pa.uint64(): "UBIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.date32(): "DATE",
        pa.timestamp("us"): "TIMESTAMP",
        pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR",
        pa.string_view(): "VARCHAR",
        pa.binary(): "BLOB",
        pa.large_binary(): "BLOB",
    }
    if type_ in simple:
        return simple[type_]
    if pa.types.is_decimal128(type_) and type_.precision <= 38:
        return f"DECIMAL({type_.precision},{type_.scale})"
    return None


def file_read_select(
    columns: Sequence[tuple[str, str]],
    types: Sequence[str],
    renamed: Mapping[str, str],
    constants: Mapping[str, str | None],
) -> str:
    """The select list of one file read through a FileRead: each scan column (table column, view name) cast
    to its DuckDB type from the file's column (``renamed``: table column -> file column, ``""`` when the
    file lacks it: NULL) or from its partition value (``constants``: text, None for NULL)."""
    out = []
    for (source, name), type_ in zip(columns, types, strict=True):
        if source in constants:
            value = constants[source]
            expr = "NULL" if value is None else _literal(value)
        else:
            physical = renamed.get(source, source)
            expr = "NULL" if physical == "" else ident(physical)
        out.append(f"CAST({expr} AS {type_}) AS {ident(name)}")
    return ", ".join(out)


#: DuckDB's error types by the name its messages start with ("Conversion Error: …")
_ERROR_TYPES: dict[str, type[duckdb.Error]] = {
    "Conversion": duckdb.ConversionException,
    "Out of Range": duckdb.OutOfRangeException,
    "Invalid Input": duckdb.InvalidInputException,
    "Out of Memory": duckdb.OutOfMemoryException,
    "Binder": duckdb.BinderException,
    "Not implemented": duckdb.NotImplementedException,
    "IO": duckdb.IOException,
    "INTERRUPT": duckdb.InterruptException,
}
_ERROR_TYPE = re.compile(r"^([A-Za-z][A-Za-z ]*?) Error: ")


def duckdb_error(err: Exception) -> Exception:
    """DuckDB's own exception for ``err``, an error DuckDB met while an Arrow reader streamed its result (Arrow
    raises it as an OSError or ArrowException that keeps only the text); ``err`` itself when the text names no
    known type."""
    match = _ERROR_TYPE.match(str(err))
    kind = _ERROR_TYPES.get(match.group(1)) if match else None
    return kind(str(err)) if kind is not None else err


def _duckdb_errors(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    try:
        yield from reader
    except (OSError, pa.ArrowException) as err:
        raise duckdb_error(err) from None


def raise_if_interrupted(err: BaseException) -> None:
    """Raise KeyboardInterrupt when ``err`` is DuckDB's wrapping of one (:func:`interrupted`), which must stay
    an interrupt, not become a query error."""
    if interrupted(err):
        raise KeyboardInterrupt from None


def interrupted(err: BaseException) -> bool:
    """Whether ``err`` is how DuckDB reports a Ctrl-C (Squall never interrupts a DuckDB query otherwise): while
    DuckDB called back into Python (reading a registered Arrow table's schema or rows), an Invalid Input Error
    ``… failed: KeyboardInterrupt: …``; while it ran a query, a RuntimeError ``Query interrupted`` (the
    relation API) or an InterruptException."""
    if isinstance(err, duckdb.InvalidInputException):
        return _INTERRUPT.search(str(err)) is not None
    if isinstance(err, duckdb.InterruptException):
        return True
    return isinstance(err, RuntimeError) and str(err).startswith("Query interrupted")


#: DuckDB's text for a KeyboardInterrupt raised in a Python callback: "… failed: KeyboardInterrupt: " (a
#: registered object's schema) or "… Python exception: <traceback> KeyboardInterrupt" (an Arrow stream's rows)
_INTERRUPT = re.compile(r"failed: KeyboardInterrupt:|Python exception: .*\nKeyboardInterrupt\s*$", re.DOTALL)


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


_LEADING_WITH = re.compile(r"^\s*WITH\s+(RECURSIVE\s+)?", re.IGNORECASE)
_QUERY_START = re.compile(r"\s*(?:\(|(?:SELECT|WITH|FROM|VALUES)\b)", re.IGNORECASE)


def typed_empty(columns: tuple[tuple[str, str], ...]) -> str:
    """A query of no rows whose columns have these names and DuckDB types ("" for no columns)."""
    if not columns:
        return ""
    return "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {ident(n)}" for n, t in columns) + " LIMIT 0"


def typed_inputs(inputs: dict[str, tuple[tuple[str, str], ...]], sql: str) -> str | None:
    """``sql`` behind one empty CTE of typed NULLs per input (name → its (column, DuckDB type)), merged into
    ``sql``'s own ``WITH``: DuckDB binds it for names and types with nothing registered (~0.5 ms less per input
    than an empty Arrow table registered and unregistered; :meth:`Sandbox.typed_inputs` reads kept empty tables,
    which bind faster). None when an input has no columns. A name ``sql`` defines itself makes the text fail to
    bind: callers fall back to registering."""
    ctes = []
    for name, columns in inputs.items():
        if not (select := typed_empty(columns)):
            return None
        ctes.append(f"{ident(name)} AS ({select})")
    return with_ctes(sql, ctes)


def with_ctes(sql: str, ctes: Sequence[str]) -> str:
    """``sql`` with the common table expressions ``ctes`` (``name AS (query)`` each) first in its ``WITH``."""
    if not ctes:
        return sql
    head = ", ".join(ctes)
    if m := _LEADING_WITH.match(sql):
        return f"WITH {m.group(1) or ''}{head}, {sql[m.end() :]}"
    return f"WITH {head}\n{sql}"


#: Arrow type → the DuckDB type DuckDB reads it as (:meth:`Sandbox.arrow_types`)
_ARROW_TYPES: dict[pa.DataType, str] = {}
_ARROW_TYPES_LOCK = threading.Lock()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: id of a DuckDB instance's root connection -> the empty tables :meth:`Sandbox.typed_inputs` made in it
_EMPTY_TABLES: dict[int, set[str]] = {}
_EMPTY_TABLES_LOCK = threading.Lock()
#: empty tables kept per instance (one per list of column types: a catalog's tables, a plan's stage inputs)
EMPTY_TABLES_KEPT = 4096


def _forget_instance(root: duckdb.DuckDBPyConnection) -> None:
    with _EMPTY_TABLES_LOCK:
        _EMPTY_TABLES.pop(id(root), None)


#: errors after which DuckDB refuses every further query on the instance
_INSTANCE_FATAL = (duckdb.FatalException, duckdb.InternalException)
#: locked DuckDB instances kept for reuse (``Sandbox(reuse=True)``), by configuration, most recent last
_INSTANCES: OrderedDict[tuple[object, ...], duckdb.DuckDBPyConnection] = OrderedDict()
_INSTANCES_LOCK = threading.Lock()
#: a worker cycling through a dashboard's queries finds their files' instance again (5-8 MB each, idle)
INSTANCES_KEPT = 16
#: with a memory limit, at most one kept instance per this many bytes of it (a small budget keeps few)
LIMIT_PER_INSTANCE = 60 << 20


#: per configuration of recent kept instances (at most :data:`SPARE_CONFIGS`), one new in-memory instance not yet
#: locked, made between queries (:func:`prepare_spares`): ``duckdb.connect`` is most of a new instance's cost
#: (~10-35 ms), on the critical path of a query over files no kept instance allows (a connection's first queries);
#: its allowed paths and the lock are set when a query takes it, before any SQL of the query runs
_SPARES: OrderedDict[tuple[object, ...], tuple[dict[str, Any], duckdb.DuckDBPyConnection | None]] = (
    OrderedDict()
)
_SPARES_LOCK = threading.Lock()
SPARE_CONFIGS = 4


def _config_key(config: dict[str, str | bool | int | float | list[str]]) -> tuple[object, ...]:
    return tuple(sorted((k, str(v)) for k, v in config.items()))


def _take_spare(config: dict[str, str | bool | int | float | list[str]]) -> duckdb.DuckDBPyConnection | None:
    """The spare instance of ``config`` (None if there is none yet); ``config`` is remembered for the next."""
    key = _config_key(config)
    with _SPARES_LOCK:
        _config, spare = _SPARES.pop(key, ({}, None))
        _SPARES[key] = (dict(config), None)
        while len(_SPARES) > SPARE_CONFIGS:
            _old, unused = _SPARES.popitem(last=False)[1]
            if unused is not None:
                unused.close()
    return spare


def prepare_spares() -> int:
    """Make the spare instance of each remembered configuration that has none (a worker calls this between
    queries, when idle); returns how many were made."""
    with _SPARES_LOCK:
        wanted = [(key, config) for key, (config, spare) in _SPARES.items() if spare is None]
    made = 0
    for key, config in wanted:
        con = duckdb.connect(":memory:", config=config)
        with _SPARES_LOCK:
            entry = _SPARES.get(key)
            if entry is not None and entry[1] is None:  # still wanted (not evicted, not made meanwhile)
                _SPARES[key] = (config, con)
                made += 1
                continue
        con.close()
    return made


def _locked_instance(
    config: dict[str, str | bool | int | float | list[str]],
    paths: Sequence[str],
    con: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB with ``config`` (or ``con``, made so and never used), ``allowed_paths`` = ``paths``
    and the configuration locked."""
    con = con or duckdb.connect(":memory:", config=config)
    if paths:
        con.execute(f"SET allowed_paths = [{', '.join(_literal(p) for p in paths)}]")
    for statement in _LOCKDOWN:
        con.execute(statement)
    return con


def _instance_key(
    config: dict[str, str | bool | int | float | list[str]], paths: Sequence[str]
) -> tuple[object, ...]:
    return (_config_key(config), tuple(paths))


def _kept(config: dict[str, str | bool | int | float | list[str]]) -> int:
    """Instances to keep when the newest has ``config``: :data:`INSTANCES_KEPT`, fewer under a small memory limit."""
    limit = str(config.get("memory_limit", ""))
    if not limit.endswith("MiB"):
        return INSTANCES_KEPT
    return max(2, min(INSTANCES_KEPT, (int(limit[:-3]) << 20) // LIMIT_PER_INSTANCE))


def _shared_instance(
    key: tuple[object, ...], config: dict[str, str | bool | int | float | list[str]], paths: Sequence[str]
) -> duckdb.DuckDBPyConnection:
    """A kept locked instance for exactly this configuration and these allowed paths (new if none)."""
    with _INSTANCES_LOCK:
        con = _INSTANCES.pop(key, None)
        if con is None:
            con = _locked_instance(config, paths, _take_spare(config))
        _INSTANCES[key] = con
        while len(_INSTANCES) > _kept(config):
            evicted = _INSTANCES.popitem(last=False)[1]
            _forget_instance(evicted)
            evicted.close()
        return con


class Sandbox:
    """One DuckDB connection with registered Arrow inputs and a locked configuration.

    Usage: ``with Sandbox(inputs, threads=2) as db: table = db.query(sql)``.
    Inputs must be registered at construction: after the lock nothing can be
    attached, read from disk or reconfigured. ``parquet`` views read local
    Parquet files natively (each statement run through :meth:`query`, :meth:`batches` or :meth:`relation` sees
    the views it names); exactly those files become DuckDB's
    ``allowed_paths``, nothing else on disk is reachable. ``files`` are more local Parquet
    files the session may read with ``read_parquet`` later (a stealing scan's files).

    ``reuse=True`` (workers): the session is a new connection to a kept, already locked DuckDB
    instance with exactly the same settings and allowed files (a worker's next query over the same
    files), instead of a new instance (~20-50 ms). Arrow inputs are the connection's own (temporary) and go
    with it; the stage SQL Squall runs creates nothing else.
    """

    def __init__(
        self,
        inputs: Mapping[str, pa.Table] | None = None,
        *,
        parquet: Mapping[str, ParquetView] | None = None,
        threads: int | None = None,
        memory_limit: str | None = None,
        temp_directory: str | None = None,
        max_temp_directory_size: str | None = None,
        files: Sequence[str] = (),
        reuse: bool = False,
    ) -> None:
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": threads or os.cpu_count() or 1,
            # freed memory goes back to the system between queries, not kept by the allocator until its next
            # allocation: an idle worker after TPC-H SF10 Q9 held ~670 MiB of its ~850 MiB peak, now ~170 MiB
            "allocator_background_threads": True,
        }
        if memory_limit:
            config["memory_limit"] = memory_limit
        if temp_directory:
            config["temp_directory"] = temp_directory
            config["home_directory"] = temp_directory
        if max_temp_directory_size:
            config["max_temp_directory_size"] = max_temp_directory_size
        views = parquet or {}
        paths: Sequence[str] = sorted({p for v in views.values() for p, _r in v.parts} | set(files))
        self._key = _instance_key(config, paths) if reuse else None
        root = _shared_instance(self._key, config, paths) if self._key else _locked_instance(config, paths)
        self._root = root
        self.con = root.cursor() if reuse else root
        for name, table in (inputs or {}).items():
            self.con.register(name, table)
        #: each Parquet view, put before a statement that names it as a CTE inlined like a view (``NOT
        #: MATERIALIZED``) instead of created: DuckDB binds a view's ``read_parquet`` (the file's footer) when it
        #: creates it and again in every statement that reads it (~0.9 ms a fact table, per view per query)
        self._views = {
            name.lower(): f"{ident(name)} AS NOT MATERIALIZED ({view.sql()})" for name, view in views.items()
        }

    def register(self, name: str, table: pa.Table) -> None:
        """Expose an Arrow table under ``name`` (allowed after the lock: it is not a file)."""
        self.con.register(name, table)

    def unregister(self, name: str) -> None:
        self.con.unregister(name)

    def load(self, name: str, rows: pa.RecordBatchReader) -> None:
        """Copy ``rows`` (an input too large to hold, read from disk a batch at a time) into a temporary DuckDB
        table ``name``.

        DuckDB estimates a scanned Arrow stream or dataset at ~1 row, so a join would build its hash table on it
        however large it is; a table of its own has exact statistics, and DuckDB keeps it within its memory limit
        (spilling it to its temp folder). :meth:`drop` removes it."""
        source = f"__load_{name}"
        self.con.register(source, rows)
        try:
            self.con.execute(f"CREATE TEMP TABLE {ident(name)} AS SELECT * FROM {ident(source)}")
        finally:
            self.con.unregister(source)

    def drop(self, name: str) -> None:
        """Remove a table :meth:`load` made."""
        self.con.execute(f"DROP TABLE IF EXISTS temp.{ident(name)}")

    def relation(self, sql: str) -> duckdb.DuckDBPyRelation:
        return self.con.sql(self._with_views(sql))

    def _with_views(self, sql: str) -> str:
        """``sql`` behind the CTEs of the Parquet views whose names it holds (in any case, quoted or not: a CTE
        it does not read costs DuckDB a parse, ~0.1 ms)."""
        if not self._views or not _QUERY_START.match(sql):  # (a statement of another kind takes no CTE)
            return sql
        text = sql.lower()
        return with_ctes(sql, [cte for name, cte in self._views.items() if name in text])

    def typed_inputs(self, inputs: dict[str, tuple[tuple[str, str], ...]], sql: str) -> str | None:
        """:func:`typed_inputs`, each input read from an empty table of its column types kept in this DuckDB
        instance (made the first time a sandbox of it needs one), its columns named by the CTE's column list:
        DuckDB binds ``FROM`` a table in a fraction of the time of a CTE of typed NULLs (a whole TPC-DS query:
        3.3 ms instead of 5.5; ~0.05 ms a column), and one table serves every input of the same types under
        any names (TPC-DS's 99 plans: 141 tables where one per (name, type) list made 581, ~0.6 ms each).
        Columns a table cannot hold as they are (DuckDB stores the NULL type as INTEGER), and names that
        differ only in case (one CTE column list cannot hold both), stay typed NULLs."""
        ctes = []
        for name, columns in inputs.items():
            if not columns:
                return None
            names = [c for c, _t in columns]
            table = self._empty_table(tuple(t for _c, t in columns))
            if table and len({n.lower() for n in names}) == len(names):
                ctes.append(f"{ident(name)}({', '.join(map(ident, names))}) AS (FROM {ident(table)})")
            else:
                ctes.append(f"{ident(name)} AS ({typed_empty(columns)})")
        return with_ctes(sql, ctes)

    def _empty_table(self, types: tuple[str, ...]) -> str | None:
        if any(t == '"NULL"' or t == "NULL" for t in types):
            return None
        table = "__squall_empty_" + hashlib.blake2b(repr(types).encode(), digest_size=12).hexdigest()
        with _EMPTY_TABLES_LOCK:
            made = _EMPTY_TABLES.setdefault(id(self._root), set())
            if table in made:
                return table
            if len(made) >= EMPTY_TABLES_KEPT:
                return None
            columns = ", ".join(f"c{i} {t}" for i, t in enumerate(types))
            try:
                self.con.execute(f"CREATE TABLE IF NOT EXISTS {ident(table)} ({columns})")
            except duckdb.Error as err:
                raise_if_interrupted(err)
                return None
            made.add(table)
        return table

    def arrow_types(self, schema: pa.Schema) -> tuple[str, ...]:
        """The DuckDB type of each field of ``schema`` as DuckDB reads Arrow data of it (remembered per Arrow
        type for the process, :data:`_ARROW_TYPES`: the planner asks for every scan of every query, each on a
        sandbox of its own)."""
        wanted = [f.type for f in schema]
        with _ARROW_TYPES_LOCK:
            have = {t: _ARROW_TYPES[t] for t in wanted if t in _ARROW_TYPES}
        missing = list(dict.fromkeys(t for t in wanted if t not in have))
        if missing:
            empty = pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(missing)]).empty_table()
            found = dict(zip(missing, (str(t) for t in self.con.from_arrow(empty).types)))
            have.update(found)
            with _ARROW_TYPES_LOCK:
                if len(_ARROW_TYPES) >= 4096:
                    _ARROW_TYPES.clear()
                _ARROW_TYPES.update(found)
        return tuple(have[t] for t in wanted)

    @contextmanager
    def batches(self, sql: str, rows: int) -> Iterator[pa.RecordBatchReader]:
        """Run ``sql`` and read its result ``rows`` at a time (DuckDB streams it: never whole in its memory); the
        result is let go of when the block ends, read to its end or not. An error DuckDB meets while it streams
        is raised as its own exception (:func:`duckdb_error`), as :meth:`query` raises it."""
        reader = self.relation(sql).to_arrow_reader(rows)
        try:
            yield pa.RecordBatchReader.from_batches(reader.schema, _duckdb_errors(reader))
        finally:
            reader.close()

    def query(self, sql: str) -> pa.Table:
        """Run ``sql`` and return the whole result as an Arrow table."""
        return self.relation(sql).to_arrow_table()

    def close(self) -> None:
        if self._key is None:  # the instance is this sandbox's own
            _forget_instance(self._root)
        self.con.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close()
        if self._key is not None and isinstance(exc_type, type) and issubclass(exc_type, _INSTANCE_FATAL):
            with _INSTANCES_LOCK:  # DuckDB invalidates an instance after an internal or fatal error
                dead = _INSTANCES.pop(self._key, None)
            if dead is not None:
                _forget_instance(dead)
                dead.close()
