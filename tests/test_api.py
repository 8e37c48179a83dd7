"""The embedded Python API: connect, register, sql, explain, Result, stats, failures and clean-up."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall


def test_connect_registers_tables_and_runs(connections, sf001):
    con = connections.get(sf001, 2)
    assert {"lineitem", "orders", "nation"} <= set(con.tables())
    result = con.sql("SELECT count(*) AS n FROM nation")
    assert result.to_arrow().to_pydict() == {"n": [25]}
    assert result.columns == ["n"] and result.num_rows == 1 and len(result) == 1
    assert result.fetchall() == [(25,)]
    df = result.to_pandas()
    assert list(df.columns) == ["n"] and int(df["n"][0]) == 25


def test_stats_cover_rows_bytes_stages_workers(connections, sf001):
    con = connections.get(sf001, 2)
    result = con.sql("SELECT l_returnflag, sum(l_quantity) FROM lineitem GROUP BY 1")
    st = result.stats
    for key in ("elapsed_s", "planning_s", "execution_s", "rows", "rows_scanned", "bytes_scanned", "stages",
                "per_worker", "exchanges", "storage_requests", "workers", "query_id"):  # fmt: skip
        assert key in st, key
    assert st["rows"] == 3 and st["workers"] == 2
    assert st["rows_scanned"] == pq.read_metadata(str(sf001 / "lineitem.parquet")).num_rows
    assert st["bytes_scanned"] > 0
    assert len(st["per_worker"]) == 2
    assert sum(w["rows_scanned"] for w in st["per_worker"]) == st["rows_scanned"]
    first = st["stages"][0]
    assert first["rows_out"] > 0 and first["time_s"] > 0 and first["bytes_out"] > 0
    assert st["exchanges"] and st["exchanges"][0]["kind"] == "gather"


def test_scan_splits_row_groups_over_workers(tmp_path):
    pq.write_table(pa.table({"k": list(range(8000))}), tmp_path / "t.parquet", row_group_size=1000)
    with squall.connect(data=str(tmp_path), workers=4) as con:
        result = con.sql("SELECT sum(k) AS s FROM t")
        assert result.to_arrow()["s"][0].as_py() == sum(range(8000))
        assert [w["rows_scanned"] for w in result.stats["per_worker"]] == [2000] * 4
        # min/max pruning: only the row groups that can hold k >= 7500 are read
        pruned = con.sql("SELECT count(*) AS n FROM t WHERE k >= 7500")
        assert pruned.to_arrow()["n"][0].as_py() == 500
        assert pruned.stats["rows_scanned"] == 1000


def test_register_file_folder_and_glob(tmp_path, sf001_parts):
    files = sorted((sf001_parts / "orders").glob("*.parquet"))
    with squall.connect(workers=2) as con:
        con.register("o_file", str(files[0]))
        con.register("o_folder", str(sf001_parts / "orders"))
        con.register("o_glob", str(sf001_parts / "orders" / "*.parquet"))
        one = con.sql("SELECT count(*) AS n FROM o_file").to_arrow()["n"][0].as_py()
        folder = con.sql("SELECT count(*) AS n FROM o_folder").to_arrow()["n"][0].as_py()
        glob = con.sql("SELECT count(*) AS n FROM o_glob").to_arrow()["n"][0].as_py()
    assert folder == glob == sum(pq.read_metadata(str(f)).num_rows for f in files)
    assert one == pq.read_metadata(str(files[0])).num_rows


def test_register_errors_are_clear(tmp_path):
    with squall.connect(workers=1) as con:
        with pytest.raises(squall.DataError, match="location not found"):
            con.register("t", str(tmp_path / "missing.parquet"))
        with pytest.raises(squall.OptionError, match="invalid table name"):
            con.register("bad name", str(tmp_path))
        (tmp_path / "empty").mkdir()
        con.register("empty", str(tmp_path / "empty"))
        with pytest.raises(squall.DataError, match="no Parquet files"):
            con.sql("SELECT * FROM empty")


def test_empty_tables_and_empty_results(tmp_path):
    schema = pa.schema([("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())])
    pq.write_table(schema.empty_table(), tmp_path / "e.parquet")
    pq.write_table(
        pa.table({"k": [1, 2, 3], "v": [1.0, None, 3.0], "s": ["a", None, "c"]}), tmp_path / "t.parquet"
    )
    with squall.connect(data=str(tmp_path), workers=3) as con:
        assert con.sql("SELECT count(*) AS n, sum(v) AS s FROM e").to_arrow().to_pydict() == {
            "n": [0],
            "s": [None],
        }
        assert con.sql("SELECT * FROM t WHERE k > 10").num_rows == 0
        assert con.sql("SELECT k, count(*) FROM e GROUP BY k").num_rows == 0
        joined = con.sql("SELECT t.k FROM t JOIN e ON t.k = e.k").to_arrow()
        assert joined.num_rows == 0 and joined.column_names == ["k"]
        got = con.sql("SELECT k, v, s FROM t ORDER BY k").to_arrow().to_pydict()
        assert got == {"k": [1, 2, 3], "v": [1.0, None, 3.0], "s": ["a", None, "c"]}


def _private(tmp_path):
    """Connection options with an exchange root of the test's own (other tests may run alongside)."""
    root = tmp_path / "xchg"
    return root, {"exchange": "local", "exchange_options": {"root": str(root)}}


