"""The ``parquet`` table source: plain Parquet files, schemas and statistics from their footers.

A location is a Parquet file, a folder of Parquet files or a glob, local or on an
object store (:mod:`squall.driver.catalog.listing`). Footers are read once per
source, in file order; every file must have the same schema (the first file's:
a DataError names the first column that differs). Files carry no partition
values. Row-group min/max statistics prune ``column op literal`` filters
(:attr:`FilterSupport.INEXACT`). Local tables are stamped with their files'
sizes and mtimes (listed without counting requests); object-store tables are not.

Also here: the loader of the ``parquet`` scan kind and :func:`load_table`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from squall.driver.catalog.info import ColumnChunkStats, RowGroup, TableInfo
from squall.driver.catalog.listing import LAKE_FORMATS, list_entries, refuse_lake_table
from squall.driver.catalog.literals import column_constraint
from squall.driver.catalog.source import SOURCES, FilterSupport, SourceFile, TableSource, open_source
from squall.errors import DataError, NotSupportedError
from squall.operators.storage import Storage, scheme_of, storage_for


class ParquetSource(TableSource):
    """Plain Parquet files (see the module doc)."""

    kind = "parquet"

    def __init__(self, name: str, location: str, storage: Storage) -> None:
        super().__init__(name, location, storage)
        self._lock = threading.RLock()
        self._files: tuple[SourceFile, ...] | None = None
        self._footers: dict[str, pq.FileMetaData] = {}
        self._info: TableInfo | None = None

    def files(self) -> tuple[SourceFile, ...]:
        """The Parquet files of the location (listed once)."""
        with self._lock:
            if self._files is None:
                self._files = tuple(
                    SourceFile(e.path, e.size) for e in list_entries(self.storage, self.location)
                )
            return self._files

    def file_schema(self, path: str) -> pa.Schema:
        """The schema in one file's footer (read once)."""
        return self._footer(path).schema.to_arrow_schema().remove_metadata()

    def schema(self) -> pa.Schema:
        """The first file's schema; every other file must have the same (see :meth:`table_info`)."""
        return self.table_info().schema

    def statistics(self) -> tuple[RowGroup, ...]:
        return self.table_info().row_groups

    def table_info(self) -> TableInfo:
        """The table: every footer read (once), the schemas checked, the row groups collected."""
        files = self.files()
        with self._lock:
            if self._info is None:
                self._info = _read_footers(self.name, self.location, [f.path for f in files], self._footer)
            return self._info

    def _footer(self, path: str) -> pq.FileMetaData:
        with self._lock:
            if path not in self._footers:
                self._footers[path] = self.storage.read_metadata(path)
            return self._footers[path]

    def supports_filters(self, filters: Sequence[exp.Expression]) -> list[FilterSupport]:
        """INEXACT for ``column op literal`` filters (``=``, ``<``, …, ``BETWEEN``, ``IN``) on a column of
        the table: row groups whose min/max exclude it are skipped; UNSUPPORTED otherwise."""
        names = set(self.schema().names)
        return [
            FilterSupport.INEXACT
            if (c := column_constraint(f)) and c[0] in names
            else FilterSupport.UNSUPPORTED
            for f in filters
        ]

    def stamp(self) -> Hashable | None:
        """Local tables: (path, size and mtime) of every file, () when there are none; else None."""
        if scheme_of(self.location) != "file":
            return None
        uncounted = storage_for(self.location, self.storage.options)  # not the driver's requests
        try:
            return tuple((e.path, e.stamp) for e in list_entries(uncounted, self.location))
        except (DataError, NotSupportedError):  # said when the table is read
            return ()


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


def _read_footers(
    name: str, location: str, files: list[str], footer: Callable[[str], pq.FileMetaData]
) -> TableInfo:
    """Read the footer of every file, in order, checking each schema against the first file's."""
    schema: pa.Schema | None = None
    groups: list[RowGroup] = []
    footers: dict[str, pq.FileMetaData] = {}
    for path in files:
        md = footers[path] = footer(path)
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


def load_table(name: str, location: str, storage: Storage) -> TableInfo:
    """The :class:`TableInfo` of a plain Parquet table (every footer read)."""
    return ParquetSource(name, location, storage).table_info()


class ParquetTables:
    """The loader of the ``parquet`` scan kind (see :mod:`squall.driver.catalog.scan_kinds`): the table's
    source (named like its format), read with the Storage's projected row-group reads."""

    formats = ("parquet", "iceberg", "delta")
    schemes = None

    @staticmethod
    def load(name: str, location: str, storage: Storage, fmt: str) -> TableInfo:
        if fmt in LAKE_FORMATS and fmt not in SOURCES:
            refuse_lake_table(
                location, [{"iceberg": "metadata/v1.metadata.json", "delta": "_delta_log/0.json"}[fmt]]
            )
        if fmt not in SOURCES:
            raise NotSupportedError(f"table {name}: {fmt} tables are not read yet ({location})")
        return open_source(fmt, name, location, storage).table_info()


PARQUET_TABLES = ParquetTables()
