"""The ``squall`` CLI: formats, stats, explain, gen-tpch, and one-line errors with exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import squall
from squall.cli import main

SQUALL = [sys.executable, "-m", "squall.cli"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SQUALL_FAULTS"}
    return subprocess.run([*SQUALL, *args], capture_output=True, text=True, input=stdin, timeout=300, env=env)


def test_query_table_csv_json_parquet_and_stats(sf001, tmp_path, capsys):
    sql = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY 1 ORDER BY 1"
    assert main(["query", sql, "--data", str(sf001), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["n_regionkey", "|", "n"] and "(5 rows)" in out

    assert main(["query", sql, "--data", str(sf001), "--workers", "2", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ['"n_regionkey","n"', "0,5"]

    assert main(["query", sql, "--data", str(sf001), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == {"n_regionkey": 0, "n": 5}

    out_file, stats_file = tmp_path / "r.parquet", tmp_path / "stats.json"
    code = main(["query", sql, "--data", str(sf001), "--format", "parquet", "--output", str(out_file),
                 "--stats-json", str(stats_file)])  # fmt: skip
    assert code == 0
    table = pq.read_table(out_file)
    assert table.column_names == ["n_regionkey", "n"] and table.num_rows == 5
    stats = json.loads(stats_file.read_text())
    assert stats["rows"] == 5 and stats["stages"] and "elapsed_s" in stats


def test_query_from_file_and_stdin(sf001, tmp_path):
    f = tmp_path / "q.sql"
    f.write_text("SELECT count(*) AS n FROM region")
    proc = run("query", "-f", str(f), "--data", str(sf001), "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ['"n"', "5"]
    proc = run("query", "-f", "-", "--data", str(sf001), "--format", "csv", stdin="SELECT 1 AS one")
    assert proc.returncode == 0 and proc.stdout.splitlines() == ['"one"', "1"]


def test_explain_prints_stages(sf001, capsys):
    sql = "SELECT o_orderstatus, avg(o_totalprice) FROM orders GROUP BY 1"
    assert main(["explain", sql, "--data", str(sf001), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "Stage 1 on ranks 0-1" in out and "gather" in out and "SUM(" in out and "COUNT(" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "SELECT * FROM nope"], "unknown table nope"),
        (["query", "SELEC 1"], "syntax error"),
        (["query", "SELECT n_nam FROM nation"], 'column "n_nam" not found'),
        (["query", "DELETE FROM nation"], "only SELECT queries are allowed"),
        (["query", "SELECT * FROM read_parquet('/etc/passwd')"], "not allowed"),
        (["query", "SELECT 1; SELECT 2"], "expected one statement"),
        (["query", "SELECT CAST(n_name AS INTEGER) FROM nation"], "Could not convert string"),
        (["query"], "no query"),
        (["query", "SELECT 1", "--workers", "0"], "--workers must be at least 1, got 0"),
        (["query", "SELECT 1", "--format", "xml"], "invalid choice"),
        (["query", "SELECT 1", "--format", "parquet"], "--format parquet needs --output"),
        (["query", "-f", "/nonexistent/q.sql"], "cannot read /nonexistent/q.sql"),
        (["bogus"], "invalid choice"),
    ],
)
def test_user_errors_one_line_exit_1(sf001, capsys, args, message):
    full = args if args == ["bogus"] else [*args, "--data", str(sf001)]
    assert main(full) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("command", ["query", "explain"])
def test_too_many_workers_is_the_platforms_message(sf001, capsys, command):
    """The CLI checks only W >= 1; the upper bound and its one-line message are the platform's (local: 8
    per core, at most 256), not a "--workers must be between 1 and 1024" of the CLI's own first."""
    from squall.driver.platforms.local.platform import max_local_workers

    limit = max_local_workers(os.cpu_count() or 1)
    for workers in (limit + 1, 2000):
        assert main([command, "SELECT 1", "--data", str(sf001), "--workers", str(workers)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: workers must be "), err  # the platform's words, not "--workers …"
        assert err.count("\n") == 1 and "Traceback" not in err, err


def test_workers_above_1024_where_the_platform_takes_them(sf001, capsys, monkeypatch):
    """The lambda platforms take up to $SQUALL_MAX_WORKERS: the CLI does not cap W at 1024 before them."""
    monkeypatch.setenv("SQUALL_MAX_WORKERS", "4096")
    args = ["explain", "SELECT 42", "--data", str(sf001), "--platform", "lambda-local"]
    assert main([*args, "--exchange", "s3://bucket/x", "--workers", "2000"]) == 0
    assert "on 2000 worker(s)" in capsys.readouterr().out


def test_missing_data_folder_and_real_exit_code(tmp_path):
    proc = run("query", "SELECT 1", "--data", str(tmp_path / "missing"))
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        f"error: data folder not found: {tmp_path / 'missing'} (--data takes a folder"
    )
    assert proc.stderr.count("\n") == 1
    assert proc.stdout == ""


def test_gen_tpch(tmp_path):
    proc = run("gen-tpch", "--sf", "0.001", "--out", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "d" / "lineitem.parquet").is_file()
    proc = run("gen-tpch", "--sf", "-1", "--out", str(tmp_path / "e"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


# --- issue 18: a user's first hour ------------------------------------------------------------------------


def one_line_error(capsys, *args: str, code: int = 1) -> str:
    assert main(list(args)) == code
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"squall {squall.__version__}"
    assert main(["--version"]) == 0


def test_select_without_data_runs(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("SQUALL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    assert main(["query", "SELECT 1 AS one", "--workers", "1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"one"', "1"]
    # tables still needs a place to list
    assert "give --data DIR" in one_line_error(capsys, "tables")


def test_output_folder_missing_fails_before_the_query(capsys, monkeypatch, tmp_path):
    import squall.connection

    def never(*args, **kwargs):
        raise AssertionError("the query ran")

    monkeypatch.setattr(squall.connection.Connection, "sql", never)
    err = one_line_error(capsys, "query", "SELECT 1", "--format", "csv", "--output", "/nonexistent/dir/r.csv")
    assert "folder /nonexistent/dir does not exist" in err
    err = one_line_error(capsys, "query", "SELECT 1", "--stats-json", str(tmp_path / "no" / "s.json"))
    assert "does not exist" in err


@pytest.mark.parametrize(
    ("sql", "hint"),
    [
        ("EXPLAIN SELECT 1", "squall explain"),
        ("EXPLAIN ANALYZE SELECT 1", "squall explain"),
        ("DESCRIBE nation", "squall tables"),
        ("SHOW TABLES", "squall tables"),
        ("SHOW nation", "squall tables"),
        ("SUMMARIZE nation", "squall tables"),
    ],
)
def test_explain_describe_show_point_to_commands(sf001, sql, hint):
    proc = run("query", sql, "--data", str(sf001), "--workers", "1")
    assert proc.returncode == 1 and hint in proc.stderr, proc.stderr
    # one line: no sqlglot "Falling back to parsing as a 'Command'" warning before it
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr


def test_verbose_and_log_level(sf001):
    proc = run("-v", "--version")
    assert proc.returncode == 0
    proc = run("query", "SELECT 1", "--log-level", "debug", "--data", str(sf001), "--workers", "1")
    assert proc.returncode == 0 and "DEBUG squall.cli: query: data=" in proc.stderr, proc.stderr
    assert "INFO squall.cli: query q" in proc.stderr
    proc = run("query", "SELECT 1", "--log-level", "loud")
    assert proc.returncode == 1 and "invalid choice" in proc.stderr


def test_squall_data_env_and_config_file(sf001, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("SQUALL_DATA", str(sf001))
    assert main(["query", "SELECT count(*) AS n FROM nation", "--format", "csv", "--workers", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"n"', "25"]
    monkeypatch.delenv("SQUALL_DATA")
    # ~/.config/squall/config.toml, then ./squall.toml wins over it
    (tmp_path / "cfg" / "squall").mkdir(parents=True)
    (tmp_path / "cfg" / "squall" / "config.toml").write_text(f'data = "{sf001}"\nworkers = 1\n')
    assert main(["query", "SELECT count(*) AS n FROM region", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"n"', "5"]
    (tmp_path / "squall.toml").write_text(f'data = "{tmp_path / "elsewhere"}"\n')
    assert "data folder not found" in one_line_error(capsys, "query", "SELECT 1")
    (tmp_path / "squall.toml").write_text('dta = "x"\n')
    assert "unknown key 'dta'" in one_line_error(capsys, "query", "SELECT 1")
    # a flag wins over the config file
    (tmp_path / "squall.toml").write_text(f'data = "{tmp_path / "elsewhere"}"\n')
    sql = "SELECT count(*) AS n FROM region"
    assert main(["query", sql, "--format", "csv", "--data", str(sf001), "--workers", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"n"', "5"]


def test_max_rows(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("SQUALL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    sql = "SELECT * FROM (VALUES (1), (2), (3), (4), (5)) t(x) ORDER BY x"
    assert main(["query", sql, "--workers", "1", "--max-rows", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[2:4] == ["1", "2"]
        and out[-1] == "(5 rows, 3 not shown (use --max-rows N, --format csv or --output))"
    )
    assert "--max-rows must be at least 1" in one_line_error(capsys, "query", "SELECT 1", "--max-rows", "0")


def test_timeout_is_passed_to_the_connection(capsys, monkeypatch, tmp_path):
    import squall.connection

    seen = {}

    def fake_sql(self, sql, params=None, *, progress=None, timeout=None):
        seen["timeout"] = timeout
        raise squall.OptionError("stop")

    monkeypatch.setattr(squall.connection.Connection, "sql", fake_sql)
    monkeypatch.chdir(tmp_path)
    one_line_error(capsys, "query", "SELECT 1", "--workers", "1", "--timeout", "2.5")
    assert seen == {"timeout": 2.5}
    assert "--timeout must be a positive" in one_line_error(capsys, "query", "SELECT 1", "--timeout", "0")


def test_cost_line_on_lambda_platforms(capsys, monkeypatch, tmp_path):
    import pyarrow as pa

    import squall.connection

    def fake_sql(self, sql, params=None, *, progress=None, timeout=None):
        return squall.Result(pa.table({"x": [1]}), {"cost_usd": 0.00012345, "rows": 1})

    monkeypatch.setattr(squall.connection.Connection, "sql", fake_sql)
    monkeypatch.chdir(tmp_path)
    assert main(["query", "SELECT 1 AS x", "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["cost: $0.000123 (Lambda and S3 requests; details: --stats-json)"]
    assert "cost" not in captured.out


def test_scan_choices_from_the_registry(monkeypatch):
    from squall.cli import _parser
    from squall.driver.catalog import scan_kinds

    monkeypatch.setattr(scan_kinds, "LOADERS", scan_kinds.Registry("scan", {"parquet": "x:y", "zz": "x:z"}))
    query = _parser()._subparsers._group_actions[0].choices["query"]  # type: ignore[union-attr]
    scan = next(a for a in query._actions if a.dest == "scan")
    assert list(scan.choices) == ["parquet", "zz"]


def test_gen_tpch_refuses_another_scale_factor(tmp_path):
    out = tmp_path / "d"
    assert run("gen-tpch", "--sf", "0.001", "--out", str(out)).returncode == 0
    proc = run("gen-tpch", "--sf", "0.002", "--out", str(out))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "holds TPC-H SF 0.001, not SF 0.002" in proc.stderr and "--force" in proc.stderr
    assert pq.read_metadata(out / "supplier.parquet").num_rows == 10  # untouched
    assert run("gen-tpch", "--sf", "0.001", "--out", str(out)).returncode == 0  # same SF: fine
    proc = run("gen-tpch", "--sf", "0.002", "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert pq.read_metadata(out / "supplier.parquet").num_rows == 20


def test_tables_show_sql_types(sf001, capsys):
    assert main(["tables", "--data", str(sf001)]) == 0
    out = capsys.readouterr().out
    assert "  l_orderkey               BIGINT not null" in out
    assert "  l_extendedprice          DECIMAL(15,2) not null" in out
    assert "  l_shipdate               DATE not null" in out
    assert "  l_comment                VARCHAR not null" in out
    assert "int64" not in out and "decimal128" not in out


def test_partitioned_folder_and_single_file_as_data(capsys, tmp_path):
    table = tmp_path / "events"
    for year, rows in ((2024, [1, 2]), (2025, [3])):
        (table / f"year={year}").mkdir(parents=True)
        pq.write_table(pa_table({"a": rows}), table / f"year={year}" / "part.parquet")
    assert main(["tables", "--data", str(table)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "events (3 rows)  parquet, partitioned by year"
    assert main(["query", "SELECT sum(a) AS s FROM events", "--data", str(table), "--workers", "2",
                 "--format", "csv"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == ['"s"', "6"]
    # one file: one table named after it
    one = table / "year=2024" / "part.parquet"
    assert main(["query", "SELECT count(*) AS n FROM part", "--data", str(one), "--workers", "1",
                 "--format", "csv"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == ['"n"', "2"]
    (tmp_path / "notes.txt").write_text("x")
    err = one_line_error(capsys, "tables", "--data", str(tmp_path / "notes.txt"))
    assert "is not a folder or a .parquet file" in err


def test_schema_mismatch_names_the_column_and_file(capsys, tmp_path):
    table = tmp_path / "data" / "t"
    table.mkdir(parents=True)
    pq.write_table(pa_table({"a": [1], "b": ["x"]}), table / "p0.parquet")
    pq.write_table(pa_table({"a": [1], "b": [1.5]}), table / "p1.parquet")
    err = one_line_error(
        capsys, "query", "SELECT * FROM t", "--data", str(tmp_path / "data"), "--workers", "1"
    )
    assert f"column b is string in {table / 'p0.parquet'} but double in {table / 'p1.parquet'}" in err


def test_interval_and_blob_print_like_duckdb(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sql = "SELECT INTERVAL 3 DAY AS i, INTERVAL '1 year 2 months 01:02:03' AS j, '\\x00ab'::BLOB AS b"
    assert main(["query", sql, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 days" in out and "1 year 2 months 01:02:03" in out and "\\x00ab" in out
    assert "MonthDayNano" not in out and "b'" not in out
    assert main(["query", sql, "--workers", "1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == '"3 days","1 year 2 months 01:02:03","\\x00ab"'
    assert main(["query", sql, "--workers", "1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"i": "3 days", "j": "1 year 2 months 01:02:03", "b": "\\x00ab"}
    ]


def test_columns_star_in_an_aggregate_is_duckdbs_answer(sf001, capsys):
    assert main(["query", "SELECT max(COLUMNS(*)) FROM nation", "--data", str(sf001), "--workers", "2",
                 "--format", "json"]) == 0  # fmt: skip
    row = json.loads(capsys.readouterr().out)[0]
    assert row["n_nationkey"] == 24 and row["n_name"] == "VIETNAM" and row["n_regionkey"] == 4


def pa_table(columns):
    import pyarrow as pa

    return pa.table(columns)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FORM nation",
        "SELECT 1 +",
        "SELECT (1",
        "SELECT a FROM t WHERE",
        "SELECT a b c FROM t",
        "SELECT *\nFROM t ORDER x",
    ],
)
def test_syntax_error_points_where_duckdb_does(sql):
    import re

    import duckdb

    from squall.driver.frontend.parse import parse

    with pytest.raises(duckdb.ParserException) as theirs:
        duckdb.connect().execute(sql)
    text = str(theirs.value)
    lines = text.splitlines()
    where = next(i for i, ln in enumerate(lines) if ln.startswith("LINE "))
    line_no = int(re.match(r"LINE (\d+):", lines[where]).group(1))
    column = lines[where + 1].index("^") - len(f"LINE {line_no}: ") + 1
    with pytest.raises(squall.SqlSyntaxError) as ours:
        parse(sql)
    assert f"at line {line_no}, column {column}:" in str(ours.value), (str(ours.value), text)


def test_query_without_data_starts_one_worker(monkeypatch, tmp_path, capsys):
    import squall.connection

    seen = {}
    real = squall.connection.Connection.__init__

    def spy(self, data=None, *, workers=None, **kwargs):
        seen["workers"] = workers
        real(self, data, workers=workers, **kwargs)

    monkeypatch.setattr(squall.connection.Connection, "__init__", spy)
    monkeypatch.delenv("SQUALL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["query", "SELECT 1"]) == 0
    assert seen == {"workers": 1}
