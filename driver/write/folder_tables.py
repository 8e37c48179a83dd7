"""Tables that are folders of files under a writable location: CREATE TABLE AS, INSERT INTO, DROP TABLE.

``CREATE TABLE t AS query`` writes a new folder (``LOCATION``/``external_location`` in ``WITH (…)``, else
``<first writable location>/t/``) of Parquet files (``format`` = csv or json for text), hive ``key=value``
folders for ``PARTITIONED BY (a, b)``, registers ``t`` in the connection and marks the folder as Squall's
with ``.squall-table`` (JSON; hidden from listings, no data suffix; written last). ``INSERT INTO t query`` adds
part files to a registered folder table under a writable location — the query's columns cast to the table's types,
positionally or by the column list or ``BY NAME``, the table's partition folders kept. ``DROP TABLE t``
deletes the folder only when Squall made it (the marker), then forgets ``t``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from squall.driver.write.base import Describe, DoneJob, FilesJob, WriteJob
from squall.driver.write.commit import check_target
from squall.driver.write.locations import Writable
from squall.driver.write.options import write_options
from squall.driver.write.statements import WriteStatement
from squall.errors import BindError, NotSupportedError, UnsafeQueryError
from squall.operators.sinks import sink_for
from squall.plan import WriteSpec

if TYPE_CHECKING:
    from squall.driver.catalog.tables import Catalog

MARKER = ".squall-table"  # no .json: a DuckDB glob of a JSON table's files (t/*.json) must not read it
_TABLE_OPTIONS = ("FORMAT", "LOCATION", "EXTERNAL_LOCATION", "TABLE_TYPE")


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def cast_to(query: str, names: tuple[str, ...], types: tuple[str, ...], given: tuple[str, ...],
            have: tuple[str, ...], by_name: bool, table: str) -> str:  # fmt: skip
    """``query`` as the table's columns ``names`` of ``types``: its columns ``have`` matched positionally, by
    the INSERT's column list ``given``, or by name; table columns not given are NULL."""
    if by_name:
        given = have
    elif not given:
        if len(have) != len(names):
            raise BindError(f"INSERT INTO {table}: the query has {len(have)} columns, the table {len(names)} "
                            f"({', '.join(names)})")  # fmt: skip
        given = names
    elif len(given) != len(have):
        raise BindError(f"INSERT INTO {table}: {len(given)} columns named, the query has {len(have)}")
    lower = {n.lower(): n for n in names}
    for g in given:
        if g.lower() not in lower:
            raise BindError(
                f"INSERT INTO {table}: the table has no column {g!r} (columns: {', '.join(names)})"
            )
    source = {lower[g.lower()]: h for g, h in zip(given, have)}
    cols = [
        f"CAST({('q.' + quote(source[n])) if n in source else 'NULL'} AS {t}) AS {quote(n)}"
        for n, t in zip(names, types)
    ]
    return f"SELECT {', '.join(cols)} FROM ({query}) AS q"


def folder_job(
    statement: WriteStatement,
    catalog: Catalog,
    writable: Writable,
    storage_options: Mapping[str, Any] | None,
    describe: Describe,
) -> WriteJob:
    name = statement.target
    if statement.kind == "drop":
        return _drop(statement, catalog, writable, storage_options)
    if statement.kind == "insert":
        return _insert(statement, catalog, writable, storage_options, describe)
    return _create(statement, catalog, writable, storage_options, name)


def _create(statement: WriteStatement, catalog: Catalog, writable: Writable,
            storage_options: Mapping[str, Any] | None, name: str) -> WriteJob:  # fmt: skip
    opts = dict(statement.options)
    if str(opts.get("TABLE_TYPE", "")).lower() == "iceberg":
        raise NotSupportedError("an Iceberg table is created in a catalog: name it catalog.namespace.table")
    if name in catalog:
        if statement.if_exists:
            return DoneJob("CREATE TABLE (exists)", target=name)
        if not statement.replace:
            raise BindError(
                f"table {name} already exists (CREATE OR REPLACE TABLE replaces a table Squall made)"
            )
    location = str(opts.pop("LOCATION", None) or opts.pop("EXTERNAL_LOCATION", None) or f"{name}/")
    opts.pop("TABLE_TYPE", None)
    target = writable.resolve(location if location.endswith("/") else location + "/", "table location")
    for field in statement.partitioning:
        if not field.replace("_", "").isalnum():
            raise NotSupportedError(f"partition transform {field!r} on a folder table: transforms need an Iceberg "
                                    "table (catalog.namespace.t); a folder table is partitioned by columns")  # fmt: skip
    text = str(opts.get("FORMAT", "parquet")).lower() not in ("parquet", "")
    if statement.partitioning and text and "://" in target:
        # Squall reads a text table on an object store from copies of its files, without their folders'
        # key=value columns: the table would lose its partition columns
        raise NotSupportedError(f"CREATE TABLE {name} PARTITIONED BY … WITH (format = "
                                f"'{opts['FORMAT']}') on {target}: partition a Parquet table there")  # fmt: skip
    sink = sink_for(target, storage_options)
    mode = ""
    if statement.replace and sink.exists(target):
        if not sink.is_file(target + MARKER):
            raise UnsafeQueryError(
                f"CREATE OR REPLACE TABLE {name}: {target} was not made by Squall; it stays"
            )
        mode = "OVERWRITE"
    if statement.partitioning:
        opts["PARTITION_BY"] = tuple(statement.partitioning)
    checked = write_options(opts, target, what="CREATE TABLE")
    check_target(sink, target, mode, False, hint=f"CREATE OR REPLACE TABLE {name} replaces a table Squall made "
                 "there; choose another LOCATION, or register the folder to read it")  # fmt: skip
    spec = WriteSpec(target, writable.staging(target), checked.format, checked.passed, checked.partition_by,
                     extension=checked.extension)  # fmt: skip

    def after() -> None:
        marker = {"created_by": "squall", "table": name, "format": checked.format,
                  "partitioned_by": list(checked.partition_by)}  # fmt: skip
        sink.put_bytes(target + MARKER, json.dumps(marker).encode())
        catalog.register(name, target, format=checked.format)

    status = "CREATE OR REPLACE TABLE" if mode else "CREATE TABLE"
    return FilesJob(statement.query, spec, sink, mode, status, after=after, recheck=False)


