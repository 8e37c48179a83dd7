"""Row-group skipping beyond min/max: Parquet page indexes, Bloom filters and the predicate cache.

Called by the scan rule (:mod:`~squall.driver.planner.rules.scans`) with the row groups
left after min/max pruning, in this order:

- **page index**: for the range / ``=`` / ``IN`` conjuncts of the scan's normalized
  predicate (:mod:`squall.driver.skipping.predicates`), a row group is skipped when no row is
  on a page of *every* filtered column whose [min, max] may match (the intersection of
  the columns' matching pages' row ranges is empty), though its row-group min/max did
  not rule it out (``x = 5`` with pages [1, 4] and [6, 10]);
- **Bloom filters**: ``=``/``IN`` conjuncts on columns whose footers hold Bloom filters
  skip the row groups whose filters rule out every value;
- **predicate cache** (:mod:`squall.driver.skipping.predicate_cache`): row groups where a
  predicate the scan's predicate implies matched no row are skipped, and the row groups
  whose outcome it does not know are listed for the workers to record (the *probe*).

Page indexes and Bloom filters are read by DuckDB (:mod:`squall.driver.skipping.page_index`)
from local files, and for object-store tables from a metadata mirror
(:mod:`squall.driver.skipping.metadata_mirror`: footer and index bytes fetched with ranged GETs),
each once per file stamp (a file's whole page index: DuckDB parses all of it; the Bloom
filters of the filtered columns), only when the footer says the file has them and min/max
left row groups to check; page-index verdicts are kept per (file, stamp, predicate). All counts travel in the scan's
:class:`~squall.plan.DataSkipping` (explain, stats).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from squall.driver.catalog.tables import RowGroup, TableInfo
from squall.driver.estimate.selectivity import conjunction_selectivity
from squall.driver.ir import nodes as L
from squall.driver.planner.core import Context
from squall.driver.skipping import metadata_mirror
from squall.driver.skipping import page_index as pi
from squall.driver.skipping.predicate_cache import PredicateCache
from squall.driver.skipping.predicates import equality_values, parse_key, predicate_key
from squall.errors import DataError
from squall.operators.storage import Storage, scheme_of
from squall.plan import DataSkipping

#: most values of an IN list probed against Bloom filters (each value is one probe per file)
BLOOM_MAX_VALUES = 64

#: page-index verdicts kept: (file, stamp, predicate key, row groups checked) -> the row groups skipped
VERDICTS_KEPT = 4096
_VERDICTS: OrderedDict[tuple[str, str, str, tuple[int, ...]], frozenset[int]] = OrderedDict()
_VERDICTS_LOCK = threading.Lock()

#: (path, stamp, Bloom-filter columns wanted, page index wanted) -> where DuckDB reads that file's indexes
IndexSource = Callable[[str, str, frozenset[str], bool], pi.IndexFile | None]


def skip(
    info: TableInfo,
    source_of: Mapping[str, str],
    filters: Sequence[exp.Expression],
    kept: list[RowGroup],
    *,
    cache: PredicateCache | None,
    bloom: bool,
    stamp_of: Callable[[str], str],
    probe_sql: str,
    probe: bool = True,
    probe_note: str = "",
    page_index: bool = False,
    index_source: IndexSource | None = None,
) -> tuple[list[RowGroup], DataSkipping]:
    """The row groups to read after page indexes, Bloom filters and the predicate cache, and what was
    skipped; with ``probe`` the row groups the cache knows nothing about are listed for the workers to
    record. ``index_source`` locates a file's indexes (default: local files read in place)."""
    planned, minmax = len(info.row_groups), len(info.row_groups) - len(kept)
    if not filters:
        return kept, DataSkipping(planned, minmax)
    key = predicate_key(filters, source_of)
    stamps: dict[str, str] = {}

    def stamp(path: str) -> str:
        if path not in stamps:
            stamps[path] = stamp_of(path)
        return stamps[path]

    source = index_source or local_indexes(info.footers)
    # a file read through a FileRead names its columns its own way (renamed, dropped and re-added, a partition
    # value over a file column): its indexes, looked up by table column, could rule out rows that are there
    plain = [rg for rg in kept if rg.path not in info.file_reads]
    paged = _page_index_kept(plain, key, info.schema, stamp, source) if page_index and plain else plain
    excluded = _bloom_excluded(paged, key, info.schema, stamp, source) if bloom else set()
    paged_keys = {(rg.path, rg.index) for rg in paged}
    after_pages = [rg for rg in kept if rg.path in info.file_reads or (rg.path, rg.index) in paged_keys]
    after_bloom = [rg for rg in after_pages if (rg.path, rg.index) not in excluded]
    n_bloom, n_pages = len(after_pages) - len(after_bloom), len(kept) - len(after_pages)
    if cache is None:
        return after_bloom, DataSkipping(planned, minmax, n_bloom, predicate=key, page_index=n_pages)
    out: list[RowGroup] = []
    probed: list[tuple[str, int, int, int, str]] = []
    for rg in after_bloom:
        st = stamp(rg.path)
        outcome = cache.lookup(rg.path, rg.index, st, key)
        if outcome == "empty":
            continue
        out.append(rg)
        if outcome is None and st and probe:
            probed.append((rg.path, rg.index, rg.first_row, rg.first_row + rg.num_rows, st))
    return out, DataSkipping(
        planned,
        minmax,
        n_bloom,
        len(after_bloom) - len(out),
        key,
        tuple(probed),
        probe_sql if probed else "",
        probe_note,
        page_index=n_pages,
    )


