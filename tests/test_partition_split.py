"""Hash partitioning of a stage's output (operators/partition.py): read a batch at a time and grouped by
receiver as it comes (never held twice), then cut into one table per receiver without a copy."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from squall.operators.duck import Sandbox
from squall.operators.partition import PART_COLUMN, grouped_batches, split_by_partition


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def test_grouped_batches_keep_every_row_with_its_receiver():
    rng = np.random.default_rng(7)
    n, receivers = 10_000, 4
    source = pa.table({"k": np.arange(n), "v": rng.random(n), PART_COLUMN: rng.integers(0, receivers, n)})
    reader = pa.RecordBatchReader.from_batches(source.schema, source.to_batches(max_chunksize=777))
    grouped = grouped_batches(reader, receivers)
    ids = grouped.column(PART_COLUMN).to_numpy()
    assert np.all(ids[1:] >= ids[:-1])  # grouped by receiver
    parts = split_by_partition(grouped, receivers)
    expected = split_by_partition(source, receivers)  # the one-table path (a sort and a copy)
    for got, want in zip(parts, expected, strict=True):
        assert _rows(got) == _rows(want)
    # the grouped table is cut, not copied: each part's buffers are the grouped table's own
    grouped_buffers = {
        b.address for col in grouped.columns for chunk in col.chunks for b in chunk.buffers() if b
    }
    part_buffers = {
        b.address for p in parts for col in p.columns for chunk in col.chunks for b in chunk.buffers() if b
    }
    assert part_buffers <= grouped_buffers


def test_grouped_batches_of_nothing_and_of_one_receiver():
    schema = pa.schema([("k", pa.int64()), (PART_COLUMN, pa.int64())])
    empty = grouped_batches(pa.RecordBatchReader.from_batches(schema, []), 3)
    assert empty.schema == schema and empty.num_rows == 0
    one = pa.table({"k": [1, 2, 3], PART_COLUMN: [2, 2, 2]})
    parts = split_by_partition(
        grouped_batches(pa.RecordBatchReader.from_batches(one.schema, one.to_batches()), 3), 3
    )
    assert [p.num_rows for p in parts] == [0, 0, 3]


def test_a_sandbox_streams_a_result_in_batches():
    with (
        Sandbox(threads=1) as db,
        db.batches(f"SELECT range AS k, range % 3 AS {PART_COLUMN} FROM range(5000)", 1000) as r,
    ):
        grouped = grouped_batches(r, 3)
    assert grouped.num_rows == 5000
    assert [p.num_rows for p in split_by_partition(grouped, 3)] == [1667, 1667, 1666]
    with Sandbox(threads=1) as db:  # a reader left unread does not block the next statement once closed
        with db.batches("SELECT * FROM range(100000)", 10) as r:
            r.read_next_batch()
        assert db.query("SELECT 42 AS x")["x"].to_pylist() == [42]
