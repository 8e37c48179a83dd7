"""The ``delta`` table source: a Delta Lake table (``<t>/_delta_log/``) read through its log with deltalake.

The table is pinned at one version when the source first needs it (the latest, or the one time travel
asked for: :meth:`DeltaSource.at`); everything the source says comes from that version's log:

- files: the log's *active* files (``DeltaTable.get_add_actions``), never the other Parquet files of the
  folder (removed and rewritten ones); their partition values become columns
  (:attr:`~squall.plan.FileRead.constants`, typed as the Delta schema says);
- schema: the Delta schema as Arrow (logical names; ``string`` where files may hold ``string_view``: the
  worker casts each file to it); with column mapping (``delta.columnMapping.mode`` ``name`` or ``id``)
  each file's physical columns are matched by physical name (``name``) or Parquet field id (``id``)
  (:attr:`~squall.plan.FileRead.columns`);
- deletion vectors: deltalake's per-file selection vectors, handed to workers as deleted row positions
  (:attr:`~squall.plan.FileRead.deleted_rows`); a table deltalake cannot read them for is refused;
- pruning: :meth:`DeltaSource.scan_info` drops files whose partition values or log statistics rule the
  scan's filters out (:mod:`.file_pruning`) before their footers are read; footers of the kept files are
  read in parallel, row groups keyed by table column;
- stamp: the newest version in ``_delta_log/`` (one listing), so the next query sees a new commit.

A reader feature the source does not know (``delta.minReaderVersion`` > 3) is refused with one line.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from squall.driver.catalog.file_pruning import ColumnBounds, FileStats, may_match
from squall.driver.catalog.info import ColumnChunkStats, RowGroup, TableInfo, chunk_stats
from squall.driver.catalog.literals import column_constraint
from squall.driver.catalog.source import FilterSupport, SourceFile, TableSource, require_lake
from squall.errors import DataError, NotSupportedError
from squall.operators.storage import Storage, scheme_of, storage_for
from squall.plan import FileRead

#: reader features whose data this source reads right (anything else: refused)
READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "checkpointProtection",
    }
)
#: string statistics this long may be truncated prefixes: their max is not an upper bound
_STRING_STATS_PREFIX = 32
_COMMIT = re.compile(r"^(\d{20})\.(json|checkpoint(\.\d+\.\d+)?\.parquet)$")
_FOOTER_THREADS = 8


class _FooterCache:
    """Footers of Delta data files by (path, size), least recently used dropped beyond ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._footers: OrderedDict[tuple[str, int], pq.FileMetaData] = OrderedDict()

    def get(self, key: tuple[str, int]) -> pq.FileMetaData | None:
        with self._lock:
            footer = self._footers.get(key)
            if footer is not None:
                self._footers.move_to_end(key)
            return footer

    def put(self, key: tuple[str, int], footer: pq.FileMetaData) -> None:
        with self._lock:
            self._footers[key] = footer
            while len(self._footers) > self.limit:
                self._footers.popitem(last=False)


_FOOTERS = _FooterCache(20_000)


@dataclass(frozen=True)
class _File:
    """One active file of the pinned version."""

    path: str  # full path, as the storage names it
    size: int
    rows: int | None
    partition: Mapping[str, Any]  # table column -> typed value (None: NULL)
    bounds: Mapping[str, ColumnBounds]  # table column -> log statistics


@dataclass(frozen=True)
class _Pinned:
    """The table at one version: what the log says, read once."""

    version: int
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    physical: Mapping[str, str]  # table column -> physical name (column mapping; else itself)
    field_ids: Mapping[str, int]  # table column -> field id (column mapping mode "id")
    mapping: str  # "none", "name" or "id"
    files: tuple[_File, ...]
    deleted: Mapping[str, str]  # path -> deleted positions (base64 int64 LE)

    @functools.cached_property
    def sizes(self) -> dict[str, int]:
        """path -> size of the active files."""
        return {f.path: f.size for f in self.files}


