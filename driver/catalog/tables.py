"""Catalog: named tables over Parquet files, with schemas and statistics from the footers.

A table location is a Parquet file, a folder of Parquet files, or a glob (and,
with the S3 storage, ``s3://bucket/prefix/``). Footers are read once, lazily,
when a query first uses the table; every file of a table must have the same
schema.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from squall.driver.catalog.listing import NAME as _NAME
from squall.driver.catalog.listing import is_glob, list_entries, list_files, list_tables, table_name
from squall.driver.catalog.scan_kinds import loader, scan_kinds
from squall.errors import DataError, OptionError
from squall.operators.storage import Storage, scheme_of, storage_for

FORMATS = ("parquet", "csv", "json")
SCANS = (
    scan_kinds()
)  # the kinds registered at import; checks use scan_kinds() (see squall.driver.catalog.scan_kinds)


@dataclass(frozen=True)
class ColumnChunkStats:
    """Min/max/null count of one column in one row group (None when unknown)."""

    min: Any
    max: Any
    null_count: int | None
    compressed_bytes: int
    uncompressed_bytes: int


@dataclass(frozen=True)
class RowGroup:
    """One row group of one file: the unit a scan is split into."""

    path: str
    index: int
    num_rows: int
    columns: Mapping[str, ColumnChunkStats]
    first_row: int = 0  # row number of the group's first row within its file


@dataclass(frozen=True)
class TableInfo:
    """What the planner knows about a table before reading any data."""

    name: str
    location: str
    files: tuple[str, ...]
    schema: pa.Schema
    row_groups: tuple[RowGroup, ...]
    #: the footer of every file, read once when the table is loaded (reused for samples)
    footers: Mapping[str, pq.FileMetaData] = field(default_factory=dict, compare=False, repr=False)
    #: how workers scan it: a scan kind of squall.driver.catalog.scan_kinds ("parquet": the Storage's
    #: projected row-group reads)
    scan: str = "parquet"
    #: options of the scan operator (e.g. format=csv), as sorted (key, value) pairs
    scan_options: tuple[tuple[str, str], ...] = ()

    @property
    def num_rows(self) -> int:
        return sum(rg.num_rows for rg in self.row_groups)

    def column_bytes(self, column: str) -> int:
        """Uncompressed bytes of a column over the whole table."""
        return sum(rg.columns[column].uncompressed_bytes for rg in self.row_groups if column in rg.columns)

    def column_range(self, column: str) -> tuple[Any, Any] | None:
        """Overall (min, max) of a column from row-group statistics; None when any group lacks them."""
        lows, highs = [], []
        for rg in self.row_groups:
            st = rg.columns.get(column)
            if st is None or st.min is None or st.max is None:
                return None
            lows.append(st.min)
            highs.append(st.max)
        try:
            return (min(lows), max(highs)) if lows else None
        except TypeError:
            return None

    def row_width(self, columns: Iterable[str]) -> float:
        """Average uncompressed bytes per row of the given columns."""
        rows = max(self.num_rows, 1)
        return sum(self.column_bytes(c) for c in columns) / rows


def _chunk_stats(chunk: pq.ColumnChunkMetaData) -> ColumnChunkStats:
    lo = hi = nulls = None
    stats = chunk.statistics
    if stats is not None:
        if stats.has_min_max:
            try:
                lo, hi = stats.min, stats.max
            except Exception:  # undecodable logical type: no pruning for this chunk
                lo = hi = None
        nulls = stats.null_count if stats.has_null_count else None
    return ColumnChunkStats(lo, hi, nulls, chunk.total_compressed_size, chunk.total_uncompressed_size)


def _schema_difference(first: pa.Schema, other: pa.Schema, first_path: str, path: str) -> str:
    """Which column differs between two files of a table, and how."""
    for i, col in enumerate(first):
        if col.name not in other.names:
            return f"column {col.name} is missing in {path} (present in {first_path})"
        theirs = other.field(col.name)
        if theirs.type != col.type:
            return f"column {col.name} is {theirs.type} in {path} but {col.type} in {first_path}"
        if other.names.index(col.name) != i:
            where = other.names.index(col.name) + 1
            return f"column {col.name} is column {where} in {path} but column {i + 1} in {first_path}"
    extra = [n for n in other.names if n not in first.names]
    if extra:
        return f"column {extra[0]} in {path} is not in {first_path}"
    return f"{path} differs from {first_path} in nullability"


def load_table(name: str, location: str, storage: Storage) -> TableInfo:
    """Read the footers of every file of a table location."""
    files = list_files(storage, location)
    schema: pa.Schema | None = None
    groups: list[RowGroup] = []
    footers: dict[str, pq.FileMetaData] = {}
    for path in files:
        md = footers[path] = storage.read_metadata(path)
        file_schema = md.schema.to_arrow_schema()
        if schema is None:
            schema = file_schema
        elif not file_schema.remove_metadata().equals(schema.remove_metadata()):
            diff = _schema_difference(schema, file_schema, files[0], path)
            raise DataError(f"table {name}: files with different schemas: {diff}")
        first_row = 0
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            cols = {}
            for c in range(rg.num_columns):
                chunk = rg.column(c)
                cols[chunk.path_in_schema] = _chunk_stats(chunk)
            groups.append(RowGroup(path, i, rg.num_rows, cols, first_row))
            first_row += rg.num_rows
    assert schema is not None
    return TableInfo(name, location, tuple(files), schema.remove_metadata(), tuple(groups), footers)


class ParquetTables:
    """The loader of the ``parquet`` scan kind (see :mod:`squall.driver.catalog.scan_kinds`)."""

    formats = ("parquet",)
    schemes = None

    @staticmethod
    def load(name: str, location: str, storage: Storage, fmt: str) -> TableInfo:
        return load_table(name, location, storage)


PARQUET_TABLES = ParquetTables()


def _file_stamps(location: str, options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(path, size and mtime) of every file of a local table location; () when it has none. Listed with
    a storage of its own: these lookups are not the driver's requests."""
    try:
        return tuple((e.path, e.stamp) for e in list_entries(storage_for(location, options), location))
    except DataError:
        return ()


