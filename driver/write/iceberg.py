"""Iceberg tables of a named catalog as write targets: CREATE TABLE AS, INSERT INTO, DROP TABLE.

Iceberg tables
--------------
``CREATE TABLE lake.ns.t [PARTITIONED BY (…) | WITH (partitioning = ARRAY['month(d)', …])] AS query`` makes a
table in the configured catalog ``lake`` (the namespace ``ns`` is created when missing; ``IF NOT EXISTS``
does nothing for a table that exists); ``INSERT INTO lake.ns.t [(columns) | BY NAME] query`` adds rows to
any Iceberg table of a configured catalog; ``DROP TABLE [IF EXISTS] lake.ns.t`` drops a table Squall created
and purges its files. A catalog's tables are writable as soon as the catalog is configured: no ``writable``
location is involved, since the catalog places the table and a statement names no path.

Every rank of the query's last stage writes plain Parquet files (no field ids: the table's name mapping,
``schema.name-mapping.default``, maps columns by name) into the table's own data folder
(``write.data.path``, else ``<location>/data``) under ``<query id>/r<rank>-a<attempt>/``, one folder per
partition value (:mod:`.iceberg_partitions`: ``d``, ``year(d)``, ``month(d)``, ``day(d)``, ``hour(ts)``,
``bucket(N, c)``, ``truncate(W, c)``), so each file holds rows of one partition. No Iceberg reader sees
those files until the driver commits, once every rank succeeded, ONE pyiceberg transaction: the table's
creation (CTAS) and one snapshot adding every accepted file — its partition from its folder or its column
statistics, its metrics (counts, lower/upper bounds) from its footer as pyiceberg reads them. One snapshot per
statement, also when no row was written. A concurrent commit is retried by pyiceberg on the refreshed table
(``commit.retry.num-retries``, 4 by default) as long as the table's schema and partition spec are still the
ones the files were written for; otherwise, or when the retries run out, the statement fails in one line.
After a commit the files of failed or duplicate attempts are deleted; after a failure every file of the
query (and a namespace the statement created) goes: the table is as it was.

Column types are cast safely or refused before anything runs (:mod:`.iceberg_schema`). An INSERT casts the
query to the table's columns (positionally, by its column list, or BY NAME; columns not given are NULL) and
honours the table's current partition spec and ``write.parquet.compression-codec`` (zstd by default, as
Iceberg's). CTAS takes ``format`` (parquet), ``table_type`` (iceberg) and ``compression`` /
``write_compression`` in ``WITH (…)``; a ``location`` is refused (the catalog places its tables).

Squall's tables carry the table properties ``squall.created-by`` and ``squall.location``. Only those may be
replaced (``CREATE OR REPLACE``: one overwrite snapshot that swaps schema, partitioning and every file, the
table's history kept) or dropped (purged: every snapshot's files, then whatever is left under its location).
Any other table is refused in one line and stays as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from squall.driver.catalog.catalogs import flat_name
from squall.driver.catalog.iceberg import METADATA_TABLES
from squall.driver.write.base import Describe, DoneJob, WriteJob
from squall.driver.write.commit import Committed
from squall.driver.write.folder_tables import cast_to
from squall.driver.write.iceberg_partitions import Key, build_spec, check_transform, keys
from squall.driver.write.iceberg_schema import new_schema, table_types
from squall.driver.write.statements import WriteStatement
from squall.errors import BindError, DataError, NotSupportedError, OptionError, UnsafeQueryError
from squall.operators.sinks import Sink, sink_for
from squall.operators.write import query_folder
from squall.plan import WriteSpec

if TYPE_CHECKING:
    from squall.driver.catalog.tables import Catalog

CREATED_BY = "squall.created-by"
LOCATION = "squall.location"
QUERY_ID = "squall.query-id"
CODEC = "write.parquet.compression-codec"
_CODECS = ("zstd", "snappy", "gzip", "brotli", "uncompressed")
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: DuckDB truncates string statistics at this many bytes: longer bounds are not the values
_EXACT_BYTES = 255


@dataclass
class _Target:
    """The table a statement names: ``catalog.namespace.table`` of a configured catalog."""

    catalog: Catalog
    parts: tuple[str, str, str]
    opened: Any  # the pyiceberg catalog

    @property
    def name(self) -> str:
        return ".".join(self.parts)

    @property
    def ident(self) -> tuple[str, str]:
        return (self.parts[1], self.parts[2])

    def load(self) -> Any:
        """The table now, or None when it does not exist."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.opened.load_table(self.ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def forget(self) -> None:
        """Drop what this connection knows of the table (its registration, its cached location)."""
        flat = flat_name(*(p.lower() for p in self.parts))
        for name in (flat, *(f"{flat}${m}" for m in METADATA_TABLES)):
            self.catalog.unregister(name)
        forget = getattr(self.catalog.catalogs, "forget", None)
        if callable(forget):
            forget(self.parts)


