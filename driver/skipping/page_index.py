"""Parquet footer indexes read by DuckDB: Bloom-filter probes and page indexes (column/offset indexes).

Used while planning (:mod:`squall.driver.planner.skipping`) to skip row groups beyond
footer min/max. Every function reads one *local* file: the table's own file, or for
object-store tables its metadata mirror (:mod:`squall.driver.skipping.metadata_mirror`: the
real footer and index bytes at their offsets, holes elsewhere). The DuckDB session
that reads it may read only that file (:func:`connect`). PyArrow writes Bloom filters
and page indexes but reads neither; DuckDB's ``parquet_bloom_probe`` and
``parquet_page_index`` do.

Results are cached per (file, stamp): a changed file has another stamp, so it is read
again. Any DuckDB error (a file without the index, a damaged or missing range) reads as
"nothing known": nothing is skipped.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def connect(path: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB session that may read exactly one local file (its footer and indexes), caching none of its
    bytes (a metadata mirror fills in after it is first read)."""
    con = duckdb.connect(":memory:", config={"threads": 1, "enable_external_file_cache": False})
    con.execute("SET allowed_paths = [?]", [path])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


class _Session:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.con: duckdb.DuckDBPyConnection | None = None


#: the sessions of the files probed last, (path, stamp) → session: a new DuckDB instance takes ~20 ms, and
#: planning a query probes the same few files for many columns and values
_SESSIONS: OrderedDict[tuple[str, str], _Session] = OrderedDict()
_SESSIONS_LOCK = threading.Lock()
_MAX_SESSIONS = 32


@contextlib.contextmanager
def _session(path: str, stamp: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A kept :func:`connect` session on ``path`` at ``stamp``, used by one thread at a time."""
    key = (path, stamp)
    with _SESSIONS_LOCK:
        entry = _SESSIONS.get(key)
        if entry is None:
            entry = _SESSIONS[key] = _Session()
            while len(_SESSIONS) > _MAX_SESSIONS:
                _SESSIONS.popitem(last=False)  # closed once no thread uses it
        else:
            _SESSIONS.move_to_end(key)
    with entry.lock:
        if entry.con is None:
            entry.con = connect(path)
        yield entry.con


@dataclass(frozen=True)
class IndexFile:
    """A local file DuckDB may read a table file's indexes from (the file itself or its metadata
    mirror), the columns whose Bloom filters it holds, and whether it holds a page index."""

    path: str
    bloom_columns: frozenset[str]
    page_index: bool


# --- Bloom filters ----------------------------------------------------------------------------------


def bloom_columns_of(footer: pq.FileMetaData) -> frozenset[str]:
    """Columns whose chunk in the first row group points at a Bloom filter (a writer writes them for every
    row group or none; a row group without one is probed as "may hold the value")."""
    if footer.num_row_groups == 0:
        return frozenset()
    group = footer.row_group(0)
    return frozenset(
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).bloom_filter_offset is not None
    )


@functools.lru_cache(maxsize=4096)
def bloom_columns(path: str, stamp: str) -> frozenset[str]:
    """Columns of a local file (at ``stamp``) whose footer points at Bloom filters (read by DuckDB)."""
    try:
        with _session(path, stamp) as con:
            rows = con.execute(
                "SELECT DISTINCT path_in_schema FROM parquet_metadata(?) WHERE bloom_filter_offset IS NOT NULL",
                [path],
            ).fetchall()
    except duckdb.Error:
        return frozenset()
    return frozenset(r[0] for r in rows)


@functools.lru_cache(maxsize=16384)
def bloom_excludes(path: str, stamp: str, column: str, value: Any) -> frozenset[int]:
    """Row groups of a local file whose Bloom filter on ``column`` says ``value`` is absent."""
    try:
        with _session(path, stamp) as con:
            rows = con.execute(
                "SELECT row_group_id FROM parquet_bloom_probe(?, ?, ?) WHERE bloom_filter_excludes",
                [path, column, value],
            ).fetchall()
    except duckdb.Error:
        return frozenset()
    return frozenset(int(r[0]) for r in rows)


# --- page indexes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One data page of a column chunk, from the page index: its rows within the row group and bounds.

    ``low``/``high`` are None when unknown (no bounds, or not castable to the column's type);
    ``nulls_only``: the page holds no non-NULL value.
    """

    first_row: int
    num_rows: int
    nulls_only: bool
    low: Any
    high: Any