def _leftovers(root) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_runtime_error_is_clear_and_cleans_up(tmp_path):
    pq.write_table(pa.table({"s": ["1", "2", "x", "4"] * 1000}), tmp_path / "t.parquet")
    root, opts = _private(tmp_path)
    with squall.connect(data=str(tmp_path), workers=2, **opts) as con:
        with pytest.raises(squall.QueryRuntimeError, match="Could not convert string 'x'"):
            con.sql("SELECT sum(CAST(s AS INTEGER)) FROM t")
        # the pool is still usable after a failed query
        assert con.sql("SELECT count(*) AS n FROM t").to_arrow()["n"][0].as_py() == 4000
    assert _leftovers(root) == []


def test_exchange_folders_removed_after_success(tmp_path, sf001):
    root, opts = _private(tmp_path)
    with squall.connect(data=str(sf001), workers=2, **opts) as con:
        con.sql(
            "SELECT o_orderpriority, count(*) FROM orders JOIN customer ON o_custkey = c_custkey GROUP BY 1"
        )
        assert root.exists() and _leftovers(root) == []


def test_dead_worker_is_replaced_before_the_next_query(tmp_path):
    pq.write_table(pa.table({"k": list(range(100))}), tmp_path / "t.parquet")
    with squall.connect(data=str(tmp_path), workers=2) as con:
        assert con.sql("SELECT count(*) AS n FROM t").num_rows == 1
        victim = con.platform._procs[1]
        victim.kill()
        victim.wait()
        assert con.sql("SELECT count(*) AS n FROM t").to_arrow()["n"][0].as_py() == 100


def test_worker_crash_during_a_query_is_reported(tmp_path, monkeypatch):
    pq.write_table(pa.table({"k": list(range(100))}), tmp_path / "t.parquet")
    monkeypatch.setenv("SQUALL_FAULTS", "crash:rank=1:stage=1")
    root, opts = _private(tmp_path)
    with (
        squall.connect(data=str(tmp_path), workers=2, **opts) as con,
        pytest.raises(squall.WorkerError, match="rank 1 failed: worker process exited with code 17"),
    ):
        con.sql("SELECT count(*) AS n FROM t")
    assert _leftovers(root) == []


def test_explain_shows_stages_exchanges_and_sql(connections, sf001):
    text = connections.get(sf001, 2).explain(
        "SELECT o_orderpriority, count(*) FROM orders JOIN lineitem ON o_orderkey = l_orderkey GROUP BY 1"
    )
    assert "Stage 1" in text and "hash(" in text and "SELECT" in text and "result" in text


def test_closed_connection_refuses(sf001):
    con = squall.connect(data=str(sf001), workers=1)
    con.close()
    with pytest.raises(squall.OptionError, match="closed"):
        con.sql("SELECT 1")


def test_default_workers_is_core_count(sf001):
    with squall.connect(data=str(sf001)) as con:
        assert con.workers == (os.cpu_count() or 1)
