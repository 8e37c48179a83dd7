"""Eager aggregation (driver/logical/rules/eager_aggregation.py): a left join's many side aggregated by the join key below
the join, combined above it. Answers match DuckDB, with unmatched left rows, NULL values and several left
rows per group."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
import squall.tpch as tpch
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result
from tests.tpch_data import duckdb_over

#: small tables still split over the ranks and hashed (not read whole by every rank)
SPREAD = PlannerOptions(replicated_scan_rows=0, broadcast_limit=0)
CASES = [
    ("q13", tpch.query(13, sf=0.01), True),
    (
        "sum_min_max_count",
        "SELECT o_orderpriority, sum(l_quantity) AS q, min(l_shipdate) AS first, max(l_discount) AS d,"
        " count(l_partkey) AS n FROM orders LEFT JOIN lineitem ON l_orderkey = o_orderkey"
        " GROUP BY o_orderpriority ORDER BY 1",
        True,
    ),
    (
        "several_left_rows_per_group",
        "SELECT n_regionkey, count(c_custkey) AS n, sum(c_acctbal) AS s, max(c_name) AS m FROM nation LEFT JOIN"
        " customer ON n_nationkey = c_nationkey AND c_mktsegment = 'MACHINERY' GROUP BY n_regionkey ORDER BY 1",
        True,
    ),
    (
        "count_star_stays_above",
        "SELECT c_custkey, count(*) AS n FROM customer LEFT JOIN orders ON c_custkey = o_custkey GROUP BY 1",
        False,
    ),
]


@pytest.fixture(scope="module")
def duck(sf001_parts: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_over(sf001_parts)
    yield con
    con.close()


def _eager_notes(con: squall.Connection, sql: str) -> list[str]:
    return [n for n in con.plan(sql).notes if n.startswith("eager aggregation")]


@pytest.mark.parametrize("name,sql,eager", CASES, ids=[c[0] for c in CASES])
def test_eager_aggregates_match_duckdb(sf001_parts: Path, duck, name: str, sql: str, eager: bool) -> None:
    want = duck.sql(sql).to_arrow_table()
    off = dataclasses.replace(SPREAD, disabled_rules=("eager_aggregation",))
    for workers in (2, 3):
        con = squall.connect(str(sf001_parts), workers=workers, planner_options=SPREAD)
        plain = squall.connect(str(sf001_parts), workers=workers, planner_options=off)
        try:
            assert len(_eager_notes(con, sql)) == int(eager)
            assert not _eager_notes(plain, sql)
            assert_same_result(con.sql(sql).arrow(), want, sql)
            assert_same_result(plain.sql(sql).arrow(), want, sql)
        finally:
            con.close()
            plain.close()


def test_unmatched_rows_and_nulls(tmp_path: Path) -> None:
    """A left row without a match counts 0 and sums NULL; NULL values and NULL keys on the right count for
    nothing; two left rows with one key each meet the same partial result."""
    left = pa.table(
        {"k": pa.array([1, 2, 3, 3, None, 5], pa.int64()), "g": pa.array(["a", "a", "b", "b", "c", "c"])}
    )
    right = pa.table(
        {
            "k": pa.array([1] * 5 + [3] * 6 + [None] * 5 + [4] * 5, pa.int64()),
            "v": pa.array(
                [1, 2, None, 4, 5, None, None, None, None, None, None, 7, 7, 7, 7, 7, 1, 1, 1, 1, 1]
            ),
        }
    )
    pq.write_table(left, tmp_path / "l.parquet", row_group_size=2)
    pq.write_table(right, tmp_path / "r.parquet", row_group_size=4)
    sql = (
        "SELECT l.g, count(r.v) AS n, sum(r.v) AS s, min(r.v) AS lo, max(r.v) AS hi FROM l LEFT JOIN r"
        " ON l.k = r.k GROUP BY l.g ORDER BY 1"
    )
    ref = duckdb.connect()
    ref.register("l", left)
    ref.register("r", right)
    want = ref.sql(sql).to_arrow_table()
    for workers in (2, 3):
        con = squall.connect(str(tmp_path), workers=workers, planner_options=SPREAD)
        try:
            assert _eager_notes(con, sql), con.plan(sql).notes
            assert_same_result(con.sql(sql).arrow(), want, sql)
        finally:
            con.close()
