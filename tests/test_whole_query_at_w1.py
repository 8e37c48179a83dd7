"""With one worker DuckDB plans the whole query as written, in one stage over Squall's scans
(``PlannerOptions.whole_query_at_w1``): explain and stats say so, the scans still prune and count, the
answers are DuckDB's, and the option off gives Squall's own stage plan."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.ir.nodes import WHOLE_QUERY_AT_W1
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result
from tests.fuzz.dataset import duckdb_reference

SAID = WHOLE_QUERY_AT_W1


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``t``: 100,000 rows sorted by ``k`` in 10 row groups; ``d``: 7 rows keyed by ``v``."""
    out = tmp_path_factory.mktemp("w1")
    n = 100_000
    t = pa.table({"k": pa.array(range(n)), "v": pa.array([i % 7 for i in range(n)])})
    pq.write_table(t, out / "t.parquet", row_group_size=10_000)
    pq.write_table(pa.table({"v": list(range(7)), "name": [f"n{i}" for i in range(7)]}), out / "d.parquet")
    return out


def _duckdb(data: Path, sql: str) -> pa.Table:
    con = duckdb_reference(data)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


QUERIES = [
    "SELECT count(*) AS n, sum(v) AS s FROM t WHERE k < 15000",
    # a correlated subquery and a join: DuckDB decorrelates and orders them itself
    "SELECT name, count(*) AS n FROM t JOIN d USING (v) WHERE k > (SELECT avg(k) FROM t AS t2 WHERE t2.v = t.v) "
    "GROUP BY name ORDER BY name",
    # a CTE used twice (TPC-H Q15's shape)
    "WITH s AS (SELECT v, sum(k) AS total FROM t GROUP BY v) SELECT v FROM s WHERE total = (SELECT max(total) FROM s)",
]


@pytest.mark.parametrize("i", range(len(QUERIES)))
def test_w1_runs_the_query_as_written_and_says_so(data: Path, i: int) -> None:
    sql = QUERIES[i]
    with squall.connect(data=str(data), workers=1) as con:
        plan = con.plan(sql)
        result = con.sql(sql)
        text = con.explain(sql)
    assert len(plan.stages) == 1 and sql in plan.stages[0].sql  # the user's own text, as written
    assert any(n.startswith(SAID) for n in plan.notes), plan.notes
    assert f"note: {SAID}" in text and "-- final result; " + SAID in text
    assert any(n.startswith(SAID) for n in result.stats["notes"])
    assert SAID in result.stats["stages"][0]["note"]
    assert_same_result(result.arrow(), _duckdb(data, sql), sql)


def test_w1_scans_still_prune_row_groups_and_count(data: Path) -> None:
    sql = QUERIES[0]
    with squall.connect(data=str(data), workers=1) as con:
        result = con.sql(sql)
    skipping = result.stats["data_skipping"]["total"]
    assert (skipping["planned"], skipping["minmax"], skipping["read"]) == (10, 8, 2)
    assert result.stats["rows_scanned"] == 20_000  # the two row groups read
    assert result.fetchall() == [(15_000, 44_997)]


def test_option_off_gives_squalls_stage_plan_at_w1(data: Path) -> None:
    sql = QUERIES[1]
    options = PlannerOptions(whole_query_at_w1=False)
    with squall.connect(data=str(data), workers=1, planner_options=options) as con:
        plan = con.plan(sql)
        result = con.sql(sql)
    assert not any(SAID in n for n in plan.notes)
    assert all(sql not in s.sql for s in plan.stages)
    assert_same_result(result.arrow(), _duckdb(data, sql), sql)


def test_w2_is_unchanged(data: Path) -> None:
    with squall.connect(data=str(data), workers=2) as con:
        plan = con.plan(QUERIES[1])
    assert not any(SAID in n for n in plan.notes)
    assert len(plan.stages) > 1
