"""The embedded Python API: connect, register, sql, explain, Result, stats, failures and clean-up."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.options import PlannerOptions


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


def test_explain_shows_stages_exchanges_and_sql(sf001):
    # broadcasts off: at SF0.01 orders is small enough for every rank to read whole, and the join would not move
    with squall.connect(
        data=str(sf001), workers=2, planner_options=PlannerOptions(broadcast_limit=0.0)
    ) as con:
        text = con.explain(
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


# --- issue 18: DuckDB-grade Result API and query parameters ----------------------------------------------


def _duckdb_over(sf001):
    import duckdb

    db = duckdb.connect()
    for name in ("lineitem", "orders", "customer"):
        db.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{sf001 / (name + '.parquet')}')")
    return db


@pytest.mark.parametrize("q", [1, 3])
def test_df_types_match_duckdb(connections, sf001, q):
    from squall import tpch

    con = connections.get(sf001, 2)
    sql = tpch.query(q)
    ours = con.sql(sql).df()
    db = _duckdb_over(sf001)
    theirs = db.sql(sql).df()
    db.close()
    assert list(ours.columns) == list(theirs.columns)
    assert dict(ours.dtypes.astype(str)) == dict(theirs.dtypes.astype(str))
    # decimals are floats and dates datetimes, as in DuckDB (not object columns)
    if q == 1:
        assert str(ours["sum_qty"].dtype) == "float64"
    else:
        assert (
            str(ours["o_orderdate"].dtype).startswith("datetime64")
            and str(ours["revenue"].dtype) == "float64"
        )


def test_df_nullable_and_special_types_like_duckdb(connections, sf001):
    import duckdb

    con = connections.get(sf001, 1)
    sql = ("SELECT 1.5::DECIMAL(15,2) AS d, DATE '2020-01-01' AS dt, x AS i, CASE WHEN x = 1 THEN NULL ELSE x END "
           "AS ni, INTERVAL 3 DAY AS iv, x = 1 AS b FROM (VALUES (1), (2)) t(x) ORDER BY x")  # fmt: skip
    ours, theirs = con.sql(sql).df(), duckdb.sql(sql).df()
    assert dict(ours.dtypes.astype(str)) == dict(theirs.dtypes.astype(str))
    assert ours.equals(theirs)
    assert con.sql("SELECT 1 AS n").to_pandas().equals(con.sql("SELECT 1 AS n").df())


def test_arrow_pl_show_repr_html(connections, sf001, capsys, monkeypatch):
    import sys
    import types

    con = connections.get(sf001, 2)
    result = con.sql("SELECT n_nationkey, n_name FROM nation ORDER BY 1")
    assert result.arrow() is result.to_arrow() and result.arrow().num_rows == 25

    monkeypatch.setitem(sys.modules, "polars", None)  # not installed
    with pytest.raises(squall.OptionError, match=r"^pl\(\) needs polars: pip install polars$"):
        result.pl()
    fake = types.SimpleNamespace(from_arrow=lambda table: ("polars", table.num_rows))
    monkeypatch.setitem(sys.modules, "polars", fake)
    assert result.pl() == ("polars", 25)

    result.show(max_rows=6)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("┌") and "n_nationkey" in out[1] and "int64" in out[2] and "varchar" in out[2]
    assert "ALGERIA" in "\n".join(out) and "UNITED STATES" in "\n".join(out) and "25 rows" in "\n".join(out)
    assert len(out) < 20
    with pytest.raises(squall.OptionError):
        result.show(max_rows=0)

    text = repr(result)
    assert text.startswith("<squall.Result 25 rows x 2 columns>\n┌") and "ALGERIA" in text
    page = result._repr_html_()
    assert page.startswith("<table") and "<th>n_name<br><small>VARCHAR</small></th>" in page
    assert "<td>ALGERIA</td>" in page and "25 rows x 2 columns, 15 not shown" in page
    odd = con.sql("SELECT '<b>&' AS \"a<b\"")._repr_html_()
    assert "&lt;b&gt;&amp;" in odd and "a&lt;b" in odd and "<b>&" not in odd


def test_sql_params_positional_and_named(connections, sf001):
    con = connections.get(sf001, 2)
    got = con.sql(
        "SELECT n_name FROM nation WHERE n_nationkey = ? OR n_name = ? ORDER BY 1", params=[3, "PERU"]
    )
    assert got.fetchall() == [("CANADA",), ("PERU",)]
    got = con.sql("SELECT n_name FROM nation WHERE n_regionkey = $2 AND n_nationkey < $1 ORDER BY 1", [10, 1])
    assert got.fetchall() == [("ARGENTINA",), ("BRAZIL",), ("CANADA",)]
    got = con.sql("SELECT count(*) AS n FROM nation WHERE n_name LIKE $pat", params={"pat": "%A"})
    assert got.fetchall() == [(11,)]
    # values are literals: quotes and injection attempts stay data
    got = con.sql("SELECT ? AS s, ? AS d", ["x' OR 1=1 --", datetime.date(2024, 2, 29)])
    assert got.fetchall() == [("x' OR 1=1 --", datetime.date(2024, 2, 29))]
    # placeholders in strings and comments are not parameters
    assert con.sql("SELECT '?' AS q, ? AS v -- ?", [1]).fetchall() == [("?", 1)]


@pytest.mark.parametrize(
    ("sql", "params", "message"),
    [
        ("SELECT ?", [], "has 1 parameter(s) but 0 value(s)"),
        ("SELECT ?, ?", [1], "has 2 parameter(s) but 1 value(s)"),
        ("SELECT $2", [1], "parameter $2 but 1 value(s)"),
        ("SELECT $a", {"b": 1}, "no value for parameter $a"),
        ("SELECT $a", {"a": 1, "z": 2}, "parameter $z not in the query"),
        ("SELECT $a", [1], "pass params as a dict"),
        ("SELECT ?", {"a": 1}, "pass a list"),
        ("SELECT ?, $1", [1], "do not mix"),
        ("SELECT ?", "abc", "must be a list or tuple"),
        ("SELECT ?", [object()], "cannot bind a parameter of type object"),
    ],
)
def test_sql_params_errors(connections, sf001, sql, params, message):
    con = connections.get(sf001, 1)
    with pytest.raises(squall.UserError) as info:
        con.sql(sql, params=params)
    assert message in str(info.value)


def test_import_squall_is_light():
    code = "import sys, squall; print(sorted(m for m in ('duckdb', 'pyarrow', 'sqlglot', 'squall.driver') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import squall; print(squall.connect.__module__, squall.Result.__name__, squall.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["squall.connection", "Result", squall.__version__]


def test_cli_version_imports_no_engine():
    code = ("import sys; from squall.cli import main; main(['--version']); "
            "print(sorted(m for m in ('duckdb', 'pyarrow', 'sqlglot') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"
