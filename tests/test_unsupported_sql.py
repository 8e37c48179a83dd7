"""SQL DuckDB accepts that Squall does not answer yet is refused with one line, never answered wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest

from squall.errors import NotSupportedError

SAMPLES = [
    "SELECT * FROM lineitem TABLESAMPLE 1 ROWS",
    "SELECT count(*) FROM nation TABLESAMPLE 10%",
    "SELECT * FROM nation USING SAMPLE 5 ROWS",
    "SELECT n_name FROM (SELECT * FROM nation) USING SAMPLE 10 PERCENT (bernoulli)",
    "SELECT count(*) FROM orders WHERE o_custkey IN (SELECT c_custkey FROM customer TABLESAMPLE 5 ROWS)",
]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("sql", SAMPLES)
def test_table_sample_is_refused(sf001, connections, workers, sql):
    con = connections.get(sf001, workers)
    with pytest.raises(NotSupportedError, match="TABLESAMPLE and USING SAMPLE are not supported yet"):
        con.sql(sql)
    with pytest.raises(NotSupportedError):
        con.explain(sql)
    assert con.sql("SELECT count(*) AS n FROM nation").arrow().column("n").to_pylist() == [25]


def test_cli_refuses_a_sample_in_one_line(sf001):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "squall.cli",
            "query",
            "SELECT * FROM nation TABLESAMPLE 1 ROWS",
            "--data",
            str(sf001),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TABLESAMPLE" in lines[0] and "Traceback" not in done.stderr
