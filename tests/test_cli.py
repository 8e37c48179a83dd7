"""The ``squall`` CLI: formats, stats, explain, gen-tpch, and one-line errors with exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

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
        (["query", "SELECT 1", "--workers", "0"], "--workers must be between 1 and 1024"),
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


def test_missing_data_folder_and_real_exit_code(tmp_path):
    proc = run("query", "SELECT 1", "--data", str(tmp_path / "missing"))
    assert proc.returncode == 1
    assert proc.stderr == f"error: data folder not found: {tmp_path / 'missing'}\n"
    assert proc.stdout == ""


def test_gen_tpch(tmp_path):
    proc = run("gen-tpch", "--sf", "0.001", "--out", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "d" / "lineitem.parquet").is_file()
    proc = run("gen-tpch", "--sf", "-1", "--out", str(tmp_path / "e"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
