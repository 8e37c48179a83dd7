"""The ``parquet`` table source: plain Parquet files, hive partitions, schemas evolving across files.

A location is a Parquet file, a folder of Parquet files or a glob, local or on an object store
(:mod:`squall.driver.catalog.listing`). What the table is:

- its files' footers, read in parallel and cached in the process by (path, size, stamp)
  (:mod:`squall.driver.catalog.footers`);
- ``key=value`` folders below the location are typed partition columns, after the files' columns
  (:mod:`squall.driver.catalog.hive`, as DuckDB's ``hive_partitioning``): each file's values are its
  :class:`~squall.plan.FileRead` constants and its row groups' statistics (min = max = the value);
- the files' schemas are united by column name with safe widening (:mod:`squall.driver.catalog.evolution`,
  as DuckDB's ``union_by_name``): a file lacking a column reads NULLs (``FileRead.columns``), a narrower
  type is widened by the worker, an incompatible one is a one-line DataError.

:meth:`ParquetSource.scan_info` prunes partitions before any file of them is read for the scan, and says
how many partitions and files it kept in ``TableInfo.source_notes``. Row-group min/max statistics prune
``column op literal`` filters afterwards (:attr:`FilterSupport.INEXACT`). Local tables are stamped with
their files' sizes and mtimes (listed without counting requests); object-store tables are not.

Also here: the loader of the ``parquet`` scan kind and :func:`load_table`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from squall.driver.catalog import footers, hive
from squall.driver.catalog.evolution import unite
from squall.driver.catalog.info import ColumnChunkStats, RowGroup, TableInfo, chunk_stats
from squall.driver.catalog.listing import is_glob, list_entries
from squall.driver.catalog.literals import column_constraint
from squall.driver.catalog.source import SOURCES, FilterSupport, SourceFile, TableSource, open_source
from squall.errors import DataError, NotSupportedError
from squall.operators.storage import FileEntry, Storage, scheme_of, storage_for
from squall.plan import FileRead

#: tables built in this process, by (name, location, listed files with their stamps): a query's scans and
#: the catalog's loader share one, and a table whose files did not change is not built again
_BUILT: OrderedDict[Hashable, tuple[TableInfo, hive.Partitioning | None]] = OrderedDict()
_BUILT_LOCK = threading.Lock()
_BUILT_ENTRIES = 32


class ParquetSource(TableSource):
    """Plain Parquet files, hive partitions, evolving schemas (see the module doc)."""

    kind = "parquet"

    def __init__(self, name: str, location: str, storage: Storage) -> None:
        super().__init__(name, location, storage)
        self._lock = threading.RLock()
        self._entries: list[FileEntry] | None = None
        self._built: tuple[TableInfo, hive.Partitioning | None] | None = None

    def _listing(self) -> list[FileEntry]:
        with self._lock:
            if self._entries is None:
                self._entries = list_entries(self.storage, self.location)
            return self._entries

    def files(self) -> tuple[SourceFile, ...]:
        """The Parquet files of the location (listed once), with their partition values."""
        part = self._build()[1]
        return tuple(
            SourceFile(e.path, e.size, dict(part.values[e.path]) if part else {}) for e in self._listing()
        )

    def file_schema(self, path: str) -> pa.Schema:
        """The schema in one file's footer."""
        entry = next((e for e in self._listing() if e.path == path), FileEntry(path, 0))
        return footers.read_footers(self.storage, [entry])[0].schema.to_arrow_schema().remove_metadata()

    def schema(self) -> pa.Schema:
        """The files' schemas united by name, then the partition columns (see the module doc)."""
        return self.table_info().schema

    def statistics(self) -> tuple[RowGroup, ...]:
        return self.table_info().row_groups

    def partition_columns(self) -> tuple[str, ...]:
        part = self._build()[1]
        return tuple(c for c, _k in part.columns) if part else ()

    def table_info(self) -> TableInfo:
        """The whole table: every footer read (in parallel, cached), schemas united, partitions typed."""
        return self._build()[0]

    def _build(self) -> tuple[TableInfo, hive.Partitioning | None]:
        entries = self._listing()
        with self._lock:
            if self._built is None:
                self._built = _built(self.name, self.location, self.storage, entries)
            return self._built

    def supports_filters(self, filters: Sequence[exp.Expression]) -> list[FilterSupport]:
        """INEXACT for ``column op literal`` filters (``=``, ``<``, …, ``BETWEEN``, ``IN``) on a column of
        the table (row groups whose min/max exclude it are skipped) and for filters over partition columns
        only (partitions they rule out are not read); UNSUPPORTED otherwise."""
        info, part = self._build()
        names = set(info.schema.names)
        on_partitions = {id(f) for f in hive.filters_on(part, filters)} if part else set()
        return [
            FilterSupport.INEXACT
            if id(f) in on_partitions or ((c := column_constraint(f)) and c[0] in names)
            else FilterSupport.UNSUPPORTED
            for f in filters
        ]

    def scan_info(self, filters: Sequence[exp.Expression]) -> TableInfo:
        """The table as a scan with ``filters`` reads it: only the files of partitions the filters over
        partition columns may pass (DuckDB evaluates them on the partition values); the notes say
        ``partitions k of n`` and ``files k of n``."""
        info, part = self._build()
        if part is None:
            return info
        kept, used = hive.prune(part, filters)
        if not used:
            return info
        files = tuple(p for p in info.files if part.partition(p) in kept)
        chosen = set(files)
        notes = _hive_notes(part, len(kept), files, len(info.files)) + (("pruned by", " AND ".join(used)),)
        return dataclasses.replace(
            info,
            files=files,
            row_groups=tuple(rg for rg in info.row_groups if rg.path in chosen),
            footers={p: md for p, md in info.footers.items() if p in chosen},
            file_reads={p: fr for p, fr in info.file_reads.items() if p in chosen},
            source_notes=notes + tuple(n for n in info.source_notes if n[0] == "schema"),
        )

    def stamp(self) -> Hashable | None:
        """Local tables: (path, size and mtime) of every file, () when there are none; else None."""
        if scheme_of(self.location) != "file":
            return None
        uncounted = storage_for(self.location, self.storage.options)  # not the driver's requests
        try:
            return tuple((e.path, e.stamp) for e in list_entries(uncounted, self.location))
        except (DataError, NotSupportedError):  # said when the table is read
            return ()


