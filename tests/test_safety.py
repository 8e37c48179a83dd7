"""Hostile and malformed input: rejected before execution with one line; nothing read, nothing written."""

from __future__ import annotations

import os
import uuid

import pytest

import squall

SECRET = "/etc/hostname"

HOSTILE = [
    "DROP TABLE nation",
    "DELETE FROM nation",
    "INSERT INTO nation VALUES (1, 'x', 1, 'y')",
    "UPDATE nation SET n_name = 'x'",
    "CREATE TABLE t AS SELECT 1",
    "COPY nation TO '/tmp/squall-pwned.csv'",
    "COPY (SELECT 1) TO '/tmp/squall-pwned.csv'",
    "ATTACH '/tmp/squall-pwned.db' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA database_list",
    "CALL pragma_version()",
    "SELECT 1; DROP TABLE nation",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT * FROM read_parquet('/tmp/x.parquet')",
    "SELECT * FROM read_json('/etc/x.json')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM 'data/lineitem.parquet'",
    'SELECT * FROM "/etc/passwd"',
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM duckdb_settings()",
    "SELECT current_setting('threads')",
    "SELECT getenv('HOME')",
    "SELECT * FROM query('SELECT 1')",
    "SELECT * FROM query_table('nation')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM parquet_metadata('/tmp/x.parquet')",
    "SELECT * FROM system.main.nation",
    "SELECT * FROM main.nation",
    "SELECT * INTO newtable FROM nation",
    "EXPORT DATABASE '/tmp/squall-export'",
    "SELECT (SELECT content FROM read_text('/etc/hostname'))",
    "WITH x AS (SELECT * FROM read_csv('/etc/passwd')) SELECT * FROM x",
    "SELECT * FROM nation WHERE n_name IN (SELECT * FROM read_text('/etc/hostname'))",
    "SELECT version()",
    "SELECT * FROM duckdb_tables()",
    # table functions that only make rows from their arguments are allowed; not next to a reader
    "SELECT * FROM range(3), read_text('/etc/hostname')",
    "SELECT * FROM generate_series(1, 2) AS g, glob('/etc/*')",
    "SELECT * FROM unnest((SELECT list(content) FROM read_text('/etc/hostname')))",
]

MALFORMED = [
    ("", "empty query"),
    ("   ", "empty query"),
    ("SELEC 1", "syntax error at line 1"),
    ("SELECT * FROM nation WHERE", "syntax error"),
    ("SELECT n_name FROM nation WHERE n_nationkey = 'abc' +", "syntax error"),
    ("SELECT n_nam FROM nation", 'Candidate bindings: "n_name"'),
    ("SELECT * FROM natoin", "did you mean nation"),
    ("SELECT nosuchfunc(n_name) FROM nation", "nosuchfunc"),
    ("SELECT n_name FROM nation GROUP BY n_regionkey", "GROUP BY"),
    ("SELECT 'unterminated FROM nation", "syntax error"),
]


@pytest.fixture(scope="module")
def con(sf001):
    c = squall.connect(data=str(sf001), workers=2)
    yield c
    c.close()


@pytest.mark.parametrize("sql", HOSTILE)
def test_hostile_rejected_before_execution(con, sql, tmp_path):
    before = set(os.listdir("/tmp"))
    with pytest.raises(squall.UserError) as info:
        con.sql(sql)
    message = str(info.value)
    assert "\n" not in message and message
    assert "Traceback" not in message
    assert not any(name.startswith("squall-pwned") or name == "squall-export" for name in os.listdir("/tmp"))
    # allowed: pytest's own folders, and the connection's worker-socket folder (the pool may start while the
    # query is planned); nothing else may appear
    own = ("pytest", f"squall-{os.getpid()}-")
    assert set(os.listdir("/tmp")) - before <= {n for n in os.listdir("/tmp") if n.startswith(own)}


@pytest.mark.parametrize(("sql", "fragment"), MALFORMED)
def test_malformed_gets_one_clear_line(con, sql, fragment):
    with pytest.raises(squall.UserError) as info:
        con.sql(sql)
    message = str(info.value)
    assert fragment in message, message
    assert "\n" not in message


def test_sandbox_blocks_files_even_if_sql_reaches_duckdb():
    """Defence in depth: the worker sandbox itself refuses file access and settings."""
    import duckdb

    from squall.operators.duck import Sandbox

    with Sandbox() as db:
        with pytest.raises(duckdb.Error, match="disabled"):
            db.query(f"SELECT * FROM read_text('{SECRET}')")
        with pytest.raises(duckdb.Error, match="locked"):
            db.query("SET enable_external_access = true")