def iceberg_job(
    statement: WriteStatement,
    catalog: Catalog,
    describe: Describe,
    storage_options: Mapping[str, Any] | None = None,
) -> WriteJob:
    """The job of a write to an Iceberg table of a named catalog (see module doc); UserError, with nothing
    written, when the statement may not or cannot run."""
    parts = statement.table_parts
    named = catalog.catalogs
    if named is None or parts[0] not in named:
        known = ", ".join(named.names()) if named is not None else ""
        raise DataError(f"unknown catalog {parts[0]} (catalogs: {known or 'none given'})")
    if len(parts) != 3:
        raise NotSupportedError(
            f"table name {statement.target}: name an Iceberg table catalog.namespace.table"
        )
    target = _Target(catalog, (parts[0], parts[1], parts[2]), named.catalog(parts[0]))
    if statement.kind == "drop":
        return _drop(statement, target, storage_options)
    if statement.kind == "insert":
        return _insert(statement, target, describe, storage_options)
    return _create(statement, target, describe, storage_options)


# --- the job -------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """How a job's commit goes: ``begin`` gives the transaction (checked against the metadata the files
    were written for), ``replace`` whether it is a CREATE OR REPLACE (new schema: the name mapping is
    rewritten)."""

    begin: Callable[[], Any]
    replace: bool = False
    status: str = "INSERT"
    on_abort: Callable[[], None] | None = None
    keys: Sequence[Key] = field(default_factory=tuple)


class IcebergJob(WriteJob):
    """CREATE TABLE AS / INSERT INTO an Iceberg table: one pyiceberg commit of the ranks' files."""

    def __init__(self, query: str, spec: WriteSpec, target: _Target, sink: Sink, plan: _Plan) -> None:
        self.query, self.spec, self.target, self.sink, self.plan = query, spec, target, sink, plan
        self._state = "prepared"  # committing: the catalog was called; committed; failed

    @property
    def summary(self) -> str:
        return self.plan.status

    def commit(self, manifest: pa.Table | None, rows: int, query_id: str) -> Committed:
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

        assert manifest is not None and self.spec is not None
        # an empty result's one empty file is not the table's (it goes with the strays)
        accepted = manifest.filter(pc.greater(manifest.column("rows"), 0))
        txn = self.plan.begin()
        meta = txn.table_metadata
        data_files = _data_files(meta, _file_io(self.target, meta), accepted, self.plan.keys)
        _set_name_mapping(txn, self.plan.replace)
        self._state = "committing"
        with _producer(txn, {QUERY_ID: query_id}) as snapshot:
            for data_file in data_files:
                snapshot.append_data_file(data_file)
        try:
            txn.commit_transaction()
        except (CommitFailedException, ValidationException, TableAlreadyExistsError) as err:
            self._state = "failed"
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"{self.plan.status} {self.target.name}: the table changed while the statement ran "
                            f"and the commit could not be retried ({reason}); nothing was written") from None  # fmt: skip
        self._state = "committed"
        paths = accepted.column("path").to_pylist()
        _delete_strays(self.sink, query_folder(self.spec, query_id), paths)
        return Committed(self.target.name, paths, int(pc.sum(accepted.column("rows")).as_py() or 0),
                         int(pc.sum(accepted.column("bytes")).as_py() or 0))  # fmt: skip

    def abort(self, query_id: str) -> None:
        assert self.spec is not None
        if self._state == "committed" or (self._state == "committing" and self._landed(query_id)):
            return  # the files are the table's now (strays are left to the table's orphan clean-up)
        folder = query_folder(self.spec, query_id)
        self.sink.delete_under(folder)
        _prune_local(self.sink, folder, self.spec.target)
        if self.plan.on_abort is not None:
            self.plan.on_abort()

    def _landed(self, query_id: str) -> bool:
        """Whether a commit whose outcome is unknown made a snapshot of this query after all."""
        try:
            table = self.target.load()
            return table is not None and any(
                (s.summary or {}).get(QUERY_ID) == query_id for s in table.snapshots()
            )
        except Exception:
            return True  # unknown: keep the files (an orphan is better than a table missing its data)