def forget_tables() -> None:
    """Forget the tables built in this process and every cached footer (benchmarks measure cold planning)."""
    with _BUILT_LOCK:
        _BUILT.clear()
    footers.clear_cache()


def _built(
    name: str, location: str, storage: Storage, entries: list[FileEntry]
) -> tuple[TableInfo, hive.Partitioning | None]:
    """The table over ``entries`` (built once per process while its files are unchanged)."""
    key = (name, location, tuple((e.path, e.size, e.stamp) for e in entries))
    cacheable = all(e.stamp for e in entries)
    with _BUILT_LOCK:
        found = _BUILT.get(key) if cacheable else None
        if found is not None:
            _BUILT.move_to_end(key)
            return found
    built = _build_table(name, location, storage, entries)
    if cacheable:
        with _BUILT_LOCK:
            _BUILT[key] = built
            while len(_BUILT) > _BUILT_ENTRIES:
                _BUILT.popitem(last=False)
    return built


def _base(location: str) -> str:
    """The folder paths of a location's files are relative to (partition folders are below it)."""
    path = location.removeprefix("file://") if scheme_of(location) == "file" else location
    if is_glob(path):
        first = min(i for i, ch in enumerate(path) if ch in "*?[")
        return path[: path.rfind("/", 0, first) + 1]
    return path if path.endswith("/") else path + "/"


def _build_table(
    name: str, location: str, storage: Storage, entries: list[FileEntry]
) -> tuple[TableInfo, hive.Partitioning | None]:
    """Read every footer (in parallel), unite the schemas, type the partitions, collect the row groups."""
    metadata = footers.read_footers(storage, entries)
    paths = [e.path for e in entries]
    shapes = _Shapes()
    schemas = [(p, shapes.arrow(md)) for p, md in zip(paths, metadata)]
    names = list(dict.fromkeys(n for _p, s in schemas for n in s.names))
    base = _base(location)
    relative = {p: p[len(base) :] if p.startswith(base) else p.rpartition("/")[2] for p in paths}
    part = hive.partitioning(name, relative, names)
    from_path = {c for c, _k in part.columns} if part else set()
    united = unite(name, [(p, _without(s, from_path)) for p, s in schemas])
    fields = [
        pa.field(n, part.types[n]) if part and n in from_path else united.schema.field(n) for n in names
    ]
    fields += [pa.field(c, part.types[c]) for c, _k in part.columns if c not in names] if part else []
    groups = [
        rg
        for p, md in zip(paths, metadata)
        for rg in _row_groups(p, md, shapes.index(md, from_path), united.missing.get(p, ()), part)
    ]
    file_reads = {
        p: FileRead(
            p,
            tuple((c, "") for c in united.missing.get(p, ())),
            tuple((c, part.text(p, c)) for c, _k in part.columns) if part else (),
        )
        for p in paths
        if part or p in united.differs
    }
    notes = _hive_notes(part, None, tuple(paths), len(paths)) if part else ()
    kinds = len({s for _p, s in schemas})
    if kinds > 1:
        notes += (("schema", f"united by name from {kinds} file schemas"),)
    info = TableInfo(
        name,
        location,
        tuple(paths),
        pa.schema(fields),
        tuple(groups),
        dict(zip(paths, metadata)),
        file_reads=file_reads,
        source_notes=notes,
    )
    return info, part


