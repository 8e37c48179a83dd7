"""The ``iceberg`` table source: an Iceberg table planned by pyiceberg, its data files read by the workers.

A table is a table folder (``<t>/metadata/*.metadata.json``: the version ``metadata/version-hint.text`` names,
else the newest metadata file) or a table of a pyiceberg catalog (:mod:`.catalogs` opens those with a
``loader``). pyiceberg reads metadata and manifests only; the workers read the Parquet data files as any
other (:mod:`.iceberg_files` says how each file maps to the table).

- **One snapshot per source**: the table's metadata is loaded once, on first use, and the current snapshot
  (or the one :meth:`IcebergSource.at` travelled to) is pinned; the catalog keeps one source per table and
  drops it when :meth:`IcebergSource.stamp` (the metadata file's location) changes, so the next query sees
  a new commit and a running one never mixes two.
- **Pruning**: :meth:`IcebergSource.scan_info` plans ``table.scan(row_filter, snapshot_id).plan_files()`` with
  the scan's filters translated (:mod:`.iceberg_filters`): manifests, partitions and file column statistics
  rule files out before any is opened; what was pruned is said in ``TableInfo.source_notes``.
- **Metadata tables**: :meth:`IcebergSource.metadata_table` gives ``$snapshots``, ``$files``, ``$partitions``,
  ``$history``, ``$manifests`` and ``$refs`` as pyiceberg's ``table.inspect`` makes them.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from squall.driver.catalog.iceberg_files import FilePlanner, arrow_schema, check_deletes, read_footers
from squall.driver.catalog.iceberg_filters import row_filter
from squall.driver.catalog.info import RowGroup, TableInfo
from squall.driver.catalog.source import FilterSupport, SourceFile, TableSource, require_lake
from squall.errors import DataError, NotSupportedError
from squall.operators.storage import Storage, scheme_of, storage_for
from squall.plan import FileRead

#: metadata tables (``"<t>$<kind>"``, as Trino and Athena name them) -> pyiceberg's ``table.inspect`` method
METADATA_TABLES = {
    "snapshots": "snapshots",
    "files": "files",
    "partitions": "partitions",
    "history": "history",
    "manifests": "manifests",
    "refs": "refs",
}
_VERSION = re.compile(r"^(?:v)?(\d+)(?:[-.].*)?\.metadata\.json$")


def io_properties(storage: Storage) -> dict[str, str]:
    """pyiceberg FileIO properties matching a Squall storage's options (S3 endpoint and region)."""
    options = storage.options
    out = {}
    endpoint = options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        out["s3.endpoint"] = str(endpoint)
    region = options.get("region") or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    if region:
        out["s3.region"] = str(region)
    return out


def newest_metadata(storage: Storage, location: str) -> str:
    """The metadata file of a table folder: the one ``metadata/version-hint.text`` names, else the highest
    version; DataError when the folder holds none."""
    folder = location.rstrip("/") + "/metadata/"
    entries = storage.list_folder(folder.removeprefix("file://"), recursive=False) or []
    names = {e.path.rpartition("/")[2]: e for e in entries}
    if "version-hint.text" in names:
        hint = names["version-hint.text"]
        text = storage.read_ranges(hint.path, [(0, hint.size)])[0].decode().strip()
        name = (
            f"v{text}.metadata.json"
            if text.isdecimal()
            else text.removesuffix(".metadata.json") + ".metadata.json"
        )
        if name not in names:
            raise DataError(f"{hint.path} names {name}, which is not in {folder}")
        return names[name].path
    versions = [(int(m.group(1)), n) for n in names if (m := _VERSION.match(n))]
    if not versions:
        raise DataError(f"no Iceberg metadata (metadata/*.metadata.json) at {location}")
    return names[max(versions)[1]].path