# --- where a file's indexes are read -------------------------------------------------------------------


def local_indexes(footers: Mapping[str, pq.FileMetaData]) -> IndexSource:
    """Local files read in place; what they hold from their footers (from DuckDB when not loaded)."""

    def source(path: str, stamp: str, bloom_columns: frozenset[str], page_index: bool) -> pi.IndexFile | None:
        if scheme_of(path) != "file" or not stamp:
            return None
        footer = footers.get(path)
        if footer is None:
            with_bloom = pi.bloom_columns(path, stamp) if bloom_columns else frozenset()
            return pi.IndexFile(path, with_bloom & bloom_columns, page_index)
        return pi.IndexFile(
            path,
            pi.bloom_columns_of(footer) & bloom_columns,
            page_index and pi.has_page_index(footer, _page_columns(footer)),
        )

    return source


def mirrored_indexes(footers: Mapping[str, pq.FileMetaData], storage: Storage) -> IndexSource:
    """Object-store files through metadata mirrors, made only when the footer shows the indexes asked for."""

    def source(path: str, stamp: str, bloom_columns: frozenset[str], page_index: bool) -> pi.IndexFile | None:
        footer = footers.get(path)
        if footer is None or not stamp:
            return None
        blooms = pi.bloom_columns_of(footer) & bloom_columns
        pages = page_index and pi.has_page_index(footer, _page_columns(footer))
        if not blooms and not pages:
            return None
        return metadata_mirror.store().mirror(
            storage, path, stamp, bloom_columns=blooms, page_index=pages, footer=footer
        )

    return source


def _page_columns(footer: pq.FileMetaData) -> list[str]:
    group = footer.row_group(0) if footer.num_row_groups else None
    return [group.column(i).path_in_schema for i in range(group.num_columns)] if group else []


# --- page indexes --------------------------------------------------------------------------------------


def _page_index_kept(
    groups: list[RowGroup], key: str, schema: pa.Schema, stamp: Callable[[str], str], source: IndexSource
) -> list[RowGroup]:
    """The row groups where some row lies on a matching page of every filtered column (page indexes)."""
    pred = parse_key(key)
    types = {}
    for col in sorted({c for c, _r in pred.ranges} | {c for c, _s in pred.ins}):
        typ = pi.bound_type(schema.field(col).type) if col in schema.names else None
        if typ is not None:
            types[col] = typ
    if not types:
        return groups
    bounds = {c: pred.column_range(c) for c in types}
    values = {c: pi.sorted_values(pred.column_values(c)) for c in types}
    by_path: dict[str, list[RowGroup]] = {}
    for rg in groups:
        by_path.setdefault(rg.path, []).append(rg)
    dropped: set[tuple[str, int]] = set()
    for path, of_path in by_path.items():
        st = stamp(path)
        if not st:
            continue
        verdict_key = (path, st, key, tuple(rg.index for rg in of_path))
        with _VERDICTS_LOCK:
            verdict = _VERDICTS.get(verdict_key)
            if verdict is not None:
                _VERDICTS.move_to_end(verdict_key)
        if verdict is None:
            where = source(path, st, frozenset(), True)
            pages = (
                pi.PAGE_INDEXES.pages(where.path, st, types) if where is not None and where.page_index else {}
            )
            verdict = frozenset(
                rg.index for rg in of_path if pages and _no_matching_page(pages, rg, bounds, values)
            )
            with _VERDICTS_LOCK:
                _VERDICTS[verdict_key] = verdict
                while len(_VERDICTS) > VERDICTS_KEPT:
                    _VERDICTS.popitem(last=False)
        dropped |= {(path, i) for i in verdict}
    return [rg for rg in groups if (rg.path, rg.index) not in dropped]