#: row group -> its pages of one column, in row order
ColumnPages = Mapping[int, tuple[Page, ...]]


def has_page_index(footer: pq.FileMetaData, columns: Iterable[str]) -> bool:
    """Whether the first row group's chunk of one of ``columns`` has a column index (per the footer; a
    writer writes page indexes for every row group or none)."""
    if footer.num_row_groups == 0:
        return False
    wanted = set(columns)
    group = footer.row_group(0)
    return any(
        group.column(i).path_in_schema in wanted and group.column(i).has_column_index
        for i in range(group.num_columns)
    )


def bound_type(typ: pa.DataType) -> pa.DataType | None:
    """The Arrow type page bounds of a column of type ``typ`` are read as, or None when its pages are not used.

    Floating-point columns are left out (conservative): Parquet bounds exclude NaN, which SQL orders
    above every number, so a page whose bounds say ``max 3`` may hold a NaN matching ``x > 5``.
    """
    if pa.types.is_integer(typ) or pa.types.is_decimal(typ) or pa.types.is_date32(typ):
        return typ
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.string()
    return None


#: bytes counted per page of a column whose bounds were turned into Python values
_PAGE_BYTES = 160


class PageIndexCache:
    """Page indexes of local files by (file, stamp), least recently used files dropped past ``max_bytes``.

    A file's whole page index is read once (DuckDB parses every column's index whatever is asked) and
    kept as an Arrow table of bounds as text; the columns a scan filters are turned into :class:`Page`
    lists (bounds as Python values of the column's type) when first asked for, and kept too.
    """

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # (path, stamp) -> (the index as read, or None: none / unreadable; column -> its pages)
        self._files: OrderedDict[tuple[str, str], tuple[pa.Table | None, dict[str, ColumnPages]]] = (
            OrderedDict()
        )
        self._bytes = 0
        self.reads = 0  # DuckDB reads of a file's page index

    def pages(self, path: str, stamp: str, types: Mapping[str, pa.DataType]) -> dict[str, ColumnPages]:
        """Column -> pages per row group, for the columns of ``types`` (column -> :func:`bound_type`) that
        have a page index in the local file ``path`` at ``stamp``."""
        key = (path, stamp)
        with self._lock:
            entry = self._files.get(key)
            if entry is not None:
                self._files.move_to_end(key)
        if entry is None:
            table = _read_page_index(path, stamp)
            with self._lock:
                self.reads += 1
                entry = self._files.setdefault(key, (table, {}))
                if entry[0] is table:
                    self._bytes += table.nbytes if table is not None else 0
        table, typed = entry
        out: dict[str, ColumnPages] = {}
        for col, typ in types.items():
            pages = typed.get(col)
            if pages is None:
                pages = _column_pages(table, col, typ) if table is not None else {}
                with self._lock:
                    if col not in typed:
                        typed[col] = pages
                        self._bytes += _PAGE_BYTES * sum(len(p) for p in pages.values())
            if pages:
                out[col] = pages
        with self._lock:
            while self._bytes > self.max_bytes and len(self._files) > 1:
                _key, (old, old_typed) = self._files.popitem(last=False)
                self._bytes -= (old.nbytes if old is not None else 0) + _PAGE_BYTES * sum(
                    len(p) for pages in old_typed.values() for p in pages.values()
                )
        return out

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._bytes = 0


PAGE_INDEXES = PageIndexCache()


def _read_page_index(path: str, stamp: str) -> pa.Table | None:
    """A local file's page index (column, row group, first row, rows, NULL page, bounds as text), None
    when it has none or DuckDB cannot read it."""
    try:
        with _session(path, stamp) as con:
            table: pa.Table = con.sql(
                "SELECT path_in_schema AS col, row_group_id AS rg, first_row_index AS first, num_rows AS n, "
                "null_page, min_value AS lo, max_value AS hi FROM parquet_page_index(?) "
                "ORDER BY path_in_schema, row_group_id, page_id",
                params=[path],
            ).to_arrow_table()
    except duckdb.Error:
        return None
    return table if table.num_rows else None