def test_reused_sandbox_is_as_locked_and_keeps_nothing_between_sessions(tmp_path):
    """Workers reuse a locked DuckDB instance for the next query over the same files (``reuse=True``): each
    session is a new connection that sees only its own views and inputs, the allowed files and nothing
    else; a file rewritten between sessions is read afresh; other files get another instance."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from squall.operators import duck
    from squall.operators.duck import ParquetView, Sandbox

    path, other = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    pq.write_table(pa.table({"x": [9]}), other)
    view = {"v": ParquetView((("x", "x"),), ((path, ()),))}
    with Sandbox(parquet=view, threads=1, reuse=True) as db:
        db.register("arrow_in", pa.table({"y": [1]}))
        assert db.query("SELECT sum(x) AS s FROM v")["s"].to_pylist() == [6]
    pq.write_table(pa.table({"x": [10, 20]}), path)  # same path, new contents
    with Sandbox(parquet=view, threads=1, reuse=True) as db:
        assert db.query("SELECT sum(x) AS s FROM v")["s"].to_pylist() == [30]
        with pytest.raises(duckdb.Error, match="arrow_in"):
            db.query("SELECT * FROM arrow_in")  # the last session's input went with it
        for sql in (f"SELECT * FROM read_parquet('{other}')", f"SELECT * FROM read_text('{SECRET}')"):
            with pytest.raises(duckdb.Error, match=r"Permission|disabled"):
                db.query(sql)
        with pytest.raises(duckdb.Error, match="locked"):
            db.query("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="locked"):
            db.query(f"SET allowed_paths = ['{other}']")
    assert len(duck._INSTANCES) <= duck.INSTANCES_KEPT
    with Sandbox(parquet={"w": ParquetView((("x", "x"),), ((other, ()),))}, threads=1, reuse=True) as db:
        assert db.query("SELECT x FROM w")["x"].to_pylist() == [9]
        with pytest.raises(duckdb.Error, match="does not exist"):
            db.query("SELECT * FROM v")  # the other session's view is not here
        with pytest.raises(duckdb.Error, match="Permission"):
            db.query(f"SELECT * FROM read_parquet('{path}')")  # nor are its files


def test_a_ranks_sandbox_allows_its_querys_scan_files_and_no_others(tmp_path):
    """Every rank of a query opens the same sandbox (so a worker finds the kept instance whatever rank it
    plays): it allows every rank's files of the query's scans, and nothing else, while each rank's views read
    only its own share."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from squall.operators.worker import Worker

    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(4):
        pq.write_table(pa.table({"x": list(range(i * 10, i * 10 + 10))}), folder / f"part-{i}.parquet")
    pq.write_table(pa.table({"y": [1]}), tmp_path / "other.parquet")
    con = squall.connect(str(tmp_path), workers=2)
    try:
        plan = con.plan("SELECT sum(x) AS s FROM t")
    finally:
        con.close()
    every = sorted(str(p) for p in folder.glob("*.parquet"))
    seen = []
    for rank in (0, 1):
        views, files = Worker(plan, rank, None, "q").sandbox_files()  # type: ignore[arg-type]
        assert files == every
        seen.append({path for view in views.values() for path, _ranges in view.parts})
    assert seen[0] and seen[1] and not seen[0] & seen[1] and seen[0] | seen[1] == set(every)


def test_a_connections_next_query_allows_its_earlier_files_and_no_other_connections(tmp_path):
    """Pool workers keep one DuckDB instance per connection (its *sandbox group*): a query's sandbox allows the
    files of that connection's earlier queries on the process too, so the next query over other tables reuses
    the instance; another connection's files are never allowed, nor anything when the group is empty or the
    sandbox is not kept (Lambda's query-owned temp folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from squall.operators.worker import Worker

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for folder, tables in ((mine, ("a", "b")), (theirs, ("c",))):
        folder.mkdir()
        for t in tables:
            pq.write_table(pa.table({"x": [1, 2]}), folder / f"{t}.parquet")
    plans = {}
    for folder, tables in ((mine, ("a", "b")), (theirs, ("c",))):
        with squall.connect(str(folder), workers=1) as con:
            for t in tables:
                plans[t] = con.plan(f"SELECT sum(x) FROM {t}")

    def allowed(table: str, group: str, **options: str) -> list[str]:
        worker = Worker(plans[table], 0, None, "q", sandbox_group=group, sandbox_options=options)  # type: ignore[arg-type]
        return [os.path.basename(f) for f in worker.sandbox_files()[1]]

    group, other = uuid.uuid4().hex, uuid.uuid4().hex
    assert allowed("a", group) == ["a.parquet"]
    assert allowed("b", group) == ["a.parquet", "b.parquet"]  # its earlier query's file too
    assert allowed("c", other) == ["c.parquet"]  # another connection: its own only
    assert allowed("a", group) == ["a.parquet", "b.parquet"]
    assert allowed("b", "") == ["b.parquet"]
    assert allowed("b", group, temp_directory=str(tmp_path / "own")) == ["b.parquet"]  # not kept: its own


def test_a_spare_instance_is_locked_like_any_other_when_a_query_takes_it(tmp_path):
    """Workers make the next DuckDB instance of a configuration ahead, between queries (``prepare_spares``); a
    sandbox over new files takes it, and it is as locked as a new one: its allowed files only, no settings."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from squall.operators import duck
    from squall.operators.duck import ParquetView, Sandbox, prepare_spares

    first, second = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), first)
    pq.write_table(pa.table({"x": [9]}), second)
    with Sandbox(parquet={"v": ParquetView((("x", "x"),), ((first, ()),))}, threads=1, reuse=True) as db:
        assert db.query("SELECT sum(x) AS s FROM v")["s"].to_pylist() == [6]
    assert prepare_spares() >= 1 and prepare_spares() == 0  # one per configuration, made once
    key = duck._config_key({"threads": 1, "allocator_background_threads": True})
    spare = duck._SPARES[key][1]
    assert spare is not None
    with Sandbox(parquet={"w": ParquetView((("x", "x"),), ((second, ()),))}, threads=1, reuse=True) as db:
        assert db._root is spare and duck._SPARES[key][1] is None  # taken; the next one made when idle
        assert db.query("SELECT x FROM w")["x"].to_pylist() == [9]
        with pytest.raises(duckdb.Error, match="Permission"):
            db.query(f"SELECT * FROM read_parquet('{first}')")
        for sql in ("SET enable_external_access = true", f"SET allowed_paths = ['{first}']"):
            with pytest.raises(duckdb.Error, match="locked"):
                db.query(sql)
