"""The CLI against a service: ``squall query/explain/tables --endpoint``, ``squall serve`` option errors,
one ``error:`` line (exit 1) for user errors, a progress bar only on a terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

from .conftest import TOKEN

SQUALL = [sys.executable, "-m", "squall.cli"]


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("SQUALL_FAULTS", "SQUALL_TOKEN")}
    full.update(env or {})
    return subprocess.run([*SQUALL, *args], capture_output=True, text=True, timeout=timeout, env=full)


def assert_user_error(proc: subprocess.CompletedProcess[str], text: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_query_explain_tables_through_the_endpoint(server, tmp_path):
    sql = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY 1 ORDER BY 1"
    proc = run("query", sql, "--endpoint", server.url, "--token", TOKEN, "--format", "csv",
               "--stats-json", str(tmp_path / "stats.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ['"n_regionkey","n"', "0,5"] and proc.stderr == ""  # piped: no bar
    assert json.loads((tmp_path / "stats.json").read_text())["rows"] == 5

    proc = run("query", sql, "--endpoint", server.url, "--format", "json", env={"SQUALL_TOKEN": TOKEN})
    assert proc.returncode == 0 and json.loads(proc.stdout)[0] == {"n_regionkey": 0, "n": 5}

    proc = run("query", sql, "--endpoint", server.url, "--token", TOKEN, "--format", "parquet",
               "--output", str(tmp_path / "r.parquet"))  # fmt: skip
    assert proc.returncode == 0 and (tmp_path / "r.parquet").stat().st_size > 0

    proc = run("explain", sql, "--endpoint", server.url, "--token", TOKEN, "--workers", "1")
    assert proc.returncode == 0 and "Stage 1 on rank 0" in proc.stdout

    proc = run("tables", "--endpoint", server.url, "--token", TOKEN)
    assert proc.returncode == 0 and "nation (25 rows)" in proc.stdout and "n_name" in proc.stdout


def test_tables_embedded(sf001):
    proc = run("tables", "--data", str(sf001), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    tables = {t["name"]: t for t in json.loads(proc.stdout)}
    assert tables["region"]["rows"] == 5 and tables["region"]["columns"][0]["name"] == "r_regionkey"


def test_user_errors_are_one_line(server, sf001):
    assert_user_error(run("query", "SELEC 1", "--endpoint", server.url, "--token", TOKEN), "syntax error")
    assert_user_error(run("query", "SELECT * FROM nope", "--endpoint", server.url, "--token", TOKEN), "nope")
    assert_user_error(run("query", "SELECT 1", "--endpoint", server.url), "bearer token")
    assert_user_error(run("tables", "--endpoint", server.url, "--token", "wrong"), "wrong token")
    assert_user_error(run("tables"), "--data DIR")  # query without --data runs (SELECT 1 reads no table)
    assert_user_error(run("query", "SELECT 1", "--data", str(sf001), "--endpoint", server.url), "not both")
    assert_user_error(run("query", "SELECT 1", "--endpoint", "localhost:1"), "http")
    assert_user_error(run("serve", "--data", str(sf001 / "missing")), "not found")
    assert_user_error(run("serve", "--data", str(sf001), "--port", "70000"), "--port")
    assert_user_error(run("serve", "--data", str(sf001), "--state", "gs://x/y"), "unknown state store scheme")
    assert_user_error(run("serve", "--data", str(sf001), "--workers", "0"), "--workers")


def test_unreachable_endpoint_is_one_line():
    proc = run("tables", "--endpoint", "http://127.0.0.1:9")
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("error: cannot reach")
        and "Traceback" not in proc.stderr
    )


def test_progress_bar_on_a_terminal(slow_server):
    """stderr on a pseudo-terminal: rich draws the bar while the slow query runs."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "SQUALL_FAULTS"}
    proc = subprocess.Popen(
        [*SQUALL, "query", "SELECT count(*) AS n FROM orders", "--endpoint", slow_server.url, "--token", TOKEN,
         "--format", "csv"],
        stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env={**env, "COLUMNS": "100"},
    )  # fmt: skip
    os.close(slave)
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                shown += os.read(master, 65536)
            except OSError:
                break
        elif proc.poll() is not None:
            break
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0 and out.decode().splitlines() == ['"n"', "15000"]
    assert b"query" in shown and b"stage" in shown, shown[-500:]