def _column_pages(table: pa.Table, column: str, typ: pa.DataType) -> ColumnPages:
    """One column's pages per row group, bounds cast to ``typ``; {} when they do not cast."""
    rows = table.filter(pc.equal(table.column("col"), column))
    try:
        lows = rows.column("lo").cast(typ).to_pylist()
        highs = rows.column("hi").cast(typ).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return {}
    if typ == pa.string():  # DuckDB shows bytes that are not UTF-8 as \xNN: such a bound is unknown
        for i, (lo, hi) in enumerate(zip(lows, highs, strict=True)):
            if (lo is not None and "\\" in lo) or (hi is not None and "\\" in hi):
                lows[i] = highs[i] = None
    out: dict[int, list[Page]] = {}
    for rg, first, n, null_page, lo, hi in zip(
        rows.column("rg").to_pylist(),
        rows.column("first").to_pylist(),
        rows.column("n").to_pylist(),
        rows.column("null_page").to_pylist(),
        lows,
        highs,
        strict=True,
    ):
        out.setdefault(int(rg), []).append(Page(int(first), int(n), bool(null_page), lo, hi))
    return {rg: tuple(pages) for rg, pages in out.items()}


# --- which pages may hold matching rows -------------------------------------------------------------

#: (low, low inclusive, high, high inclusive); None bounds are open (as squall.driver.skipping.predicates.Range)
Range = tuple[Any, bool, Any, bool]


def page_may_match(page: Page, bounds: Range | None, values: Sequence[Any] | None) -> bool:
    """Whether a page may hold a row with a value in ``bounds`` and (if given) among ``values`` (sorted).

    Conservative: unknown bounds, or values not comparable with the page's, may match. A page of
    only NULLs matches no comparison or IN list.
    """
    if page.nulls_only:
        return False
    lo, hi = page.low, page.high
    if lo is None or hi is None:
        return True
    try:
        if values is not None:
            i = bisect.bisect_left(values, lo)
            return i < len(values) and values[i] <= hi
        if bounds is None:
            return True
        a, ai, b, bi = bounds
        if a is not None and (hi < a or (hi == a and not ai)):
            return False
        return not (b is not None and (lo > b or (lo == b and not bi)))
    except TypeError:
        return True


def matching_rows(
    pages_of: Mapping[str, Sequence[Page]],
    bounds_of: Mapping[str, Range | None],
    values_of: Mapping[str, Iterable[Any] | None],
) -> list[tuple[int, int]]:
    """[start, end) row ranges of one row group (rows counted from its first) where every filtered
    column's page may match: the intersection over columns of their matching pages' rows."""
    result: list[tuple[int, int]] | None = None
    for col, pages in pages_of.items():
        values = sorted_values(values_of.get(col))
        ranges = _merge(
            (p.first_row, p.first_row + p.num_rows)
            for p in pages
            if page_may_match(p, bounds_of.get(col), values)
        )
        result = ranges if result is None else _intersect(result, ranges)
        if not result:
            return []
    return result if result is not None else []


def no_matching_row(
    pages_of: Mapping[str, Sequence[Page]],
    bounds_of: Mapping[str, Range | None],
    values_of: Mapping[str, Sequence[Any] | None],
) -> bool:
    """Whether no row of a row group lies on a page of every column that may match (``matching_rows``
    is empty); ``values_of`` as :func:`sorted_values` gives them. Fast when a column rules the row
    group out or in by itself (no page, or every page, may match)."""
    partial: list[list[tuple[int, int]]] = []
    for col, pages in pages_of.items():
        bounds, values = bounds_of.get(col), values_of.get(col)
        flags = [page_may_match(p, bounds, values) for p in pages]
        if not any(flags):
            return True
        if not all(flags):
            partial.append(_merge((p.first_row, p.first_row + p.num_rows) for p, f in zip(pages, flags) if f))
    if len(partial) < 2:
        return False
    result = partial[0]
    for ranges in partial[1:]:
        result = _intersect(result, ranges)
        if not result:
            return True
    return False


def sorted_values(values: Iterable[Any] | None) -> list[Any] | None:
    """``values`` sorted (for bisection), or None when absent or not mutually comparable (then only the
    column's range counts, which holds their minimum and maximum)."""
    if values is None:
        return None
    try:
        return sorted(values)
    except TypeError:
        return None


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out
