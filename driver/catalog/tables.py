"""Catalog: named tables over Parquet files, with schemas and statistics from the footers.

A table location is a Parquet file, a folder of Parquet files, or a glob (and,
with the S3 storage, ``s3://bucket/prefix/``): :mod:`squall.driver.catalog.listing`
says which files it names. What a table is made of comes from its source
(:mod:`squall.driver.catalog.source`); how workers read it, from its scan kind.
Footers are read once, lazily, when a query first uses the table (in parallel, cached in the
process while the files are unchanged); the files' schemas are united by name
(:mod:`squall.driver.catalog.evolution`) and hive folders become partition columns
(:mod:`squall.driver.catalog.hive`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from squall.driver.catalog.info import ColumnChunkStats, RowGroup, TableInfo
from squall.driver.catalog.listing import NAME as _NAME
from squall.driver.catalog.listing import file_format, is_glob, list_tables, table_name
from squall.driver.catalog.scan_kinds import loader, scan_kinds
from squall.driver.catalog.source import SOURCES, TableSource, open_source
from squall.errors import DataError, OptionError
from squall.operators.storage import Storage, scheme_of, storage_for

__all__ = ["FORMATS", "SCANS", "Catalog", "ColumnChunkStats", "RowGroup", "TableInfo"]
#: table formats: files (parquet, csv, json) and lake tables (iceberg, delta: read by their own source)
FORMATS = ("parquet", "csv", "json", "iceberg", "delta")
#: the kinds registered at import; checks use scan_kinds() (see squall.driver.catalog.scan_kinds)
SCANS = scan_kinds()
#: formats whose source's stamp is asked on every storage, not only for local files (one listing of the
#: table's log or one catalog call: cheap), so a new commit is seen by the next query
_STAMPED = ("iceberg", "delta")


def _distinct_count(data: pa.ChunkedArray) -> int:
    """The number of distinct non-null values of ``data``: ``pc.unique`` counts them exactly in a fraction of
    ``pc.count_distinct``'s time on many distinct values (100,000 strings: 8 ms instead of 81)."""
    return len(pc.unique(data)) - (1 if data.null_count else 0)


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
        self._sources: dict[str, TableSource] = {}  # lower name -> its source, kept for scan_table
        #: lower name -> how to open its source, for tables that are not a location of a format (a named
        #: catalog's tables, metadata tables): see register_source
        self._openers: dict[str, Callable[[], TableSource]] = {}
        #: the named catalogs (squall.driver.catalog.catalogs.NamedCatalogs) tables are resolved in, if any
        self.catalogs: Any = None
        self._options: dict[str, dict[str, Any]] = {}  # lower name -> its scan kind's reading options
        self._storages: dict[str, Storage] = {}
        self._storage_options = dict(storage_options or {})
        self._ndv: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._version = 0  # bumped by register() and by version() when a local file changed
        self._stamps: dict[str, Hashable] = {}  # lower name -> its source's stamp (files' size/mtime)
        #: time-travel names (lower, see table_at) -> (lower name of the table, version, timestamp)
        self._travels: dict[str, tuple[str, int | None, datetime | None]] = {}
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

    def register(
        self,
        name: str,
        location: str,
        *,
        format: str = "parquet",
        scan: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Register (or replace) table ``name`` at ``location``. Footers are read on first use.

        ``format`` is ``parquet`` (default), ``csv`` or ``json`` (JSON lines); ``scan`` is a
        scan kind (:mod:`squall.driver.catalog.scan_kinds`) that reads that format. Default: the
        catalog's ``scan`` when it reads the format and the location, else the first kind that
        does (one reading any storage first). ``options``: the scan kind's reading options (a
        kind whose loader has ``check_options``; OptionError otherwise).
        """
        if not _NAME.match(name):
            raise OptionError(f"invalid table name {name!r}: use letters, digits and _")
        if format not in FORMATS:
            raise OptionError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        if (
            scan is None
        ):  # the catalog's kind when it reads this table, else the first that reads any location
            fits = [k for k in scan_kinds() if format in loader(k).formats]
            readers = [
                k for k in fits if loader(k).schemes in (None, ()) or scheme_of(location) in loader(k).schemes
            ]
            readers.sort(key=lambda k: loader(k).schemes is not None)
            scan = self.default_scan if self.default_scan in readers else (readers or fits)[0]
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
        if (
            format == "parquet"
            and scheme_of(location) == "file"
            and os.path.isdir(os.path.join(location, "_delta_log"))
        ):
            format = "delta"  # a Delta table's folder is never plain Parquet files
        if options and not hasattr(kind, "check_options"):
            raise OptionError(f"table {name}: scan={scan!r} takes no options")
        checked = kind.check_options(format, options) if options else {}
        with self._lock:
            self._locations[name.lower()] = (name, location, format, scan)
            self._openers.pop(name.lower(), None)
            self._options[name.lower()] = checked
            self._forget(name.lower())
            self._stamps.pop(name.lower(), None)
            self._version += 1

    def register_source(
        self, name: str, opener: Callable[[], TableSource], *, format: str, location: str
    ) -> None:
        """Register (or replace) table ``name`` whose source ``opener`` makes (no I/O until asked): a table
        of a named catalog, a metadata table. ``format`` and ``location`` are what listings say of it."""
        with self._lock:
            self._locations[name.lower()] = (name, location, format, "parquet")
            self._openers[name.lower()] = opener
            self._options.pop(name.lower(), None)
            self._forget(name.lower())
            self._stamps.pop(name.lower(), None)
            self._version += 1

    def unregister(self, name: str) -> None:
        """Forget table ``name`` (DROP TABLE of a table Squall made); nothing happens when it is unknown."""
        key = name.lower()
        with self._lock:
            if self._locations.pop(key, None) is None:
                return
            self._openers.pop(key, None)
            self._options.pop(key, None)
            self._forget(key)
            self._stamps.pop(key, None)
            self._version += 1

    def refresh(self, name: str) -> None:
        """Forget what was read of table ``name`` (its files changed: an INSERT added some), keeping how it
        is registered (location, format, scan kind, options); plans cached before are stale."""
        key = name.lower()
        with self._lock:
            if key in self._locations:
                self._forget(key)
                self._stamps.pop(key, None)
                self._version += 1

    def options_of(self, name: str) -> dict[str, Any]:
        """The reading options table ``name`` was registered with (CSV: ``delim``, ``header``, …)."""
        return dict(self._options.get(name.lower()) or {})

    def _open(self, key: str, entry: tuple[str, str, str, str]) -> TableSource:
        """A fresh source of table ``key`` (registered as ``entry``)."""
        opener = self._openers.get(key)
        if opener is not None:
            return opener()
        real_name, location, fmt, _scan = entry
        return open_source(fmt, real_name, location, self.storage(location))

    def _forget(self, key: str) -> None:
        """Drop what was read of table ``key`` (footers, distinct-value estimates, its versions met by time
        travel); the lock is held."""
        for travel in [k for k, (base, _v, _t) in self._travels.items() if base == key]:
            del self._travels[travel]
            self._forget(travel)
        self._tables.pop(key, None)
        self._sources.pop(key, None)
        for ndv_key in [k for k in self._ndv if k[0] == key]:
            del self._ndv[ndv_key]

    def version(self) -> int:
        """A number that changes when a table is registered or one of a local table's files changes
        (appears, goes, or changes size or mtime), or a lake table (Delta) has a new commit, local or
        on an object store (one listing of its log): plans cached under an older version are stale.

        A changed file also drops the footers and statistics read from it. Object-store tables of plain
        files (``s3://``) change the version only when registered again; lake tables (Iceberg: a new
        metadata file or catalog commit; Delta: a new log entry) are stamped anywhere by their sources, and
        so are tables registered by source (:meth:`register_source`).
        """
        with self._lock:
            entries = list(self._locations.items())
        for key, entry in entries:
            _name, location, fmt, _scan = entry
            own = key in self._openers
            if not own and (fmt not in SOURCES or (scheme_of(location) != "file" and fmt not in _STAMPED)):
                continue
            stamp = self._open(key, entry).stamp()
            if stamp is None:
                continue
            with self._lock:
                if self._stamps.get(key) == stamp or key not in self._locations:
                    continue
                if key in self._stamps or key in self._tables or key in self._sources:
                    self._forget(key)  # (read before its first stamp: a table registered while planning)
                self._stamps[key] = stamp
                self._version += 1
        with self._lock:
            return self._version

    def register_folder(self, folder: str) -> list[str]:
        """Register every ``<name>.parquet`` file and every sub-folder holding Parquet files (local or
        an object-store prefix; see :func:`squall.driver.catalog.listing.list_tables`)."""
        local = scheme_of(folder) == "file"
        if local and os.path.isfile(folder) and (found_fmt := file_format(folder)):  # one file: one table
            stem = table_name(os.path.basename(folder)[: -len(found_fmt[1])])
            self.register(stem, folder, format=found_fmt[0])
            return [stem]
        if local and not os.path.isdir(folder):
            what = "is not a folder or a .parquet file" if os.path.exists(folder) else "not found"
            raise DataError(
                f"data folder {what}: {folder} (--data takes a folder of <table>.parquet files and <table>/ "
                "folders, or one .parquet, .csv[.gz|.zst] or .json[l][.gz] file)"
            )
        # local discovery is not counted as the driver's requests (as the version stamps are not)
        storage = storage_for(folder, self._storage_options) if local else self.storage(folder)
        found = list_tables(storage, folder)
        if not found and not local:
            raise DataError(f"no tables (<table>.parquet or <table>/ with Parquet files) under {folder}")
        for name, location, fmt in found:
            self.register(name, location, format=fmt)
        return [name for name, _location, _fmt in found]

    def source(self, name: str) -> TableSource:
        """The source of table ``name`` (a fresh handle: no I/O until asked), named like its format."""
        entry = self._locations.get(name.lower())
        if entry is None:
            raise DataError(f"unknown table {name}")
        return self._open(name.lower(), entry)

    def names(self) -> list[str]:
        """The registered tables' names (not the time-travel names of :meth:`table_at`)."""
        with self._lock:
            return sorted(entry[0] for entry in self._locations.values())

    def is_internal(self, name: str) -> bool:
        """Whether table ``name`` was registered by source (a named catalog's table under its internal name,
        a metadata table), not by location: listings name those their own way."""
        return name.lower() in self._openers

    def format_of(self, name: str) -> str | None:
        """The format table ``name`` was registered with (``parquet``, ``iceberg``, …); None when unknown."""
        entry = self._locations.get(name.lower())
        return entry[2] if entry else None

    def location(self, name: str) -> str | None:
        entry = self._entry(name.lower())
        return entry[1] if entry else None

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._locations or name.lower() in self._travels

    def _entry(self, key: str) -> tuple[str, str, str, str] | None:
        """(name, location, format, scan) of table ``key`` (of its table for a time-travel name)."""
        travel = self._travels.get(key)
        entry = self._locations.get(travel[0] if travel else key)
        if entry is None or travel is None:
            return entry
        return (travel_name(entry[0], travel[1], travel[2]), *entry[1:])

    def table_at(self, name: str, version: int | None = None, timestamp: datetime | None = None) -> str:
        """The name under which table ``name`` as it was at ``version`` or ``timestamp`` (time travel, one
        of them given; a naive timestamp is UTC) is read by this catalog's ``table``/``scan_table``, like
        a table: the table's source's :meth:`~squall.driver.catalog.source.TableSource.at` (checked now:
        NotSupportedError for a table without versions, DataError for a version it does not have).
        The same version of the same table gets the same name (and its files are read once)."""
        key = name.lower()
        entry = self._locations.get(key)
        if entry is None:
            raise DataError(f"unknown table {name}")
        if timestamp is not None and timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=UTC)
        travel = travel_name(entry[0], version, timestamp)
        if travel.lower() in self._locations:
            raise OptionError(f"table {travel} is registered: it cannot also name {name} at a version")
        with self._lock:
            if travel.lower() in self._travels:
                return travel
        source = self._source(key).at(version, timestamp)
        with self._lock:
            if travel.lower() not in self._travels:
                self._travels[travel.lower()] = (key, version, timestamp)
                self._sources[travel.lower()] = source
        return travel

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
        file_read = info.file_reads.get(sample.path)
        if file_read is not None and column in dict(file_read.constants):  # a partition column
            values = {dict(fr.constants).get(column) for fr in info.file_reads.values()}
            with self._lock:
                self._ndv[key] = max(1, len(values))
            return self._ndv[key]
        physical = dict(file_read.columns).get(column, column) if file_read is not None else column
        if physical == "":  # not in the sampled file: no sample, guess
            return max(1, info.num_rows // 10)
        data = (
            self.storage(sample.path)
            .read_row_groups(sample.path, [sample.index], [physical], info.footers.get(sample.path))
            .column(0)
        )
        if pa.types.is_string_view(data.type) or pa.types.is_binary_view(data.type):
            data = data.cast(pa.large_string() if pa.types.is_string_view(data.type) else pa.large_binary())
        distinct = max(_distinct_count(data), 1)
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

    def scan_table(self, name: str, filters: Sequence[exp.Expression]) -> TableInfo:
        """Table ``name`` as one scan with ``filters`` (table column names) reads it: its source may
        leave out files the filters rule out before they are opened (:meth:`TableSource.scan_info`);
        the whole table when its scan kind is not ``parquet``."""
        info = self.table(name)
        if info.scan != "parquet" or not filters:
            return info
        scanned = self._source(name.lower()).scan_info(filters)
        return scanned if scanned.name == info.name else dataclasses.replace(scanned, name=info.name)

    def _source(self, key: str) -> TableSource:
        """The kept source of table ``key`` (made once per registration, so it keeps what it read: one
        version of a lake table per query)."""
        with self._lock:
            source = self._sources.get(key)
            entry = self._locations.get(key)
            travel = self._travels.get(key)
        if source is not None:
            return source
        if travel is not None:  # forgotten meanwhile (its table changed): travel again
            return self._sources.setdefault(key, self._source(travel[0]).at(travel[1], travel[2]))
        if entry is None:
            raise DataError(f"unknown table {key}")
        source = self._open(key, entry)
        with self._lock:
            return self._sources.setdefault(key, source)

    def table(self, name: str) -> TableInfo:
        key = name.lower()
        with self._lock:
            cached = self._tables.get(key)
            entry = self._entry(key)
        if cached is not None:
            return cached
        if entry is None:
            raise DataError(f"unknown table {name}")
        real_name, location, fmt, scan = entry
        if key in self._openers or (scan == "parquet" and fmt in SOURCES):
            # the kept source: its snapshot is the scans' snapshot (scan_table reads the same version)
            info = self._source(key).table_info()
            info = info if info.name == real_name else dataclasses.replace(info, name=real_name)
        else:
            options = self._options.get(key)
            extra = {"options": options} if options else {}
            info = loader(scan).load(real_name, location, self.storage(location), fmt, **extra)
        with self._lock:
            self._tables[key] = info
        return info


def travel_name(name: str, version: int | None, timestamp: datetime | None) -> str:
    """The name of table ``name`` at ``version`` (``orders__v3``) or at ``timestamp`` (UTC:
    ``orders__ts20260101T000000`` or, with microseconds, ``orders__ts20260101T000000_250000``): a plain
    identifier, so it flows through SQL, plans and DuckDB like any table name."""
    if version is not None:
        return f"{name}__v{version}" if version >= 0 else f"{name}__vm{-version}"
    assert timestamp is not None
    utc = timestamp.astimezone(UTC) if timestamp.tzinfo else timestamp
    return f"{name}__ts{utc:%Y%m%dT%H%M%S}" + (f"_{utc.microsecond:06d}" if utc.microsecond else "")