def _producer(txn: Any, properties: dict[str, str]) -> Any:
    """The statement's one snapshot: an append of its files (after a replacement's new schema and spec, on
    no parent: the table's main branch was cleared in the same transaction)."""
    return txn.update_snapshot(snapshot_properties=properties).fast_append()


def _set_name_mapping(txn: Any, replace: bool) -> None:
    """Files without field ids are read by name: the table needs a name mapping (the schema's names)."""
    from pyiceberg.table import TableProperties

    meta = txn.table_metadata
    if replace or meta.name_mapping() is None:
        txn.set_properties(
            **{TableProperties.DEFAULT_NAME_MAPPING: meta.schema().name_mapping.model_dump_json()}
        )


def _file_io(target: _Target, meta: Any) -> Any:
    from pyiceberg.io import load_file_io

    return load_file_io({**target.opened.properties, **meta.properties}, meta.location)


def _delete_strays(sink: Sink, folder: str, committed: Sequence[str]) -> None:
    """Delete the query's files that were not committed (failed, retried or duplicate attempts)."""
    keep = {p.removeprefix("file://") for p in committed}
    strays = [p for p in sink.list_under(folder) if p.removeprefix("file://") not in keep]
    sink.delete(strays)
    if sink.scheme == "file":
        for root, _dirs, _names in sorted(os.walk(folder.removeprefix("file://")), reverse=True):
            try:
                os.rmdir(root)  # only empty folders go
            except OSError:
                pass


def _prune_local(sink: Sink, folder: str, stop: str) -> None:
    """Remove empty local folders from ``folder`` up to (and including) ``stop``."""
    if sink.scheme != "file":
        return
    path = folder.removeprefix("file://").rstrip("/")
    stop = stop.removeprefix("file://").rstrip("/")
    while path.startswith(stop):
        try:
            if os.path.exists(path):
                os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)


# --- data files ------------------------------------------------------------------------------------------


def _data_files(meta: Any, io: Any, files: pa.Table, spec_keys: Sequence[Key]) -> list[Any]:
    """A pyiceberg DataFile per written file: metrics from its footer as pyiceberg computes them (the
    table's metrics modes), its partition from its folders (exact keys) or its column statistics."""
    from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping

    schema, spec = meta.schema(), meta.spec()
    plan = compute_statistics_plan(schema, meta.properties)
    mapping = parquet_path_to_id_mapping(schema)
    sources = {schema.find_column_name(f.source_id) for f in spec.fields}
    full = {f"write.metadata.metrics.column.{name}": "full" for name in sources}
    partition_plan = compute_statistics_plan(schema, {**meta.properties, **full})
    paths = files.column("path").to_pylist()
    relatives = files.column("relative").to_pylist()
    sizes = files.column("bytes").to_pylist()

    def one(i: int) -> Any:
        return _data_file(
            meta, io, paths[i], relatives[i], sizes[i], spec_keys, (plan, partition_plan, mapping)
        )

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(paths)))) as pool:
        return list(pool.map(one, range(len(paths))))


