"""Hash partitioning: split a table by a partition-id column into one table per receiver."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

PART_COLUMN = "__squall_part"
#: skew-aware exchanges keyed by one integer column: the key as BIGINT (``Output.range_sql``)
RANGE_COLUMN = "__squall_range"
#: skew-aware exchanges of an outer join: whether a partitioning key is NULL (``Output.null_sql``)
NULL_COLUMN = "__squall_nullkey"


def split_range_sql(key_sql: str, ranges: tuple[tuple[int, int], ...]) -> str:
    """SQL of the receiving rank of a row by ``Output.split_ranges``: the range whose lowest key is the
    largest one at most the row's key (below the first range: its rank; a NULL key: the last range's)."""
    key = f"({key_sql})::BIGINT"
    whens = " ".join(f"WHEN {key} < {lo} THEN {rank}" for (_l, rank), (lo, _r) in itertools.pairwise(ranges))
    return f"CASE {whens} ELSE {ranges[-1][1]} END" if whens else str(ranges[-1][1])


def split_by_partition(table: pa.Table, partitions: int, column: str = PART_COLUMN) -> list[pa.Table]:
    """Tables ``out[p]`` holding the rows whose ``column`` equals p (column dropped).

    One stable counting sort (numpy radix sort on small ints) and zero-copy slices; none when the rows are
    already grouped by partition (see :func:`grouped_batches`).
    """
    return _slices(table.drop_columns([column]), _ids(table, column, partitions), partitions)


def addressed_batches(
    batches: Iterable[pa.RecordBatch], receivers: Sequence[int], rank: int, report: Any
) -> Iterator[dict[int, pa.Table]]:
    """Each batch of a partitioned output (the receiver's index in PART_COLUMN) split by receiver as it comes, as
    :meth:`~squall.exchange.base.Exchange.send_pieces` takes it; ``report`` (a stage report) gains the bytes
    bound for ranks other than ``rank`` (``bytes_to_others``) and the seconds the splitting took
    (``partition_s``)."""
    for batch in batches:
        t = time.perf_counter()
        parts = split_by_partition(pa.Table.from_batches([batch]), len(receivers))
        report.bytes_to_others += sum(p.nbytes for r, p in zip(receivers, parts) if r != rank)
        report.partition_s += time.perf_counter() - t
        yield dict(zip(receivers, parts))


def _ids(table: pa.Table, column: str, partitions: int) -> np.ndarray:
    # small unsigned ids: numpy's stable argsort is then a linear-time radix sort
    ids = table.column(column).to_numpy(zero_copy_only=False)
    return ids.astype(np.uint16 if partitions <= 65536 else np.int64, copy=False)


def _slices(data: pa.Table, ids: np.ndarray, partitions: int) -> list[pa.Table]:
    """``data``'s rows of partition p (``ids``: each row's) as ``out[p]``."""
    if partitions == 1:
        return [data]
    counts = np.bincount(ids, minlength=partitions)
    if (counts > 0).sum() <= 1:
        target = int(np.argmax(counts)) if len(ids) else 0
        return [data if p == target else data.schema.empty_table() for p in range(partitions)]
    # rows already grouped by partition (grouped_batches' output): slices of the table as it is, no copy
    ordered = (
        data if bool(np.all(ids[1:] >= ids[:-1])) else data.take(pa.array(np.argsort(ids, kind="stable")))
    )
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return [ordered.slice(int(offsets[p]), int(counts[p])) for p in range(partitions)]


#: rows per batch a partitioned stage output is read in (see :func:`grouped_batches`)
BATCH_ROWS = 1 << 17


def grouped_batches(batches: pa.RecordBatchReader, partitions: int, column: str = PART_COLUMN) -> pa.Table:
    """The rows of ``batches`` (a stage output with a partition-id ``column`` in [0, ``partitions``), read from
    DuckDB a batch at a time) as one table grouped by partition, ``column`` kept: each batch is split as it
    arrives, so the output is never held twice (a whole table and its partitions) — at its peak a worker holds
    the output once and a batch. :func:`split_by_partition` then cuts the groups without a copy."""
    pieces: list[list[pa.Table]] = [[] for _ in range(partitions)]
    for batch in batches:
        table = pa.Table.from_batches([batch])
        for p, piece in enumerate(_slices(table, _ids(table, column, partitions), partitions)):
            if piece.num_rows:
                pieces[p].append(piece)
    grouped = [piece for group in pieces for piece in group]
    return pa.concat_tables(grouped) if grouped else batches.schema.empty_table()
