"""DISTINCT aggregates of one argument: by the group keys alone when the groups are many (each rank completes
its groups), else by (keys, value) then partial → final. Both match DuckDB, with NULL keys, NULL values and the
same (key, value) pair on several ranks."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
import squall.tpch as tpch
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result
from tests.tpch_data import duckdb_over

BY_KEYS = PlannerOptions(distinct_by_keys_groups=1, replicated_scan_rows=0, broadcast_limit=0)
BY_BOTH = PlannerOptions(distinct_by_keys_groups=1e12, replicated_scan_rows=0, broadcast_limit=0)
NOTES = {
    BY_KEYS: "pairs by group key, complete where they land",
    BY_BOTH: "pairs by both, deduped where they land",
}

SQL = (
    "SELECT g, h, count(DISTINCT v) AS n, sum(DISTINCT v) AS s, min(DISTINCT v) AS lo, max(DISTINCT v) AS hi "
    "FROM t GROUP BY g, h ORDER BY g, h"
)


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(7)
    n = 6000
    g = rng.integers(0, 40, n).astype(object)
    g[rng.random(n) < 0.05] = None  # NULL group keys form a group of their own
    v = rng.integers(0, 25, n).astype(object)
    v[rng.random(n) < 0.1] = None  # NULL values count for nothing
    table = pa.table(
        {"g": pa.array(g, pa.int64()), "h": pa.array(rng.choice(["x", "y"], n)), "v": pa.array(v, pa.int64())}
    )
    folder = tmp_path_factory.mktemp("distinct")
    pq.write_table(
        table, folder / "t.parquet", row_group_size=500
    )  # 12 row groups: pairs repeat across ranks
    return folder


@pytest.mark.parametrize("options", [BY_KEYS, BY_BOTH], ids=["by-keys", "by-both"])
@pytest.mark.parametrize("workers", [2, 3])
def test_distinct_aggregates_match_duckdb(table_dir: Path, options: PlannerOptions, workers: int) -> None:
    ref = duckdb.connect()
    ref.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{table_dir}/t.parquet')")
    want = ref.sql(SQL).to_arrow_table()
    with squall.connect(str(table_dir), workers=workers, planner_options=options) as con:
        assert NOTES[options] in con.explain(SQL)
        assert_same_result(con.sql(SQL).arrow(), want, SQL)


@pytest.mark.parametrize("options", [BY_KEYS, BY_BOTH], ids=["by-keys", "by-both"])
def test_tpch_q16_both_ways(sf001_parts: Path, options: PlannerOptions) -> None:
    sql = tpch.query(16, sf=0.01)
    ref = duckdb_over(sf001_parts)
    try:
        want = ref.sql(sql).to_arrow_table()
    finally:
        ref.close()
    with squall.connect(str(sf001_parts), workers=3, planner_options=options) as con:
        assert NOTES[options] in con.explain(sql)
        assert_same_result(con.sql(sql).arrow(), want, sql)