def _data_file(meta: Any, io: Any, path: str, relative: str, size: int, spec_keys: Sequence[Key],
               plans: tuple[Any, Any, Any]) -> Any:  # fmt: skip
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    with io.new_input(path).open() as stream:
        footer = pq.read_metadata(stream)
    plan, partition_plan, mapping = plans
    stats = data_file_statistics_from_parquet_metadata(footer, plan, mapping)
    bounds = data_file_statistics_from_parquet_metadata(footer, partition_plan, mapping)
    partition = _partition(meta, io, path, relative, spec_keys, bounds)
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
        file_size_in_bytes=int(size), sort_order_id=None, spec_id=meta.default_spec_id, equality_ids=None,
        key_metadata=None, **stats.to_serialized_dict(),
    )  # fmt: skip


def _partition(meta: Any, io: Any, path: str, relative: str, spec_keys: Sequence[Key], bounds: Any) -> Any:
    """The partition Record of one file: an exact key's folder value, else the transform of the source
    column's bounds (read from the file when the footer's bounds are not the values)."""
    from pyiceberg.partitioning import partition_record_value
    from pyiceberg.typedef import Record

    schema, spec = meta.schema(), meta.spec()
    folders = dict(part.split("=", 1) for part in relative.split("/")[:-1] if "=" in part)
    by_field = dict(zip([f.field_id for f in spec.fields if str(f.transform) != "void"], spec_keys))
    values: list[Any] = []
    for pf in spec.fields:
        key = by_field.get(pf.field_id)
        raw = unquote(folders[key.name]) if key is not None and key.name in folders else _HIVE_NULL
        if key is None or raw == _HIVE_NULL:
            values.append(None)
            continue
        source = schema.find_field(pf.source_id)
        if key.exact:
            value = int(raw)
            values.append(bool(value) if str(source.field_type) == "boolean" else value)
            continue
        low, high = _bounds(io, path, source, bounds)
        transform = pf.transform.transform(source.field_type)
        low, high = (transform(partition_record_value(pf, v, schema)) for v in (low, high))
        if low != high:
            raise DataError(
                f"{path}: rows of several partitions of {pf.name} in one file ({low!r}, {high!r})"
            )
        values.append(low)
    return Record(*values)


def _bounds(io: Any, path: str, source: Any, stats: Any) -> tuple[Any, Any]:
    """The lowest and highest value of a partition's source column in a file (every value maps to the same
    partition): the footer's bounds when they are the values, else one value read from the file."""
    agg = stats.column_aggregates.get(source.field_id)
    low, high = (agg.current_min, agg.current_max) if agg is not None else (None, None)
    exact = (
        low is not None
        and high is not None
        and all(
            len(v.encode() if isinstance(v, str) else v) < _EXACT_BYTES
            for v in (low, high)
            if isinstance(v, (str, bytes))
        )
    )
    if exact:
        return low, high
    with io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        for group in range(parquet.num_row_groups):
            column = pc.drop_null(parquet.read_row_group(group, columns=[source.name]).column(0))
            if len(column):
                value = column[0].as_py()
                return value, value
    return None, None


# --- CREATE TABLE AS -------------------------------------------------------------------------------------


