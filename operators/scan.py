"""Scan operator: reads one rank's share of a table; the Parquet scan (its row groups, needed columns)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squall.operators.scan_kinds import reader
from squall.operators.storage import Storage
from squall.plan import ScanInput, Split


def scan_schema(spec: ScanInput) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec.schema_b64)))


def read_scan(spec: ScanInput, rank: int, storage_of: Callable[[str], Storage]) -> pa.Table:
    """Rows of ``spec`` for ``rank``, with columns renamed to the stage's names.

    The reader is looked up by the scan's kind (``spec.scan``) in
    :mod:`squall.operators.scan_kinds`; ``parquet`` is :func:`read_parquet`.
    """
    table = reader(spec.scan)(spec, rank, storage_of)
    if (bounds := spec.bounds_for(rank)) is None or bounds == (None, None):
        return table
    name = dict(spec.columns)[spec.key_column]
    return _keep(table, _within(table.column(name), bounds))


def _keep(table: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
    """The rows of ``table`` where ``mask`` holds, as zero-copy slices of its runs (keys in order: a run or
    two; Arrow has no filter/take kernel for every type, e.g. ``string_view``), else Arrow's filter."""
    rows = pc.indices_nonzero(mask).to_numpy()
    if len(rows) == table.num_rows:
        return table
    if len(rows) == 0:
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) > 64:
        try:
            return table.filter(mask)
        except pa.ArrowNotImplementedError:
            pass
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(rows)]])
    return pa.concat_tables(
        [table.slice(int(rows[a]), int(rows[b - 1] - rows[a] + 1)) for a, b in zip(starts, ends)]
    )


def key_bound_sql(column_sql: str, bounds: tuple[int | None, int | None]) -> str:
    """SQL that holds for a row whose ``column_sql`` lies in ``bounds`` = [low, high) (None: unbounded)."""
    low, high = bounds
    parts = [f"{column_sql} >= {int(low)}"] if low is not None else []
    parts += [f"{column_sql} < {int(high)}"] if high is not None else []
    return " AND ".join(parts) or "TRUE"


def _within(column: pa.ChunkedArray, bounds: tuple[int | None, int | None]) -> pa.ChunkedArray:
    low, high = bounds
    if low is not None and high is not None:
        return pc.and_(pc.greater_equal(column, low), pc.less(column, high))
    return pc.greater_equal(column, low) if low is not None else pc.less(column, high)


def read_parquet(spec: ScanInput, rank: int, storage_of: Callable[[str], Storage]) -> pa.Table:
    """The ``parquet`` scan kind: the Storage reads each split's row groups (only the needed column chunks)."""
    return read_splits(spec, spec.splits_for(rank), storage_of)


def read_splits(spec: ScanInput, splits: Sequence[Split], storage_of: Callable[[str], Storage]) -> pa.Table:
    """Rows of ``splits`` (splits of ``spec``, any rank's) through the Storage, in the scan's schema."""
    schema = scan_schema(spec)
    sources = [source for source, _name in spec.columns]
    tables = []
    for split in splits:
        storage = storage_of(split.path)
        table = storage.read_row_groups(split.path, split.row_groups, sources)
        tables.append(table.select(sources).rename_columns(schema.names))
    if not tables:
        return schema.empty_table()
    if len(tables) == 1:
        return tables[0].cast(schema) if tables[0].schema != schema else tables[0]
    return pa.concat_tables([t.cast(schema) if t.schema != schema else t for t in tables])
