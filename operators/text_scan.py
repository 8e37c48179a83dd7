"""The ``text`` scan kind, worker side: CSV and newline-delimited JSON files read by DuckDB.

A ``text`` scan reads whole files (one split per file; no byte ranges). For each file
of the rank's splits, :func:`read_text`:

1. makes the file local: a local path is read where it is (its bytes counted on the
   Storage as one ``get``); an object (``s3://``) is fetched through the Storage
   (parallel ranged GETs, counted) into a temporary file of the same suffix, removed
   after the read;
2. reads it with a private DuckDB connection (``read_csv`` / ``read_json(format=
   'newline_delimited')``, the compression named by the suffix), its columns typed as
   the table's (the DuckDB types the driver sniffed, ``scan_options["types"]``): each
   file's own dialect is sniffed, its values parsed straight into the table's types
   (DuckDB's ``union_by_name``: a column the file lacks is NULL);
3. refuses a file holding a column the table does not have (the driver sniffed only
   the first files of a large table) and any DuckDB error, in one line naming the file.

The paths come from the plan (``ScanInput.splits``), never from user SQL: the stage SQL
runs in the locked sandbox (:mod:`squall.operators.duck`), which cannot read files.
Counted on the Storage: ``files`` (one per file read), ``get`` and the bytes fetched
(compressed bytes, as stored).

The helpers :func:`compression_of`, :func:`reader_sql` and :func:`local_copy` are shared
with the catalog half (:mod:`squall.driver.catalog.text`), which sniffs the schema.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from squall.errors import DataError
from squall.operators.duck import ident
from squall.operators.scan import scan_schema
from squall.operators.storage import Storage, scheme_of
from squall.plan import ScanInput

#: the parts an object is fetched in (parallel ranged GETs)
PART_BYTES = 16 * 1024 * 1024
#: DuckDB's name of each compression suffix
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}
#: the table function of each text format
READERS = {"csv": "read_csv", "json": "read_json"}
#: read_csv options a table may set (DuckDB's names), everything else is sniffed
CSV_OPTIONS = ("delim", "quote", "escape", "header", "skip", "nullstr", "dateformat", "timestampformat")


def compression_of(path: str) -> str:
    """DuckDB's compression of a file by its suffix: ``gzip``, ``zstd`` or ``none``."""
    return next((c for suffix, c in COMPRESSIONS.items() if path.endswith(suffix)), "none")


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _struct(items: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in items.items()) + "}"


def reader_sql(
    fmt: str,
    paths: Sequence[str],
    *,
    compression: str,
    options: Mapping[str, object] | None = None,
    types: Mapping[str, str] | None = None,
    union_by_name: bool = False,
) -> str:
    """The DuckDB table function call reading local ``paths`` of format ``fmt`` (``csv``/``json``).

    ``types``: DuckDB types of (some of) the columns (CSV: ``types``, only columns the file has;
    JSON: ``columns``, exactly those keys, missing ones NULL)."""
    files = "[" + ", ".join(_literal(p) for p in paths) + "]"
    args = [files, f"compression={_literal(compression)}"]
    if fmt == "json":
        args.append("format='newline_delimited'")
        if types:
            args.append(f"columns={_struct(types)}")
    else:
        args += [f"{k}={_literal(v)}" for k, v in (options or {}).items() if k in CSV_OPTIONS]
        if types:
            args.append(f"types={_struct(types)}")
    if union_by_name:
        args.append("union_by_name=true")
    return f"{READERS[fmt]}({', '.join(args)})"


def connection(temp_directory: str | None = None) -> duckdb.DuckDBPyConnection:
    """A private DuckDB connection for reading text files (home and temp folders under the temp dir)."""
    where = temp_directory or tempfile.gettempdir()
    return duckdb.connect(config={"home_directory": where, "temp_directory": where})


def one_line(path: str, exc: BaseException, local: str | None = None) -> str:
    """A DuckDB error as one line naming ``path`` (the temporary copy's name replaced)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if local and local != path:
        text = text.replace(local, path)
    return f"cannot read {path}: {text}"


@contextmanager
def local_copy(storage: Storage, path: str, size: int | None = None) -> Iterator[str]:
    """A local path holding the bytes of file ``path``: the file itself when local (its bytes counted as
    one ``get``), else a temporary copy fetched through ``storage`` (removed on exit)."""
    if scheme_of(path) == "file":
        local = path.removeprefix("file://")
        storage.count("get", 1, os.path.getsize(local) if os.path.exists(local) else 0)
        yield local
        return
    first, size = storage.read_prefix(path, PART_BYTES) if size is None else (b"", size)
    parts = [(lo, min(lo + PART_BYTES, size)) for lo in range(len(first), size, PART_BYTES)]
    name = path.rpartition("/")[2]
    suffix = next((s for s in (".gz", ".zst") if name.endswith(s)), "")
    fd, local = tempfile.mkstemp(prefix="squall-text-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(first)
            for body in storage.read_ranges(path, parts) if parts else []:
                out.write(body)
        yield local
    finally:
        os.unlink(local)


def _read_file(
    con: duckdb.DuckDBPyConnection, fmt: str, path: str, local: str, options: Mapping[str, object],
    types: Mapping[str, str], columns: Sequence[str],
) -> pa.Table:  # fmt: skip
    """``columns`` of one local text file, typed as ``types`` (a column the file lacks: NULL).

    The file is sniffed once; when its own types are the table's for the columns read, that read is
    used, else the file is read again with the table's types (parsed straight into them)."""
    compression = compression_of(path)
    try:
        rel = con.sql(f"SELECT * FROM {reader_sql(fmt, [local], compression=compression, options=options)}")
        own = dict(zip(rel.columns, (str(t) for t in rel.types)))
        extra = [n for n in own if n not in types]
        if extra:
            raise DataError(
                f"cannot read {path}: column {extra[0]} is not in the table (sniffed from its first files; "
                "register the files apart)"
            )
        present = {c: types[c] for c in columns if c in own}
        if any(own[c] != t for c, t in present.items()):
            call = reader_sql(fmt, [local], compression=compression, options=options, types=present)
            rel = con.sql(f"SELECT * FROM {call}")
        if not columns:
            return pa.table({"n": pa.nulls(int(rel.count("*").fetchall()[0][0]))}).select([])
        select = ", ".join(
            ident(c) if c in present else f"CAST(NULL AS {types[c]}) AS {ident(c)}" for c in columns
        )
        return rel.project(select).to_arrow_table()
    except duckdb.Error as exc:
        raise DataError(one_line(path, exc, local)) from None


def read_text(spec: ScanInput, rank: int, storage_of: Callable[[str], Storage]) -> pa.Table:
    """The ``text`` scan kind: rows of ``spec``'s files for ``rank``, columns renamed to the stage's names."""
    schema = scan_schema(spec)
    opts = dict(spec.scan_options)
    fmt = opts.get("format", "csv")
    types: dict[str, str] = json.loads(opts.get("types", "{}"))
    options: dict[str, object] = json.loads(opts.get("options", "{}"))
    sources = [source for source, _name in spec.columns]
    tables = []
    with connection() as con:
        for split in spec.splits_for(rank):
            storage = storage_of(split.path)
            storage.count("files")
            with local_copy(storage, split.path) as local:
                table = _read_file(con, fmt, split.path, local, options, types, list(dict.fromkeys(sources)))
            table = table.select(sources).rename_columns(schema.names)
            tables.append(_cast(table, schema, split.path))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def _cast(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    if table.schema == schema:
        return table
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(f"cannot read {path} as the table's types: {exc}".splitlines()[0]) from None
