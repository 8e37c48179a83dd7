"""Scan operator: reads one rank's share of a table; the Parquet scan (its row groups, needed columns)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squall.errors import DataError
from squall.operators.scan_kinds import reader
from squall.operators.storage import Storage
from squall.plan import FileRead, ScanInput, Split


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
    """Rows of ``splits`` (splits of ``spec``, any rank's) through the Storage, in the scan's schema.

    A file with a :class:`~squall.plan.FileRead` in ``spec.files`` is read through it (renamed and
    missing columns, partition constants, deleted rows); every other file holds the table's columns
    under their own names.
    """
    schema = scan_schema(spec)
    sources = [source for source, _name in spec.columns]
    reads = {f.path: f for f in spec.files}
    deletes = _DeleteCache(storage_of)
    tables = []
    for split in splits:
        storage = storage_of(split.path)
        file_read = reads.get(split.path)
        if file_read is None:
            table = storage.read_row_groups(split.path, split.row_groups, sources)
            tables.append(table.select(sources).rename_columns(schema.names))
        else:
            tables.append(_read_mapped(split, file_read, sources, schema, storage, deletes))
    if not tables:
        return schema.empty_table()
    if len(tables) == 1:
        return tables[0].cast(schema) if tables[0].schema != schema else tables[0]
    return pa.concat_tables([t.cast(schema) if t.schema != schema else t for t in tables])


def _read_mapped(
    split: Split,
    file_read: FileRead,
    sources: list[str],
    schema: pa.Schema,
    storage: Storage,
    deletes: _DeleteCache,
) -> pa.Table:
    """One split of a file read through its :class:`FileRead`, in the scan's schema."""
    physical = dict(file_read.columns)
    constants = dict(file_read.constants)
    wanted = [physical.get(c, c) for c in sources if c not in constants and physical.get(c, c) != ""]
    read = storage.read_row_groups(split.path, split.row_groups, list(dict.fromkeys(wanted)))
    rows = read.num_rows
    arrays = []
    for source, target in zip(sources, schema):
        if source in constants:
            arrays.append(_constant(constants[source], target.type, rows))
        elif (column := physical.get(source, source)) == "":
            arrays.append(pa.nulls(rows, target.type))
        else:
            arrays.append(_widen(read.column(column), target.type, source, split.path))
    table = pa.Table.from_arrays(arrays, schema=schema)
    deleted = deletes.positions(file_read)
    if deleted is None:
        return table
    ranges = _row_ranges(split)
    positions = (
        np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in ranges]) if ranges else np.empty(0)
    )
    if len(positions) != rows:
        raise DataError(f"cannot apply deletes to {split.path}: its rows are not numbered in the plan")
    keep = ~np.isin(positions, deleted, assume_unique=False)
    return table if keep.all() else table.filter(pa.array(keep))


def _row_ranges(split: Split) -> tuple[tuple[int, int], ...]:
    return split.row_ranges if split.row_ranges else ((0, split.rows),) if split.whole_file else ()


def _constant(value: str | None, type_: pa.DataType, rows: int) -> pa.Array:
    if value is None:
        return pa.nulls(rows, type_)
    scalar = pa.array([value], pa.string()).cast(type_)[0]
    return pa.array([scalar.as_py()] * rows, type_) if rows else pa.array([], type_)


def _widen(column: pa.ChunkedArray, type_: pa.DataType, name: str, path: str) -> pa.ChunkedArray:
    if column.type == type_:
        return column
    try:
        return column.cast(type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(
            f"column {name} of {path} is {column.type}, cannot be read as {type_}: {exc}"
        ) from None


class _DeleteCache:
    """Deleted row positions per data file, each position-delete file read once per call of read_splits."""

    def __init__(self, storage_of: Callable[[str], Storage]) -> None:
        self._storage_of = storage_of
        self._files: dict[str, pa.Table] = {}

    def positions(self, file_read: FileRead) -> np.ndarray | None:
        """The sorted deleted positions of ``file_read``'s file, or None when nothing is deleted."""
        parts = []
        if file_read.deleted_rows:
            parts.append(np.frombuffer(base64.b64decode(file_read.deleted_rows), dtype="<i8"))
        for path in file_read.position_deletes:
            table = self._read(path)
            mask = pc.equal(table.column("file_path"), file_read.path)
            parts.append(table.column("pos").filter(mask).to_numpy().astype(np.int64))
        if not parts:
            return None
        return np.unique(np.concatenate(parts))

    def _read(self, path: str) -> pa.Table:
        if path not in self._files:
            storage = self._storage_of(path)
            metadata = storage.read_metadata(path)
            table = storage.read_row_groups(
                path, range(metadata.num_row_groups), ["file_path", "pos"], metadata
            )
            self._files[path] = table.cast(pa.schema([("file_path", pa.string()), ("pos", pa.int64())]))
        return self._files[path]
