"""The per-connection compiled-plan cache: a repeated query skips binding and planning; a table registered
again or a changed file plans afresh (counted calls, no timings)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
import squall.connection as connection
from squall.driver.options import PlannerOptions


@pytest.fixture
def counted(monkeypatch):
    calls: list[str] = []
    real = connection.compile_sql

    def compile_sql(catalog, sql, *args, **kwargs):
        calls.append(sql)
        return real(catalog, sql, *args, **kwargs)

    monkeypatch.setattr(connection, "compile_sql", compile_sql)
    return calls


def _write(path, values):
    pq.write_table(pa.table({"x": values}), str(path))


def test_repeated_query_is_planned_once(tmp_path, counted):
    _write(tmp_path / "t.parquet", [1, 2, 3])
    with squall.connect(str(tmp_path), workers=1) as con:
        first = con.sql("SELECT sum(x) AS s FROM t")
        second = con.sql("SELECT sum(x) AS s FROM t")
        assert first.to_arrow() == second.to_arrow()
        assert len(counted) == 1
        assert first.stats["plan_cache"] == "miss" and second.stats["plan_cache"] == "hit"
        breakdown = first.stats["planning_breakdown"]
        assert {"bind_s", "translate_s", "plan_s"} <= set(breakdown)
        assert "bind_s" not in second.stats["planning_breakdown"]
        con.plan("SELECT sum(x) AS s FROM t")
        assert len(counted) == 1
        con.plan("SELECT sum(x) AS s FROM t  ")  # another text: planned
        assert len(counted) == 2


def test_reregistered_table_misses(tmp_path, counted):
    _write(tmp_path / "a.parquet", [1, 2, 3])
    _write(tmp_path / "b.parquet", [10, 20])
    con = squall.connect(str(tmp_path), workers=1)
    try:
        con.register("t", str(tmp_path / "a.parquet"))
        con.plan("SELECT count(*) FROM t")
        con.plan("SELECT count(*) FROM t")
        assert len(counted) == 1
        con.register("t", str(tmp_path / "b.parquet"))
        con.plan("SELECT count(*) FROM t")
        assert len(counted) == 2
    finally:
        con.close()


def test_changed_file_misses_and_rereads_footers(tmp_path, counted):
    path = tmp_path / "t.parquet"
    _write(path, [1, 2, 3])
    con = squall.connect(str(tmp_path), workers=1)
    try:
        con.plan("SELECT count(*) FROM t")
        assert con.catalog.table("t").num_rows == 3
        _write(path, [1, 2, 3, 4, 5])
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a coarse clock: mtime moves
        con.plan("SELECT count(*) FROM t")
        assert len(counted) == 2
        assert con.catalog.table("t").num_rows == 5
    finally:
        con.close()


def test_other_worker_count_or_options_miss(tmp_path, counted):
    _write(tmp_path / "t.parquet", [1, 2, 3])
    con = squall.connect(str(tmp_path), workers=1)
    try:
        con._compile("SELECT x FROM t", 1)
        con._compile("SELECT x FROM t", 2)
        assert len(counted) == 2
        con.planner_options = PlannerOptions(broadcast_limit=1)
        con._compile("SELECT x FROM t", 1)
        assert len(counted) == 3
    finally:
        con.close()
