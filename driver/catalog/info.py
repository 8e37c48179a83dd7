"""What the planner knows about a table before reading any data: files, schema, row groups.

:class:`TableInfo` is made by a table source (:mod:`squall.driver.catalog.source`) and
kept by the :class:`~squall.driver.catalog.tables.Catalog` (which re-exports these names).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from squall.plan import FileRead


@dataclass(frozen=True)
class ColumnChunkStats:
    """Min/max/null count of one column in one row group (None when unknown)."""

    min: Any
    max: Any
    null_count: int | None
    compressed_bytes: int
    uncompressed_bytes: int


def chunk_stats(chunk: pq.ColumnChunkMetaData) -> ColumnChunkStats:
    """The statistics of one column chunk as its footer gives them (None where absent or undecodable)."""
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
    #: how workers read each file that does not hold the table's columns as written (path -> FileRead:
    #: renamed or missing columns, partition values, deletes), from the table's source
    #: (:mod:`squall.driver.catalog.source`); empty for plain Parquet files of one schema. Row-group
    #: statistics are keyed by *table* column (a partition column's min = max = its value)
    file_reads: Mapping[str, FileRead] = field(default_factory=dict, compare=False, repr=False)
    #: what the planner and explain should say about the table's source: format, pinned snapshot,
    #: partitions and files kept of total, as (key, value) pairs
    source_notes: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @functools.cached_property
    def num_rows(self) -> int:
        return sum(rg.num_rows for rg in self.row_groups)

    @functools.cached_property
    def _column_bytes(self) -> dict[str, int]:
        return {}  # filled by column_bytes: the planner asks for the same columns many times per query

    def column_bytes(self, column: str) -> int:
        """Uncompressed bytes of a column over the whole table."""
        known = self._column_bytes.get(column)
        if known is None:
            known = sum(
                rg.columns[column].uncompressed_bytes for rg in self.row_groups if column in rg.columns
            )
            self._column_bytes[column] = known
        return known

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