def _create_options(statement: WriteStatement) -> str:
    """The compression codec of a CTAS's ``WITH (…)``; OptionError for anything an Iceberg CTAS cannot take."""
    codec = "zstd"
    for key, value in statement.options.items():
        text = str(value).lower()
        if key == "FORMAT" and text != "parquet":
            raise OptionError(f"CREATE TABLE {statement.target}: Squall writes Iceberg tables as Parquet, "
                              f"not {value}")  # fmt: skip
        elif key == "TABLE_TYPE" and text != "iceberg":
            raise OptionError(f"CREATE TABLE {statement.target}: a catalog's tables are Iceberg tables, "
                              f"not {value}")  # fmt: skip
        elif key in ("COMPRESSION", "WRITE_COMPRESSION", "PARQUET_COMPRESSION"):
            if text not in _CODECS:
                raise OptionError(f"CREATE TABLE {statement.target}: compression {value!r}: one of "
                                  f"{', '.join(_CODECS)}")  # fmt: skip
            codec = text
        elif key in ("LOCATION", "EXTERNAL_LOCATION"):
            raise OptionError(f"CREATE TABLE {statement.target}: the catalog places its tables; drop "
                              f"{key.lower()} (or write a folder table: CREATE TABLE t WITH (location = …))")  # fmt: skip
        elif key not in ("FORMAT", "TABLE_TYPE"):
            raise OptionError(f"CREATE TABLE {statement.target}: option {key.lower()} is not supported "
                              "(format, table_type, compression, partitioning)")  # fmt: skip
    return codec


def _create(statement: WriteStatement, target: _Target, describe: Describe,
            storage_options: Mapping[str, Any] | None) -> WriteJob:  # fmt: skip
    codec = _create_options(statement)
    existing = target.load()
    if existing is not None:
        if statement.if_exists:
            return DoneJob("CREATE TABLE (exists)", target=target.name)
        if not statement.replace:
            raise BindError(f"table {target.name} already exists (CREATE OR REPLACE TABLE replaces a table "
                            "Squall made)")  # fmt: skip
        _check_ours(existing, f"CREATE OR REPLACE TABLE {target.name}")
    names, types = describe(statement.query)
    schema, written = new_schema(names, types, target.name)
    query = statement.query
    if [t.replace(" ", "").upper() for t in written] != [t.replace(" ", "").upper() for t in types]:
        query = cast_to(query, names, written, (), names, False, target.name)
    if existing is not None:
        return _replace(query, statement, target, existing, schema, codec, storage_options)
    spec = build_spec(statement.partitioning, schema)
    created = _ensure_namespace(target)
    try:
        txn = target.opened.create_table_transaction(
            target.ident, schema, partition_spec=spec, properties={CREATED_BY: "squall", CODEC: codec}
        )
    except Exception as err:
        if created:
            _drop_namespace(target)
        raise DataError(f"CREATE TABLE {target.name}: {str(err).splitlines()[0]}") from None
    meta = txn.table_metadata
    txn.set_properties(**{LOCATION: meta.location})
    spec_keys = keys(meta.spec(), meta.schema(), names)
    write = _write_spec(meta.location, meta.properties, spec_keys, codec)
    on_abort = (lambda: _drop_namespace(target)) if created else None
    plan = _Plan(lambda: txn, status="CREATE TABLE", on_abort=on_abort, keys=spec_keys)
    return IcebergJob(query, write, target, sink_for(write.staging, storage_options), plan)


