"""Hash partitioning: split a table by a partition-id column into one table per receiver."""

from __future__ import annotations

import itertools

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

    One stable counting sort (numpy radix sort on small ints) and zero-copy slices.
    """
    ids = table.column(column).to_numpy(zero_copy_only=False)
    # small unsigned ids: numpy's stable argsort is then a linear-time radix sort
    ids = ids.astype(np.uint16 if partitions <= 65536 else np.int64, copy=False)
    data = table.drop_columns([column])
    if partitions == 1:
        return [data]
    counts = np.bincount(ids, minlength=partitions)
    if (counts > 0).sum() <= 1:
        target = int(np.argmax(counts)) if len(ids) else 0
        return [data if p == target else data.schema.empty_table() for p in range(partitions)]
    order = np.argsort(ids, kind="stable")
    ordered = data.take(pa.array(order))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return [ordered.slice(int(offsets[p]), int(counts[p])) for p in range(partitions)]
