"""An exchange input too large to hold is read from disk a batch at a time into a DuckDB table of its own
(issue 38): DuckDB then knows its size — a scanned Arrow dataset is estimated at ~1 row, and a join would build
its hash table on it — and keeps it within its memory limit."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from squall.operators.duck import Sandbox
from squall.operators.received import batch_stream, dataset_batches


def _file(path, start: int, rows: int, batch: int) -> str:
    table = pa.table({"k": pa.array(range(start, start + rows), pa.int64())})
    with pa.ipc.new_file(
        str(path), table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")
    ) as writer:
        writer.write_table(table, max_chunksize=batch)
    return str(path)


def test_batches_come_in_order_from_files_and_held_parts(tmp_path):
    files = ds.dataset([_file(tmp_path / "a.arrow", 0, 2500, 1000), _file(tmp_path / "b.arrow", 2500, 500, 1000)],
                       format="ipc")  # fmt: skip
    own = pa.table({"k": pa.array(range(3000, 3100), pa.int64())})
    batches = list(dataset_batches(ds.dataset([ds.dataset(own), files])))
    assert [b.num_rows for b in batches] == [100, 1000, 1000, 500, 500]
    assert pa.Table.from_batches(batches).column("k").to_pylist() == [*range(3000, 3100), *range(3000)]


def test_a_loaded_input_has_its_real_size_for_the_optimizer(tmp_path):
    big = ds.dataset(_file(tmp_path / "big.arrow", 0, 200_000, 10_000), format="ipc")
    small = pa.table({"s": pa.array(range(0, 200_000, 100), pa.int64())})
    with Sandbox({"small": small}) as db:
        db.register("scanned", big)
        assert "~1 row" in db.relation("EXPLAIN SELECT * FROM scanned").fetchall()[0][1]
        db.unregister("scanned")
        db.load("big", batch_stream(big))
        plan = db.relation("EXPLAIN SELECT count(*) FROM big JOIN small ON k = s").fetchall()[0][1]
        assert "~200,000 rows" in plan, plan
        assert db.query("SELECT count(*) AS n FROM big JOIN small ON k = s").column("n")[0].as_py() == 2000
        db.drop("big")
        assert (
            db.query("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'big'")["n"][0].as_py()
            == 0
        )


def test_a_narrowed_file_input_is_read_without_its_dropped_column(tmp_path):
    """A run-time join's side kept in place is read from the file it was held in, without the partition
    column it was held with (``Received.without``)."""
    from squall.operators.received import gather

    rows = pa.table(
        {"k": pa.array(range(5000), pa.int64()), "__part": pa.array([i % 3 for i in range(5000)])}
    )
    held = gather(rows.to_batches(max_chunksize=1000), 1000, str(tmp_path), "held")
    assert held.on_disk
    kept = held.without("__part")
    assert held.path is None and kept.path is not None  # the file is the kept input's now
    assert kept.data.schema.names == ["k"]
    assert all(b.schema.names == ["k"] for b in kept.batches())
    with Sandbox({}) as db:
        db.load("kept", batch_stream(kept.data))
        assert db.query("SELECT count(*) AS n, sum(k) AS s FROM kept").to_pylist() == [
            {"n": 5000, "s": sum(range(5000))}
        ]
        db.drop("kept")
    kept.close()
    assert list(tmp_path.iterdir()) == []


def test_an_error_duckdb_meets_while_it_streams_is_its_own_exception():
    """A bad cast found only in a later batch reaches the worker as DuckDB's ConversionException (one line for
    the user), not as the OSError Arrow's reader would raise."""
    import duckdb
    import pytest

    sql = "SELECT CAST(CASE WHEN i > 300000 THEN 'x' ELSE '1' END AS INTEGER) AS v FROM range(400000) t(i)"
    with (
        Sandbox({}) as db,
        pytest.raises(duckdb.ConversionException, match=r"^Conversion Error: Could not"),
        db.batches(sql, 10_000) as batches,
    ):
        for _batch in batches:
            pass


def test_a_stream_read_under_other_names_keeps_its_rows(tmp_path):
    """An exchange read by a second reader under its own column names (ExchangeInput.columns) from disk."""
    files = ds.dataset(_file(tmp_path / "a.arrow", 0, 2500, 1000), format="ipc")
    renamed = batch_stream(files, ["k_2"])
    assert renamed.schema.names == ["k_2"] and renamed.schema.field("k_2").type == pa.int64()
    assert renamed.read_all().column("k_2").to_pylist() == list(range(2500))
    with pytest.raises(ValueError):
        batch_stream(files, ["a", "b"])  # one name per column