def _replace(query: str, statement: WriteStatement, target: _Target, existing: Any, schema: Any, codec: str,
             storage_options: Mapping[str, Any] | None) -> WriteJob:  # fmt: skip
    """CREATE OR REPLACE of a Squall table: a new schema and spec (fresh ids), every file swapped, in one
    overwrite snapshot."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.schema import Schema, assign_fresh_schema_ids
    from pyiceberg.table.update import (
        AddPartitionSpecUpdate,
        AddSchemaUpdate,
        AssertCurrentSchemaId,
        AssertDefaultSpecId,
        AssertLastAssignedFieldId,
        AssertLastAssignedPartitionId,
        AssertRefSnapshotId,
        RemoveSnapshotRefUpdate,
        SetCurrentSchemaUpdate,
        SetDefaultSpecUpdate,
        SetPropertiesUpdate,
    )  # fmt: skip

    meta = existing.metadata
    ids = count(meta.last_column_id + 1)
    fresh = assign_fresh_schema_ids(schema, lambda: next(ids))
    fresh = Schema(*fresh.fields, schema_id=max(s.schema_id for s in meta.schemas) + 1)
    spec = build_spec(statement.partitioning, fresh, first_id=(meta.last_partition_id or 999) + 1,
                      spec_id=max(s.spec_id for s in meta.partition_specs) + 1)  # fmt: skip
    uuid = meta.table_uuid
    # as Iceberg's REPLACE TABLE: new schema and spec, the main branch cleared (older snapshots stay in the
    # history), the new files appended on no parent; the requirements hold the table to what was prepared
    updates = (
        AddSchemaUpdate.model_validate({"schema": fresh}),
        SetCurrentSchemaUpdate.model_validate({"schema-id": -1}),
        AddPartitionSpecUpdate.model_validate({"spec": spec}),
        SetDefaultSpecUpdate.model_validate({"spec-id": -1}),
        SetPropertiesUpdate.model_validate({"updates": {CODEC: codec}}),
        *(
            [RemoveSnapshotRefUpdate.model_validate({"ref-name": "main"})]
            if meta.current_snapshot_id is not None
            else []
        ),
    )
    requirements = (
        AssertRefSnapshotId.model_validate({"snapshot-id": meta.current_snapshot_id, "ref": "main"}),
        AssertCurrentSchemaId.model_validate({"current-schema-id": meta.current_schema_id}),
        AssertDefaultSpecId.model_validate({"default-spec-id": meta.default_spec_id}),
        AssertLastAssignedFieldId.model_validate({"last-assigned-field-id": meta.last_column_id}),
        AssertLastAssignedPartitionId.model_validate({"last-assigned-partition-id": meta.last_partition_id}),
    )

    def begin() -> Any:
        table = target.load()
        txn = table.transaction() if table is not None and table.metadata.table_uuid == uuid else None
        try:
            if txn is None:
                raise CommitFailedException("dropped or replaced")
            txn._apply(updates, requirements)
        except CommitFailedException:
            raise DataError(f"CREATE OR REPLACE TABLE {target.name}: the table changed while the statement ran; "
                            "nothing was written") from None  # fmt: skip
        return txn

    spec_keys = keys(spec, fresh, fresh.column_names)
    write = _write_spec(existing.location(), meta.properties, spec_keys, codec)
    plan = _Plan(begin, replace=True, status="CREATE OR REPLACE TABLE", keys=spec_keys)
    return IcebergJob(query, write, target, sink_for(write.staging, storage_options), plan)


def _ensure_namespace(target: _Target) -> bool:
    """Create the target's namespace when missing; whether this statement created it."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    namespace = target.parts[1]
    try:
        if any(".".join(ns) == namespace for ns in target.opened.list_namespaces()):
            return False
        target.opened.create_namespace(namespace)
        return True
    except NamespaceAlreadyExistsError:
        return False


def _drop_namespace(target: _Target) -> None:
    """Drop a namespace the statement created, when it still holds no table."""
    try:
        if not target.opened.list_tables(target.parts[1]):
            target.opened.drop_namespace(target.parts[1])
    except Exception:
        pass


# --- INSERT INTO -----------------------------------------------------------------------------------------