class IcebergSource(TableSource):
    """One Iceberg table at one snapshot (see the module doc)."""

    kind = "iceberg"

    def __init__(
        self,
        name: str,
        location: str,
        storage: Storage,
        *,
        loader: Callable[[], Any] | None = None,
        table: Any = None,
        snapshot_id: int | None = None,
    ) -> None:
        super().__init__(name, location, storage)
        self._loader = loader  # a catalog's table (else the folder's newest metadata)
        self._lock = threading.RLock()
        self._table = table
        self._snapshot_id = snapshot_id
        self._travelled = snapshot_id is not None
        self._footers: dict[str, pq.FileMetaData] = {}
        self._others: dict[str, Storage] = {}  # storages of data files on another scheme than the table's
        self._others_lock = threading.Lock()
        self._sizes: dict[str, int] = {}  # data file -> its size in bytes (from the manifests)
        self._info: TableInfo | None = None

    # --- the pinned table and snapshot ---

    def iceberg_table(self) -> Any:
        """The pyiceberg table (metadata loaded once per source)."""
        with self._lock:
            if self._table is None:
                self._table = self._load()
                if not self._travelled:
                    current = self._table.current_snapshot()
                    self._snapshot_id = current.snapshot_id if current is not None else None
            return self._table

    def _load(self) -> Any:
        if self._loader is not None:
            return self._loader()
        require_lake(f"the Iceberg table at {self.location}", "pyiceberg")
        from pyiceberg.table import StaticTable

        metadata = newest_metadata(self.storage, self.location)
        try:
            return StaticTable.from_metadata(metadata, io_properties(self.storage))
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read Iceberg metadata {metadata}: {exc}".splitlines()[0]) from None

    def snapshot_id(self) -> int | None:
        """The pinned snapshot's id (None: the table has no snapshot yet)."""
        self.iceberg_table()
        return self._snapshot_id

    def _schema(self) -> Any:
        table = self.iceberg_table()
        if self._travelled and self._snapshot_id is not None:  # the schema the snapshot was written with
            snapshot = table.metadata.snapshot_by_id(self._snapshot_id)
            if snapshot is not None and snapshot.schema_id is not None:
                schemas = {s.schema_id: s for s in table.metadata.schemas}
                if snapshot.schema_id in schemas:
                    return schemas[snapshot.schema_id]
        return table.schema()

    def stamp(self) -> Hashable | None:
        """The location of the table's current metadata file (one catalog call or one folder listing);
        a source that travelled in time: its snapshot id."""
        if self._travelled:
            return ("snapshot", self._snapshot_id)
        if self._loader is not None:
            try:
                return self._loader().metadata_location
            except DataError:  # the catalog cannot say now: the queries that read the table will say why
                return ()
        uncounted = (
            storage_for(self.location, self.storage.options) if scheme_of(self.location) == "file" else None
        )
        try:
            return newest_metadata(uncounted or self.storage, self.location)
        except DataError:  # said when the table is read
            return ()

    # --- TableSource ---

    def files(self) -> tuple[SourceFile, ...]:
        info = self.table_info()
        return tuple(SourceFile(p, self._sizes.get(p, 0)) for p in info.files)

    def file_schema(self, path: str) -> pa.Schema:
        return self.storage.read_metadata(path).schema.to_arrow_schema().remove_metadata()

    def schema(self) -> pa.Schema:
        return arrow_schema(self._schema())

    def statistics(self) -> tuple[RowGroup, ...]:
        return self.table_info().row_groups

    def table_info(self) -> TableInfo:
        """Every data file of the pinned snapshot."""
        with self._lock:
            if self._info is None:
                self._info = self._plan(None, [])
            return self._info

    def supports_filters(self, filters: Sequence[exp.Expression]) -> list[FilterSupport]:
        """INEXACT for the filters that translate to an Iceberg row filter (see :mod:`.iceberg_filters`)."""
        types = self._types()
        return [
            FilterSupport.INEXACT if row_filter([f], types)[1] else FilterSupport.UNSUPPORTED for f in filters
        ]

    def scan_info(self, filters: Sequence[exp.Expression]) -> TableInfo:
        """The files whose partitions and column statistics may hold rows passing ``filters``."""
        expression, pushed = row_filter(filters, self._types())
        if not pushed:
            return self.table_info()
        return self._plan(expression, pushed)

    def _types(self) -> dict[str, Any]:
        """Column -> Iceberg type of the columns filters may be pushed on: those named alike in the current
        schema (pyiceberg binds a row filter to it, also when scanning an older snapshot)."""
        current = {(f.name, f.field_id) for f in self.iceberg_table().schema().fields}
        return {f.name: f.field_type for f in self._schema().fields if (f.name, f.field_id) in current}

    def at(self, version: int | None = None, timestamp: datetime | None = None) -> IcebergSource:
        """The table at snapshot ``version`` or at the snapshot current at ``timestamp`` (DataError for an
        unknown snapshot id or a time before the first snapshot)."""
        if (version is None) == (timestamp is None):
            raise DataError(f"table {self.name}: give a snapshot id or a timestamp to travel to")
        table = self.iceberg_table()
        if version is not None:
            if table.metadata.snapshot_by_id(int(version)) is None:
                known = ", ".join(str(s.snapshot_id) for s in table.metadata.snapshots[-5:]) or "none"
                raise DataError(f"Iceberg table {self.name} has no snapshot {version} (latest: {known})")
            snapshot_id = int(version)
        else:
            assert timestamp is not None
            when = timestamp if timestamp.tzinfo is not None else timestamp.replace(tzinfo=UTC)
            snapshot = table.snapshot_as_of_timestamp(int(when.timestamp() * 1000))
            if snapshot is None:
                raise DataError(
                    f"Iceberg table {self.name} has no snapshot at or before {timestamp.isoformat()}"
                )
            snapshot_id = snapshot.snapshot_id
        return IcebergSource(
            self.name, self.location, self.storage, loader=self._loader, table=table, snapshot_id=snapshot_id
        )

    # --- planning ---

    def _plan(self, expression: Any, pushed: list[str]) -> TableInfo:
        table = self.iceberg_table()
        schema = self._schema()
        notes = [("format", "iceberg"), ("snapshot", str(self._snapshot_id))]
        if self._snapshot_id is None:  # a table with no snapshot: no files
            return TableInfo(
                self.name, self.location, (), arrow_schema(schema), (), source_notes=tuple(notes)
            )
        from pyiceberg.expressions import AlwaysTrue

        scan = table.scan(row_filter=expression if expression is not None else AlwaysTrue(),
                          snapshot_id=self._snapshot_id, case_sensitive=True)  # fmt: skip
        try:
            tasks = sorted(scan.plan_files(), key=lambda t: t.file.file_path)
        except ValueError as exc:
            if "equality deletes" in str(exc):
                raise NotSupportedError(
                    f"Iceberg table {self.name}: equality delete files are not read yet"
                ) from None
            raise DataError(f"Iceberg table {self.name}: {exc}".splitlines()[0]) from None
        check_deletes(self.name, tasks)
        with self._lock:
            footers = read_footers([t.file.file_path for t in tasks], self._read_footer, self._footers)
        mapping = _name_mapping(table, schema)
        planner = FilePlanner(schema, table.metadata.specs(), mapping)
        groups: list[RowGroup] = []
        reads: dict[str, FileRead] = {}
        for task in tasks:
            file_groups, reads[task.file.file_path] = planner.plan_file(task, footers[task.file.file_path])
            groups.extend(file_groups)
        deletes = {d for t in tasks for d in t.delete_files}
        snapshot = table.metadata.snapshot_by_id(self._snapshot_id)
        total = (snapshot.summary or {}).get("total-data-files") if snapshot is not None else None
        notes.append(("files", f"{len(tasks)} of {total}" if total is not None else str(len(tasks))))
        if pushed:
            notes.append(("pruned by", " AND ".join(pushed)))
        if deletes:
            notes.append(("position delete files", str(len(deletes))))
        paths = tuple(t.file.file_path for t in tasks)
        self._sizes.update({t.file.file_path: t.file.file_size_in_bytes for t in tasks})
        return TableInfo(
            self.name,
            self.location,
            paths,
            planner.arrow,
            tuple(groups),
            {p: footers[p] for p in paths},
            file_reads=reads,
            source_notes=tuple(notes),
        )

    def _read_footer(self, path: str) -> pq.FileMetaData:
        """One data file's footer, through the table's storage (or one of the file's scheme: metadata may name
        files anywhere)."""
        if scheme_of(path) == scheme_of(self.location):
            return self.storage.read_metadata(path)
        with self._others_lock:  # (not self._lock: footers are read in threads while it is held)
            other = self._others.get(scheme_of(path))
            if other is None:
                other = self._others[scheme_of(path)] = storage_for(path, self.storage.options)
        return other.read_metadata(path)

    # --- what `squall tables` and the metadata tables say ---

    def describe(self) -> dict[str, Any]:
        """Format, partitioning (``month(o_orderdate)``, …) and the pinned snapshot."""
        table = self.iceberg_table()
        schema = table.schema()
        parts = []
        for field in table.spec().fields:
            source = schema.find_field(field.source_id).name
            parts.append(_transform_text(str(field.transform), source))
        return {"format": "iceberg", "partitioning": parts, "snapshot": self._snapshot_id}

    def metadata_table(self, kind: str) -> pa.Table:
        """The ``$<kind>`` metadata table (see :data:`METADATA_TABLES`) as pyiceberg's ``inspect`` gives it."""
        if kind not in METADATA_TABLES:
            raise DataError(
                f"Iceberg table {self.name} has no ${kind} table (there are: "
                f"{', '.join('$' + k for k in METADATA_TABLES)})"
            )
        inspect = self.iceberg_table().inspect
        method = getattr(inspect, METADATA_TABLES[kind])
        if kind in ("files", "partitions") and self._snapshot_id is not None:
            return method(snapshot_id=self._snapshot_id)
        return method()


def _transform_text(transform: str, column: str) -> str:
    """A partition field as Athena writes it: ``o_orderdate``, ``month(o_orderdate)``, ``bucket(16, o_custkey)``."""
    if transform == "identity":
        return column
    match = re.match(r"^(\w+)\[(\d+)\]$", transform)
    return f"{match.group(1)}({match.group(2)}, {column})" if match else f"{transform}({column})"


def _name_mapping(table: Any, schema: Any) -> dict[str, int]:
    """Top-level column name -> field id for files written without field ids: the table's name mapping
    (``schema.name-mapping.default``), else the schema's current names."""
    mapping = table.name_mapping()
    out: dict[str, int] = {}
    if mapping is not None:
        for field in mapping:
            if field.field_id is not None:
                for name in field.names:
                    out[name] = field.field_id
        return out
    return {f.name: f.field_id for f in schema.fields}