def storage_options(location: str, options: Mapping[str, Any]) -> dict[str, str]:
    """deltalake's ``storage_options`` for ``location`` from the catalog's storage options (``endpoint_url``,
    ``region``) and this environment's AWS settings; {} for a local table."""
    if scheme_of(location) != "s3":
        return {}
    from squall.aws import default_credentials

    credentials, region = default_credentials()
    out = {"AWS_REGION": str(options.get("region") or region or "us-east-1")}
    endpoint = (
        options.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        out["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
        out["AWS_S3_ADDRESSING_STYLE"] = "path"
        out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        out["AWS_ACCESS_KEY_ID"], out["AWS_SECRET_ACCESS_KEY"] = frozen.access_key, frozen.secret_key
        if frozen.token:
            out["AWS_SESSION_TOKEN"] = frozen.token
    return out


def _root(location: str) -> str:
    path = location.removeprefix("file://") if scheme_of(location) == "file" else location
    return path.rstrip("/") or "/"


def _text(value: Any) -> str | None:
    """A partition value as text the worker casts to the column's type."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (date, Decimal)):
        return str(value)
    if isinstance(value, bytes):
        raise NotSupportedError("binary partition values are not read yet")
    return str(value)


class DeltaSource(TableSource):
    """A Delta Lake table read through its log (see the module doc)."""

    kind = "delta"

    def __init__(
        self,
        name: str,
        location: str,
        storage: Storage,
        version: int | None = None,
        timestamp: datetime | None = None,
    ) -> None:
        super().__init__(name, location, storage)
        self._version, self._timestamp = version, timestamp
        self._lock = threading.RLock()
        self._pinned: _Pinned | None = None
        self._footers: dict[str, pq.FileMetaData] = {}
        self._footer_lock = threading.Lock()  # not _lock: footers are read by a pool while _lock is held
        self._info: TableInfo | None = None

    # -- the pinned version

    def _open(self) -> Any:
        """The DeltaTable at the asked version (the latest by default); one-line errors."""
        require_lake(f"the Delta table at {self.location}", "deltalake")
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        root, options = _root(self.location), storage_options(self.location, self.storage.options)
        try:
            if self._timestamp is None:
                return DeltaTable(root, version=self._version, storage_options=options or None)
            table = DeltaTable(root, storage_options=options or None)
            table.load_as_version(self._timestamp)
            self._check_timestamp(table)
            return table
        except TableNotFoundError:
            raise DataError(f"table {self.name}: no Delta table at {self.location}") from None
        except (DeltaError, OSError, ValueError) as exc:
            if self._version is not None:
                latest = DeltaTable(root, storage_options=options or None).version()
                if not 0 <= self._version <= latest:
                    raise DataError(
                        f"table {self.name} has no version {self._version} (versions 0 to {latest})"
                    ) from None
            what = (
                f"version {self._version}"
                if self._version is not None
                else f"timestamp {self._timestamp.isoformat()}"
                if self._timestamp is not None
                else "its latest version"
            )
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DataError(
                f"table {self.name}: cannot read Delta table {self.location} at {what}: {first}"
            ) from None

    def _check_timestamp(self, table: Any) -> None:
        """DataError when the asked timestamp is before the version deltalake loaded for it (deltalake
        gives version 0 for a time before the first commit; Delta readers refuse it)."""
        from deltalake import DeltaTable

        assert self._timestamp is not None
        version = table.version()
        latest = DeltaTable(
            _root(self.location), storage_options=storage_options(self.location, self.storage.options) or None
        )
        # the latest table's history: deltalake 1.6.6 numbers a time-travelled table's history wrong
        commits = [h for h in latest.history() if h.get("version") == version and "timestamp" in h]
        if commits and commits[0]["timestamp"] > self._timestamp.timestamp() * 1000:
            first = datetime.fromtimestamp(commits[0]["timestamp"] / 1000, UTC)
            raise DataError(
                f"table {self.name} has no version at {self._timestamp.isoformat()} "
                f"(its first commit is at {first.isoformat()})"
            )

    def pinned(self) -> _Pinned:
        """The table at its pinned version (the log read once per source)."""
        with self._lock:
            if self._pinned is None:
                self._pinned = self._pin(self._open())
            return self._pinned

    def _pin(self, table: Any) -> _Pinned:
        protocol = table.protocol()
        unknown = sorted(set(protocol.reader_features or ()) - READER_FEATURES)
        if protocol.min_reader_version > 3 or unknown:
            what = ", ".join(unknown) or f"reader version {protocol.min_reader_version}"
            raise NotSupportedError(
                f"table {self.name}: Delta reader features not read yet: {what} ({self.location})"
            )
        configuration = table.metadata().configuration or {}
        mapping = str(configuration.get("delta.columnMapping.mode", "none")).lower()
        arrow = pa.schema(table.schema().to_arrow())
        physical, field_ids = {}, {}
        for f in arrow:
            meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
            if mapping != "none":
                if pa.types.is_nested(f.type):
                    raise NotSupportedError(
                        f"table {self.name}: nested column {f.name} under Delta column mapping is not read yet"
                    )
                physical[f.name] = meta.get("delta.columnMapping.physicalName", f.name)
                if "delta.columnMapping.id" in meta:
                    field_ids[f.name] = int(meta["delta.columnMapping.id"])
        schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in arrow])
        partitions = tuple(table.metadata().partition_columns)
        files = self._active_files(table, schema, partitions, physical)
        return _Pinned(
            int(table.version()),
            schema,
            partitions,
            physical,
            field_ids,
            mapping,
            files,
            self._deletion_vectors(table, {f.path for f in files}),
        )

    def _full_path(self, relative: str) -> str:
        if "://" in relative:  # an absolute URI (shallow clones)
            return relative.removeprefix("file://")
        return f"{_root(self.location)}/{urllib.parse.unquote(relative)}"

    def _active_files(
        self, table: Any, schema: pa.Schema, partitions: Sequence[str], physical: Mapping[str, str]
    ) -> tuple[_File, ...]:
        actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        files = []
        for action in actions:
            bounds = {}
            for f in schema:
                if f.name in partitions:
                    continue
                key = physical.get(f.name, f.name)
                lo, hi = action.get(f"min.{key}"), action.get(f"max.{key}")
                if pa.types.is_timestamp(f.type):  # kept to milliseconds in the log: not exact
                    lo = hi = None
                if isinstance(hi, str) and len(hi) >= _STRING_STATS_PREFIX:
                    hi = None
                bounds[f.name] = ColumnBounds(lo, hi, action.get(f"null_count.{key}"))
            values = {}
            for column in partitions:
                key = f"partition.{column}"
                if key not in action:
                    key = f"partition.{physical.get(column, column)}"
                value = action.get(key)
                values[column] = value
                bounds[column] = ColumnBounds(value, value, action.get("num_records") if value is None else 0)
            rows = action.get("num_records")
            files.append(
                _File(self._full_path(action["path"]), int(action["size_bytes"]), rows, values, bounds)
            )
        return tuple(sorted(files, key=lambda f: f.path))

    def _deletion_vectors(self, table: Any, paths: set[str]) -> dict[str, str]:
        """path -> deleted row positions, from deltalake's selection vectors."""
        if "deletionVectors" not in (table.protocol().reader_features or ()):
            return {}
        try:
            vectors = pa.table(table.deletion_vectors()).to_pylist()
        except Exception as exc:  # a DV form deltalake cannot read: never the deleted rows
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise NotSupportedError(f"table {self.name}: cannot read its deletion vectors: {first}") from None
        out = {}
        for row in vectors:
            path = self._full_path(row["filepath"])
            if path not in paths:
                raise DataError(f"table {self.name}: a deletion vector names {path}, not an active file")
            keep = np.asarray(row["selection_vector"], dtype=bool)
            deleted = np.flatnonzero(~keep).astype("<i8")
            if len(deleted):
                out[path] = base64.b64encode(deleted.tobytes()).decode()
        return out

    # -- the TableSource interface

    def files(self) -> tuple[SourceFile, ...]:
        """The active files of the pinned version with their partition values."""
        return tuple(SourceFile(f.path, f.size, dict(f.partition)) for f in self.pinned().files)

    def file_schema(self, path: str) -> pa.Schema:
        self.pinned()
        return self._footer(path).schema.to_arrow_schema().remove_metadata()

    def schema(self) -> pa.Schema:
        """The Delta schema of the pinned version, as Arrow (logical column names)."""
        return self.pinned().schema

    def statistics(self) -> tuple[RowGroup, ...]:
        return self.table_info().row_groups

    def partition_columns(self) -> tuple[str, ...]:
        return self.pinned().partition_columns

    def describe(self) -> dict[str, Any]:
        """Format, partitioning (the partition columns) and the pinned version (as ``snapshot``)."""
        pinned = self.pinned()
        return {"format": "delta", "partitioning": list(pinned.partition_columns), "snapshot": pinned.version}

    def table_info(self) -> TableInfo:
        """Every active file of the pinned version (footers read once, in parallel)."""
        with self._lock:
            if self._info is None:
                pinned = self.pinned()
                self._info = self._info_of(pinned, pinned.files, ())
            return self._info

    def supports_filters(self, filters: Sequence[exp.Expression]) -> list[FilterSupport]:
        """INEXACT for ``column op literal``, IS [NOT] NULL and AND/OR of them over table columns."""
        names = set(self.schema().names)

        def usable(f: exp.Expression) -> bool:
            if isinstance(f, (exp.And, exp.Or)):
                return usable(f.this) and usable(f.expression)
            if isinstance(f, exp.Paren):
                return usable(f.this)
            if isinstance(f, (exp.Is, exp.Not)):
                return all(c.name in names for c in f.find_all(exp.Column))
            c = column_constraint(f)
            return c is not None and c[0] in names

        return [FilterSupport.INEXACT if usable(f) else FilterSupport.UNSUPPORTED for f in filters]

    def scan_info(self, filters: Sequence[exp.Expression]) -> TableInfo:
        """The active files whose partition values and log statistics may match every filter; said in
        ``source_notes`` (files kept of total)."""
        pinned = self.pinned()
        if not filters:
            return self.table_info()
        kept = tuple(
            f for f in pinned.files if all(may_match(p, FileStats(f.rows, f.bounds)) for p in filters)
        )
        if len(kept) == len(pinned.files):
            return self.table_info()
        notes = (("pruned by", "partition values and file statistics"),)
        return self._info_of(pinned, kept, notes)

    def at(self, version: int | None = None, timestamp: datetime | None = None) -> TableSource:
        """The table at log version ``version`` or at ``timestamp`` (the newest commit at or before it; a
        naive timestamp is UTC); DataError when the log has no such version. Checked now (the log is read)."""
        if (version is None) == (timestamp is None):
            raise ValueError("give one of version and timestamp")
        if timestamp is not None and timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=UTC)
        source = DeltaSource(self.name, self.location, self.storage, version=version, timestamp=timestamp)
        source.pinned()
        return source

    def stamp(self) -> Hashable | None:
        """The newest version in ``_delta_log/`` (one listing, not counted as the driver's requests)."""
        if self._version is not None or self._timestamp is not None:
            return None
        uncounted = storage_for(self.location, self.storage.options)
        try:
            entries = uncounted.list_folder(f"{_root(self.location)}/_delta_log/", recursive=False) or []
        except DataError:
            return ()
        versions = [int(m.group(1)) for e in entries if (m := _COMMIT.match(e.path.rpartition("/")[2]))]
        return ("delta", max(versions, default=-1))

    # -- footers and the TableInfo

    def _footer(self, path: str) -> pq.FileMetaData:
        """A data file's footer: read once per source, and kept across sources by (path, size) — a Delta
        data file is never rewritten in place, so the next version of the table reads only new files'."""
        with self._footer_lock:
            footer = self._footers.get(path)
        if footer is None:
            pinned = self._pinned  # set before any footer is read (no lock: the pool reads footers under it)
            size = pinned.sizes.get(path) if pinned is not None else None
            footer = _FOOTERS.get((path, size)) if size is not None else None
            if footer is None:
                footer = self.storage.read_metadata(path)
                if size is not None:
                    _FOOTERS.put((path, size), footer)
            with self._footer_lock:
                self._footers[path] = footer
        return footer

    def _info_of(
        self, pinned: _Pinned, files: Sequence[_File], notes: tuple[tuple[str, str], ...]
    ) -> TableInfo:
        with self._footer_lock:
            missing = [f.path for f in files if f.path not in self._footers]
        if len(missing) > 1:
            with ThreadPoolExecutor(min(_FOOTER_THREADS, len(missing))) as pool:
                list(pool.map(self._footer, missing))
        groups: list[RowGroup] = []
        reads: dict[str, FileRead] = {}
        footers: dict[str, pq.FileMetaData] = {}
        for f in files:
            footer = footers[f.path] = self._footer(f.path)
            read = self._file_read(pinned, f, footer)
            if read is not None:
                reads[f.path] = read
            groups.extend(_row_groups(f, footer, dict(read.columns) if read else {}, pinned))
        deleted = sum(1 for f in files if f.path in pinned.deleted)
        said = (
            ("format", "delta"),
            ("version", str(pinned.version)),
            *((("partitioned by", ", ".join(pinned.partition_columns)),) if pinned.partition_columns else ()),
            ("files", f"{len(files)} of {len(pinned.files)}"),
            *((("deletion vectors", f"{deleted} files"),) if deleted else ()),
            *notes,
        )
        return TableInfo(
            self.name,
            self.location,
            tuple(f.path for f in files),
            pinned.schema,
            tuple(groups),
            footers,
            file_reads=reads,
            source_notes=said,
        )

    def _file_read(self, pinned: _Pinned, f: _File, footer: pq.FileMetaData) -> FileRead | None:
        """How a worker reads ``f``: physical and missing columns, partition values, deleted rows."""
        arrow = footer.schema.to_arrow_schema()
        by_id = {}
        for field in arrow:
            fid = (field.metadata or {}).get(b"PARQUET:field_id")
            if fid is not None:
                by_id[int(fid)] = field.name
        columns = []
        for field in pinned.schema:
            if field.name in pinned.partition_columns:
                continue
            name = pinned.physical.get(field.name, field.name)
            if pinned.mapping == "id" and field.name in pinned.field_ids:
                name = by_id.get(pinned.field_ids[field.name], "")
            elif name not in arrow.names:
                name = ""
            if name != field.name:
                columns.append((field.name, name))
        constants = tuple((c, _text(v)) for c, v in f.partition.items())
        deleted = pinned.deleted.get(f.path, "")
        if not columns and not constants and not deleted:
            return None
        return FileRead(f.path, tuple(columns), constants, (), deleted)


def _row_groups(
    f: _File, footer: pq.FileMetaData, physical: Mapping[str, str], pinned: _Pinned
) -> list[RowGroup]:
    """The row groups of one file, statistics keyed by table column (a partition column: its value)."""
    table_of = {p: c for c, p in physical.items() if p}
    for column in pinned.schema.names:
        if column not in physical and column not in pinned.partition_columns:
            table_of.setdefault(column, column)
    out, first = [], 0
    for i in range(footer.num_row_groups):
        rg = footer.row_group(i)
        cols: dict[str, ColumnChunkStats] = {}
        for c in range(rg.num_columns):
            chunk = rg.column(c)
            column = table_of.get(chunk.path_in_schema)
            if column is not None:
                cols[column] = chunk_stats(chunk)
        for column, value in f.partition.items():
            nulls = rg.num_rows if value is None else 0
            cols[column] = ColumnChunkStats(value, value, nulls, 0, 0)
        out.append(RowGroup(f.path, i, rg.num_rows, cols, first))
        first += rg.num_rows
    return out


def pinned_version(info: TableInfo) -> int | None:
    """The Delta version a :class:`TableInfo` of this source was read at (from its notes)."""
    notes = dict(info.source_notes)
    return int(notes["version"]) if notes.get("format") == "delta" else None