def _insert(statement: WriteStatement, target: _Target, describe: Describe,
            storage_options: Mapping[str, Any] | None) -> WriteJob:  # fmt: skip
    from pyiceberg.table.update import AssertCurrentSchemaId, AssertDefaultSpecId

    table = target.load()
    if table is None:
        target.catalog.catalogs.load_table(*target.parts)  # its one-line DataError (no namespace, no table)
        raise DataError(f"INSERT INTO {target.name}: unknown table")
    meta = table.metadata
    schema, spec = table.schema(), table.spec()
    names, types = table_types(schema, target.name)
    required = [f.name for f in schema.fields if f.required]
    have = describe(statement.query)[0]
    query = cast_to(statement.query, names, types, statement.columns, have, statement.by_name, target.name)
    if required:
        query = _not_null(query, names, required, target.name)
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        check_transform(str(pf.transform).split("[")[0], source.name, source.field_type, pf.transform)
    spec_keys = keys(spec, schema, names)
    codec = str(meta.properties.get(CODEC, "zstd")).lower()
    write = _write_spec(table.location(), meta.properties, spec_keys, codec if codec in _CODECS else "zstd")
    uuid, schema_id, spec_id = meta.table_uuid, meta.current_schema_id, meta.default_spec_id

    def begin() -> Any:
        now = target.load()
        if now is None or now.metadata.table_uuid != uuid:
            raise DataError(
                f"INSERT INTO {target.name}: the table was dropped or replaced while the statement ran"
            )
        if (now.metadata.current_schema_id, now.metadata.default_spec_id) != (schema_id, spec_id):
            raise DataError(f"INSERT INTO {target.name}: the table's schema or partitioning changed while the "
                            "statement ran; nothing was written")  # fmt: skip
        txn = now.transaction()
        # kept through pyiceberg's retries: a concurrent schema or spec change fails the commit
        held = (AssertCurrentSchemaId.model_validate({"current-schema-id": schema_id}),
                AssertDefaultSpecId.model_validate({"default-spec-id": spec_id}))  # fmt: skip
        txn._apply((), held)
        return txn

    plan = _Plan(begin, status="INSERT", keys=spec_keys)
    return IcebergJob(query, write, target, sink_for(write.staging, storage_options), plan)


def _not_null(query: str, names: Sequence[str], required: Sequence[str], table: str) -> str:
    """``query`` failing at run time on a NULL in a required column."""
    from squall.driver.write.iceberg_schema import quote

    cols = [
        f"CASE WHEN q.{quote(n)} IS NULL THEN error('INSERT INTO {table}: NULL in the required column "
        f"{n.replace(chr(39), chr(39) * 2)}') ELSE q.{quote(n)} END AS {quote(n)}"
        if n in required else f"q.{quote(n)}"
        for n in names
    ]  # fmt: skip
    return f"SELECT {', '.join(cols)} FROM ({query}) AS q"


def _write_spec(
    location: str, properties: Mapping[str, str], spec_keys: Sequence[Key], codec: str
) -> WriteSpec:
    """Where and how the ranks write: the table's data folder, one folder per partition key."""
    data = str(properties.get("write.data.path") or f"{location.rstrip('/')}/data")
    for scheme in ("s3a://", "s3n://"):
        data = "s3://" + data.removeprefix(scheme) if data.startswith(scheme) else data
    return WriteSpec(
        target=location,
        staging=data,
        format="parquet",
        options=(("COMPRESSION", f"'{codec}'"),),
        partition_exprs=tuple((k.name, k.sql) for k in spec_keys),
        table_format="iceberg",
    )


# --- DROP TABLE --------------------------------------------------------------------------------------------


def _check_ours(table: Any, what: str) -> None:
    if table.properties.get(CREATED_BY) != "squall":
        raise UnsafeQueryError(
            f"{what}: the table was not created by Squall (no {CREATED_BY} property); it stays"
        )


def _drop(statement: WriteStatement, target: _Target, storage_options: Mapping[str, Any] | None) -> WriteJob:
    table = target.load()
    if table is None:
        if statement.if_exists:
            return DoneJob("DROP TABLE (absent)", target=target.name)
        target.catalog.catalogs.load_table(*target.parts)  # its one-line DataError
        raise DataError(f"DROP TABLE {target.name}: unknown table")
    _check_ours(table, f"DROP TABLE {target.name}")
    location = table.location().rstrip("/")

    def action() -> None:
        target.opened.purge_table(target.ident)
        if table.properties.get(LOCATION, "").rstrip("/") == location:  # the folder Squall made for it
            sink = sink_for(location, storage_options)
            sink.delete_under(location + "/")
            _prune_local(sink, location, location)
        target.forget()

    return DoneJob("DROP TABLE", action, target.name)
