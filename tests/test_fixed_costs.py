"""Fixed per-query costs (issue 17), counted rather than timed: queries that read no table run in the
driver's sandbox without starting workers; the worker pool starts while a query is planned; the scale
model is not imported for it."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.errors import QueryRuntimeError, UserError


def test_query_reading_no_table_runs_on_the_driver(tmp_path):
    pq.write_table(pa.table({"x": [1, 2]}), str(tmp_path / "t.parquet"))
    with squall.connect(str(tmp_path), workers=2) as con:
        result = con.sql("SELECT 1 AS one, 'a' AS s UNION ALL SELECT 2, 'b'")
        assert sorted(result.fetchall()) == [(1, "a"), (2, "b")]
        assert result.stats["ran_on"] == "driver" and result.stats["rows"] == 2
        assert not any(p is not None for p in con.platform._procs)  # no worker started
        with pytest.raises(QueryRuntimeError):
            con.sql("SELECT CAST('x' AS INTEGER)")
        with pytest.raises(UserError):  # the sandbox's rules hold on the driver too
            con.sql("SELECT * FROM read_csv('/etc/passwd')")
        counted = con.sql("SELECT count(*) AS n FROM t")
        assert counted.fetchall() == [(2,)] and counted.stats["ran_on"] == "workers"


def test_pool_starts_while_planning(tmp_path, monkeypatch):
    pq.write_table(pa.table({"x": [1, 2, 3]}), str(tmp_path / "t.parquet"))
    with squall.connect(str(tmp_path), workers=1) as con:
        calls: list[str] = []
        real = con.platform.prestart
        monkeypatch.setattr(con.platform, "prestart", lambda: (calls.append("prestart"), real())[1])
        assert con.sql("SELECT sum(x) AS s FROM t").fetchall() == [(6,)]
        assert calls == ["prestart"]
        assert con.platform._starting is None and all(p is not None for p in con.platform._procs)
        con.sql("SELECT 1")  # mentions no table: no prestart
        assert calls == ["prestart"]


def test_scale_model_not_imported_by_a_query():
    code = (
        "import sys, squall\n"
        "con = squall.connect(workers=1)\n"
        "assert con.sql('SELECT 1').fetchall() == [(1,)]\n"
        "con.close()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('squall.driver.forecast.predict', 'squall.driver.forecast.scale',"
        " 'squall.client'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