def _span(bounds: tuple[Any, Any] | None) -> float | None:
    """Number of integer values (or days) between two bounds, inclusive."""
    if bounds is None:
        return None
    lo, hi = bounds
    if hasattr(lo, "toordinal"):
        lo, hi = lo.toordinal(), hi.toordinal()
    try:
        return float(hi - lo + 1)
    except TypeError:
        return None


class Catalog:
    """Named tables. Names are case-insensitive, like SQL identifiers."""

    def __init__(self, storage_options: Mapping[str, Any] | None = None, scan: str = "parquet") -> None:
        if scan not in scan_kinds():
            raise OptionError(f"scan must be one of {', '.join(scan_kinds())}, not {scan!r}")
        self.default_scan = scan
        # lower name -> (name, location, format, scan)
        self._locations: dict[str, tuple[str, str, str, str]] = {}
        self._tables: dict[str, TableInfo] = {}
        self._storages: dict[str, Storage] = {}
        self._storage_options = dict(storage_options or {})
        self._ndv: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._version = 0  # bumped by register() and by version() when a local file changed
        self._stamps: dict[str, tuple[tuple[str, str], ...]] = {}  # lower name -> its files' size/mtime
        #: the squall.driver.skipping.predicate_cache.PredicateCache of the connection (None: off); typed loosely
        #: because that module builds on this one
        self.predicate_cache: object | None = None

    def storage(self, location: str) -> Storage:
        scheme = scheme_of(location)
        with self._lock:
            if scheme not in self._storages:
                self._storages[scheme] = storage_for(location, self._storage_options)
            return self._storages[scheme]

    def requests(self) -> dict[str, int]:
        """Storage requests the driver issued so far (listing, footers, samples), by type."""
        with self._lock:
            storages = list(self._storages.values())
        out: dict[str, int] = {}
        for storage in storages:
            for kind, n in storage.requests().items():
                out[kind] = out.get(kind, 0) + n
        return out

    def register(self, name: str, location: str, *, format: str = "parquet", scan: str | None = None) -> None:
        """Register (or replace) table ``name`` at ``location``. Footers are read on first use.

        ``format`` is ``parquet`` (default), ``csv`` or ``json`` (JSON lines); ``scan`` is a
        scan kind (:mod:`squall.driver.catalog.scan_kinds`) that reads that format. Default: the
        catalog's ``scan`` when it reads the format, else the first kind that does.
        """
        if not _NAME.match(name):
            raise OptionError(f"invalid table name {name!r}: use letters, digits and _")
        if format not in FORMATS:
            raise OptionError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        if scan is None:
            readers = [kind for kind in scan_kinds() if format in loader(kind).formats]
            scan = self.default_scan if self.default_scan in readers else readers[0]
        if scan not in scan_kinds():
            raise OptionError(f"scan must be one of {', '.join(scan_kinds())}, not {scan!r}")
        kind = loader(scan)
        if format not in kind.formats:
            kinds = " or ".join(f"scan={k!r}" for k in scan_kinds() if format in loader(k).formats)
            raise OptionError(f"table {name}: {format} objects can only be scanned with {kinds}")
        if kind.schemes is not None and scheme_of(location) not in kind.schemes:
            raise OptionError(
                f"table {name}: scan={scan!r} needs an {kind.schemes[0]}:// location, not {location}"
            )
        if scheme_of(location) == "file" and not is_glob(location) and not os.path.exists(location):
            raise DataError(f"table {name}: location not found: {location}")
        with self._lock:
            self._locations[name.lower()] = (name, location, format, scan)
            self._forget(name.lower())
            self._stamps.pop(name.lower(), None)
            self._version += 1

    def _forget(self, key: str) -> None:
        """Drop what was read of table ``key`` (footers, distinct-value estimates); the lock is held."""
        self._tables.pop(key, None)
        for ndv_key in [k for k in self._ndv if k[0] == key]:
            del self._ndv[ndv_key]

    def version(self) -> int:
        """A number that changes when a table is registered or one of a local table's files changes
        (appears, goes, or changes size or mtime): plans cached under an older version are stale.

        A changed file also drops the footers and statistics read from it. Object-store tables
        (``s3://``) change the version only when registered again.
        """
        with self._lock:
            entries = list(self._locations.items())
        for key, (_name, location, _fmt, _scan) in entries:
            if scheme_of(location) != "file":
                continue
            stamp = _file_stamps(location, self._storage_options)
            with self._lock:
                if self._stamps.get(key) == stamp or key not in self._locations:
                    continue
                if key in self._stamps:
                    self._forget(key)
                self._stamps[key] = stamp
                self._version += 1
        with self._lock:
            return self._version

    def register_folder(self, folder: str) -> list[str]:
        """Register every ``<name>.parquet`` file and every sub-folder holding Parquet files (local or
        an object-store prefix; see :func:`squall.driver.catalog.listing.list_tables`)."""
        local = scheme_of(folder) == "file"
        if local and os.path.isfile(folder) and folder.endswith(".parquet"):  # one file: one table
            stem = table_name(os.path.basename(folder).removesuffix(".parquet"))
            self.register(stem, folder)
            return [stem]
        if local and not os.path.isdir(folder):
            what = "is not a folder or a .parquet file" if os.path.exists(folder) else "not found"
            raise DataError(
                f"data folder {what}: {folder} (--data takes a folder of <table>.parquet files and <table>/ "
                "folders, or one .parquet file)"
            )
        found = list_tables(self.storage(folder), folder)
        if not found and not local:
            raise DataError(f"no tables (<table>.parquet or <table>/ with Parquet files) under {folder}")
        for name, location in found:
            self.register(name, location)
        return [name for name, _location in found]

    def names(self) -> list[str]:
        with self._lock:
            return sorted(entry[0] for entry in self._locations.values())

    def location(self, name: str) -> str | None:
        entry = self._locations.get(name.lower())
        return entry[1] if entry else None

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._locations

    def ndv(self, table: str, column: str) -> int:
        """Estimated number of distinct values of a column, from a sample row group (cached).

        Other columns: the sample's distinct count when it is small (low
        cardinality), else scaled to the table's row count. Integer and date
        columns: at least the sample's density (distinct ÷ its value range)
        times the table's range from the footers — robust to clustered data —,
        at most that range.
        """
        key = (table.lower(), column)
        with self._lock:
            if key in self._ndv:
                return self._ndv[key]
        info = self.table(table)
        if not info.row_groups:
            return 1
        if info.scan != "parquet":  # no cheap sample: a guess of one distinct value per 10 rows
            return max(1, info.num_rows // 10)
        sample = info.row_groups[0]
        data = (
            self.storage(info.location)
            .read_row_groups(sample.path, [sample.index], [column], info.footers.get(sample.path))
            .column(0)
        )
        if pa.types.is_string_view(data.type) or pa.types.is_binary_view(data.type):
            data = data.cast(pa.large_string() if pa.types.is_string_view(data.type) else pa.large_binary())
        distinct = max(pc.count_distinct(data).as_py(), 1)
        rows = max(sample.num_rows, 1)
        estimate = float(distinct if distinct < rows * 0.05 else distinct / rows * info.num_rows)
        if pa.types.is_integer(data.type) or pa.types.is_date32(data.type):
            lo_hi = pc.min_max(data.cast(pa.int32()) if pa.types.is_date32(data.type) else data).as_py()
            table_range = _span(info.column_range(column))
            if lo_hi["min"] is not None and table_range is not None:
                # clustered values (few in the sample, dense in its range) scale by the range; values spread
                # over the whole range (a foreign key in random order: l_partkey) by the rows, up to the range
                density = distinct / (lo_hi["max"] - lo_hi["min"] + 1)
                estimate = min(max(estimate, density * table_range), table_range)
        estimate = min(max(estimate, 1.0), float(max(info.num_rows, 1)))
        with self._lock:
            self._ndv[key] = int(estimate)
        return self._ndv[key]

    def table(self, name: str) -> TableInfo:
        key = name.lower()
        with self._lock:
            cached = self._tables.get(key)
            entry = self._locations.get(key)
        if cached is not None:
            return cached
        if entry is None:
            raise DataError(f"unknown table {name}")
        real_name, location, fmt, scan = entry
        info = loader(scan).load(real_name, location, self.storage(location), fmt)
        with self._lock:
            self._tables[key] = info
        return info