def _without(schema: pa.Schema, names: set[str]) -> pa.Schema:
    drop = [i for i, n in enumerate(schema.names) if n in names]
    for i in reversed(drop):
        schema = schema.remove(i)
    return schema


def _hive_notes(
    part: hive.Partitioning | None, partitions: int | None, files: tuple[str, ...], total: int
) -> tuple[tuple[str, str], ...]:
    """``partitions k of n`` and ``files k of n``."""
    assert part is not None
    every = len(set(map(part.partition, part.values)))
    kept = every if partitions is None else partitions
    return (("partitions", f"{kept} of {every}"), ("files", f"{len(files)} of {total}"))


class _Shapes:
    """The Arrow schema and column index of each distinct Parquet schema among a table's files (most files
    share one: compared in C++, converted once)."""

    def __init__(self) -> None:
        self._seen: list[tuple[pq.ParquetSchema, pa.Schema, dict[frozenset[str], dict[str, int]]]] = []

    def _find(
        self, md: pq.FileMetaData
    ) -> tuple[pq.ParquetSchema, pa.Schema, dict[frozenset[str], dict[str, int]]]:
        schema = md.schema
        for seen in reversed(self._seen):
            if seen[0].equals(schema):
                return seen
        self._seen.append((schema, schema.to_arrow_schema().remove_metadata(), {}))
        return self._seen[-1]

    def arrow(self, md: pq.FileMetaData) -> pa.Schema:
        """The file's Arrow schema (without metadata)."""
        return self._find(md)[1]

    def index(self, md: pq.FileMetaData, skip: set[str]) -> dict[str, int]:
        """Column chunk path -> its index in each row group, but for top-level columns in ``skip``."""
        schema, _arrow, indexes = self._find(md)
        key = frozenset(skip)
        if key not in indexes:
            paths = (schema.column(i).path for i in range(len(schema)))
            indexes[key] = {p: i for i, p in enumerate(paths) if p.split(".")[0] not in skip}
        return indexes[key]


def _row_groups(
    path: str,
    md: pq.FileMetaData,
    index: Mapping[str, int],
    missing: Sequence[str],
    part: hive.Partitioning | None,
) -> list[RowGroup]:
    """The file's row groups, statistics keyed by table column (decoded when first asked for): a missing
    column all NULL, a partition column its value. ``index``: the file's chunk paths and their indexes."""
    out = []
    first_row = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        rows = rg.num_rows
        extra = {column: ColumnChunkStats(None, None, rows, 0, 0) for column in missing}
        values = part.values[path] if part else {}
        for column, value in values.items():
            extra[column] = ColumnChunkStats(value, value, rows if value is None else 0, 0, 0)
        out.append(RowGroup(path, i, rows, _Chunks(rg, index, extra), first_row))
        first_row += rows
    return out


class _Chunks(Mapping[str, ColumnChunkStats]):
    """A row group's column statistics by table column, each decoded from the footer when first asked for
    (planning a scan of many files looks at a few columns of each)."""

    __slots__ = ("_decoded", "_extra", "_group", "_index")

    def __init__(
        self, group: pq.RowGroupMetaData, index: Mapping[str, int], extra: dict[str, ColumnChunkStats]
    ) -> None:
        self._group, self._index, self._extra = group, index, extra
        self._decoded: dict[str, ColumnChunkStats] = {}

    def __getitem__(self, column: str) -> ColumnChunkStats:
        found = self._extra.get(column) or self._decoded.get(column)
        if found is None:
            found = self._decoded[column] = chunk_stats(self._group.column(self._index[column]))
        return found

    def __contains__(self, column: object) -> bool:
        return column in self._extra or column in self._index

    def __iter__(self) -> Iterator[str]:
        yield from self._index
        yield from self._extra

    def __len__(self) -> int:
        return len(self._index) + len(self._extra)


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
        if fmt not in SOURCES:
            raise NotSupportedError(f"table {name}: {fmt} tables are not read yet ({location})")
        return open_source(fmt, name, location, storage).table_info()


PARQUET_TABLES = ParquetTables()
