"""Row-group skipping beyond min/max: Parquet Bloom filters and the predicate cache.

Called by the scan rule (:mod:`~squall.driver.planner.scans`) with the row groups
left after min/max pruning. Equality and ``IN`` conjuncts on columns whose footers
hold Bloom filters skip the row groups whose filters rule out every value (local
files; DuckDB's ``parquet_bloom_probe`` reads them — PyArrow writes but does not
read Parquet Bloom filters). Then the predicate cache
(:mod:`squall.driver.predicate_cache`) skips row groups where a predicate the
scan's predicate implies matched no row, and lists the row groups whose outcome it
does not know: the workers record them (the *probe*). All counts travel in the
scan's :class:`~squall.plan.DataSkipping` (explain, stats).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.driver import logical as L
from squall.driver.catalog import RowGroup, TableInfo
from squall.driver.estimate import conjunction_selectivity
from squall.driver.planner.core import Context
from squall.driver.predicate_cache import PredicateCache
from squall.driver.predicates import equality_values, predicate_key
from squall.errors import DataError
from squall.operators.storage import scheme_of
from squall.plan import DataSkipping

#: most values of an IN list probed against Bloom filters (each value is one probe per file)
BLOOM_MAX_VALUES = 64


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
) -> tuple[list[RowGroup], DataSkipping]:
    """The row groups to read after Bloom filters and the predicate cache, and what was skipped; with
    ``probe`` the row groups the cache knows nothing about are listed for the workers to record."""
    planned, minmax = len(info.row_groups), len(info.row_groups) - len(kept)
    if not filters:
        return kept, DataSkipping(planned, minmax)
    key = predicate_key(filters, source_of)
    stamps: dict[str, str] = {}

    def stamp(path: str) -> str:
        if path not in stamps:
            stamps[path] = stamp_of(path)
        return stamps[path]

    excluded = _bloom_excluded(kept, key, info.schema, stamp) if bloom else set()
    after_bloom = [rg for rg in kept if (rg.path, rg.index) not in excluded]
    if cache is None:
        return after_bloom, DataSkipping(planned, minmax, len(kept) - len(after_bloom), 0, key)
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
        len(kept) - len(after_bloom),
        len(after_bloom) - len(out),
        key,
        tuple(probed),
        probe_sql if probed else "",
        probe_note,
    )


def _bloom_excluded(
    groups: list[RowGroup], key: str, schema: pa.Schema, stamp: Callable[[str], str]
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
    paths = sorted({rg.path for rg in groups if scheme_of(rg.path) == "file"})
    out: set[tuple[str, int]] = set()
    for path in paths:
        st = stamp(path)
        if not st:
            continue
        with_bloom = _bloom_columns(path, st)
        for col, values in wanted.items():
            if col not in with_bloom:
                continue
            excluded_by_all: frozenset[int] | None = None
            for v in values:
                ex = _probe(path, st, col, v)
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


def _connect(path: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB session that may read exactly one local file (the footer and Bloom filters)."""
    con = duckdb.connect(":memory:", config={"threads": 1})
    con.execute("SET allowed_paths = [?]", [path])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


@functools.lru_cache(maxsize=4096)
def _bloom_columns(path: str, stamp: str) -> frozenset[str]:
    """Columns of a file (at ``stamp``) whose footer points at Bloom filters."""
    try:
        with _connect(path) as con:
            rows = con.execute(
                "SELECT DISTINCT path_in_schema FROM parquet_metadata(?) WHERE bloom_filter_offset IS NOT NULL",
                [path],
            ).fetchall()
    except duckdb.Error:
        return frozenset()
    return frozenset(r[0] for r in rows)


@functools.lru_cache(maxsize=16384)
def _probe(path: str, stamp: str, column: str, value: Any) -> frozenset[int]:
    """Row groups of a file whose Bloom filter on ``column`` says ``value`` is absent."""
    try:
        with _connect(path) as con:
            rows = con.execute(
                "SELECT row_group_id FROM parquet_bloom_probe(?, ?, ?) WHERE bloom_filter_excludes",
                [path, column, value],
            ).fetchall()
    except duckdb.Error:
        return frozenset()
    return frozenset(int(r[0]) for r in rows)


def without_probe(sk: DataSkipping | None, note: str) -> DataSkipping | None:
    """``sk`` with no probe (its rows cannot be attributed to row groups), and why."""
    if sk is None or not sk.probe:
        return sk
    return dataclasses.replace(sk, probe=(), probe_sql="", probe_note=note)


def for_scan(
    ctx: Context, info: TableInfo, node: L.Scan, source_of: Mapping[str, str], kept: list[RowGroup]
) -> tuple[list[RowGroup], DataSkipping | None]:
    """The scan rule's hook: Bloom filters and predicate cache as the planner options say."""
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