def _insert(statement: WriteStatement, catalog: Catalog, writable: Writable,
            storage_options: Mapping[str, Any] | None, describe: Describe) -> WriteJob:  # fmt: skip
    name = statement.target
    if name not in catalog:
        raise BindError(f"INSERT INTO {name}: unknown table (CREATE TABLE {name} AS … makes one)")
    fmt = catalog.format_of(name) or ""
    if fmt not in ("parquet", "csv", "json"):
        raise NotSupportedError(
            f"INSERT INTO {name}: a {fmt} table is written through its catalog (catalog.namespace.table)"
            if fmt == "iceberg" else f"INSERT INTO {name}: writing {fmt} tables"
        )  # fmt: skip
    location = catalog.location(name) or ""
    sink = sink_for(location, storage_options)
    if sink.is_file(location) or any(c in location for c in "*?["):
        raise NotSupportedError(
            f"INSERT INTO {name}: its location {location} is a file or a glob, not a folder"
        )
    target = writable.resolve(location.rstrip("/") + "/", f"table {name}'s location")
    names, types = describe(f"SELECT * FROM {quote(name)}")
    have = describe(statement.query)[0]
    query = cast_to(statement.query, names, types, statement.columns, have, statement.by_name, name)
    partition_by = _hive_keys(catalog, name, location)
    opts: dict[str, Any] = {"FORMAT": fmt, "APPEND": True, **_csv_dialect(name, catalog.options_of(name))}
    if partition_by:
        opts["PARTITION_BY"] = partition_by
    checked = write_options(opts, target, what="INSERT")
    spec = WriteSpec(target, writable.staging(target), checked.format, checked.passed, checked.partition_by,
                     extension=checked.extension)  # fmt: skip
    # the table keeps how it was registered (options, scan kind): only what was read of its files goes
    return FilesJob(query, spec, sink, "APPEND", "INSERT", after=lambda: catalog.refresh(name), recheck=False)


#: a CSV table's reading options (``Connection.register(..., options=)``) as the writer's COPY options
_CSV_WRITE = {"delim": "DELIMITER", "quote": "QUOTE", "escape": "ESCAPE", "header": "HEADER",
              "nullstr": "NULLSTR", "dateformat": "DATEFORMAT", "timestampformat": "TIMESTAMPFORMAT"}  # fmt: skip


def _csv_dialect(name: str, read: Mapping[str, Any]) -> dict[str, Any]:
    """The COPY options writing files the way table ``name`` reads them; NotSupportedError when it reads
    files another way than any file written could be (rows to skip)."""
    if read.get("skip"):
        raise NotSupportedError(f"INSERT INTO {name}: the table skips {read['skip']} line(s) of every file")
    return {_CSV_WRITE[k]: v for k, v in read.items() if k in _CSV_WRITE}


def _hive_keys(catalog: Catalog, name: str, location: str) -> tuple[str, ...]:
    """The ``key=value`` folders the table's files are in (the source's partition columns, else the keys
    of its first file's path), so new files go where a reader of the table looks."""
    source = catalog.source(name)
    keys = tuple(source.partition_columns())
    if keys:
        return keys
    root = location.removeprefix("file://").rstrip("/") + "/"
    for path in source.table_info().files:
        folders = path.removeprefix("file://").removeprefix(root).split("/")[:-1]
        return tuple(f.partition("=")[0] for f in folders if "=" in f)
    return ()


def _drop(statement: WriteStatement, catalog: Catalog, writable: Writable,
          storage_options: Mapping[str, Any] | None) -> WriteJob:  # fmt: skip
    name = statement.target
    if name not in catalog:
        if statement.if_exists:
            return DoneJob("DROP TABLE (absent)", target=name)
        raise BindError(f"DROP TABLE {name}: unknown table")
    location = (catalog.location(name) or "").rstrip("/") + "/"
    target = writable.resolve(location, f"table {name}'s location")
    sink = sink_for(target, storage_options)
    if not sink.is_file(target + MARKER):
        raise UnsafeQueryError(f"DROP TABLE {name}: {target} was not made by Squall (no {MARKER}); it stays")

    def action() -> None:
        sink.delete_under(target)
        catalog.unregister(name)

    return DoneJob("DROP TABLE", action, target)