def _no_matching_page(
    pages: Mapping[str, pi.ColumnPages],
    rg: RowGroup,
    bounds: Mapping[str, Any],
    values: Mapping[str, list[Any] | None],
) -> bool:
    """Whether the page index shows row group ``rg`` holds no row matching on every column."""
    of_group = {}
    for col, groups in pages.items():
        col_pages = groups.get(rg.index, ())
        if col_pages and sum(p.num_rows for p in col_pages) == rg.num_rows:  # a consistent index only
            of_group[col] = col_pages
    return bool(of_group) and pi.no_matching_row(of_group, bounds, values)


# --- Bloom filters -------------------------------------------------------------------------------------


def _bloom_excluded(
    groups: list[RowGroup], key: str, schema: pa.Schema, stamp: Callable[[str], str], source: IndexSource
) -> set[tuple[str, int]]:
    """(path, row group) whose Bloom filters rule out every allowed value of some column."""
    wanted = {
        col: values
        for col, values in equality_values(key).items()
        if col in schema.names
        and _probe_safe(schema.field(col).type, values)
        and len(values) <= BLOOM_MAX_VALUES
    }
    if not wanted:
        return set()
    out: set[tuple[str, int]] = set()
    for path in sorted({rg.path for rg in groups}):
        st = stamp(path)
        where = source(path, st, frozenset(wanted), False) if st else None
        if where is None:
            continue
        for col, values in wanted.items():
            if col not in where.bloom_columns:
                continue
            excluded_by_all: frozenset[int] | None = None
            for v in values:
                ex = pi.bloom_excludes(where.path, st, col, v)
                excluded_by_all = ex if excluded_by_all is None else excluded_by_all & ex
            out |= {(path, rg) for rg in excluded_by_all or ()}
    return out


def _probe_safe(typ: pa.DataType, values: list[Any]) -> bool:
    """Values whose type matches the column's exactly (a Bloom filter hashes the physical value)."""
    if pa.types.is_integer(typ):
        return all(isinstance(v, int) for v in values)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return all(isinstance(v, str) for v in values)
    if pa.types.is_date32(typ):
        return all(isinstance(v, dt.date) for v in values)
    return False


def without_probe(sk: DataSkipping | None, note: str) -> DataSkipping | None:
    """``sk`` with no probe (its rows cannot be attributed to row groups), and why."""
    if sk is None or not sk.probe:
        return sk
    return dataclasses.replace(sk, probe=(), probe_sql="", probe_note=note)


def for_scan(
    ctx: Context, info: TableInfo, node: L.Scan, source_of: Mapping[str, str], kept: list[RowGroup]
) -> tuple[list[RowGroup], DataSkipping | None]:
    """The scan rule's hook: page indexes, Bloom filters and predicate cache as the planner options say."""
    if info.scan != "parquet":
        return kept, None
    options = ctx.options
    cache = ctx.catalog.predicate_cache if options.predicate_cache else None
    if not isinstance(cache, PredicateCache):
        cache = None

    def stamp_of(path: str) -> str:
        try:
            return ctx.catalog.storage(info.location).stamp(path)
        except DataError:  # no storage (a catalog snapshot): nothing known about the files
            return ""

    index_source: IndexSource | None = None
    if scheme_of(info.location) != "file":
        try:
            index_source = mirrored_indexes(info.footers, ctx.catalog.storage(info.location))
        except DataError:
            index_source = None
    expected = _expected_rows_per_group(info, source_of, node.filters)
    probe = expected <= options.probe_rows_per_group
    note = "" if probe else f"not probed: ~{expected:.0f} rows per row group expected to pass"
    return skip(
        info,
        source_of,
        node.filters,
        kept,
        cache=cache,
        bloom=options.bloom_filters,
        stamp_of=stamp_of,
        probe_sql=" AND ".join(f"({L.sql_of(f)})" for f in node.filters),
        probe=probe,
        probe_note=note,
        page_index=options.page_index,
        index_source=index_source,
    )


def _expected_rows_per_group(
    info: TableInfo, source_of: Mapping[str, str], filters: Sequence[exp.Expression]
) -> float:
    """The planner's estimate of rows passing the filters in an average row group (a row group where
    many rows are expected to pass is unlikely to be empty: probing it costs more than it may save)."""
    if not filters or not info.row_groups:
        return 0.0
    sel = conjunction_selectivity(filters, lambda name: info.column_range(source_of.get(name, name)))
    return sel * info.num_rows / len(info.row_groups)
