"""Subquery coalescing (driver/logical/rules/coalesce.py): EXISTS / NOT EXISTS subqueries over one table on one key read
one scan, each join testing its own filters on the shared rows. Answers match DuckDB, NULLs included."""

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
from squall.plan import Plan, ScanInput
from squall.testing import assert_same_result
from tests.tpch_data import duckdb_over

LATE = "l3.l_receiptdate > l3.l_commitdate"
# (name, SQL, the join that carries the flag: "anti" or "semi", None when nothing may coalesce; "apart?": the
# planner may cut the two sides apart (at W=2 the second anti join takes a key set of the first one's output,
# the first none; at W=3 both hash plainly), and then the plan is the one as written, said in a note)
CASES = [
    ("q21", tpch.query(21, sf=0.01), "anti"),
    (
        "late_semi_not_exists",
        "SELECT count(*) AS n FROM lineitem l1 WHERE l1.l_quantity < 10 AND EXISTS (SELECT 1 FROM lineitem l3"
        f" WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey AND {LATE}) AND NOT EXISTS"
        " (SELECT 1 FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_linenumber > l1.l_linenumber)",
        "semi",
    ),
    (
        "two_not_exists",
        "SELECT l1.l_returnflag, count(*) AS n FROM lineitem l1 WHERE l1.l_shipmode = 'AIR' AND NOT EXISTS"
        " (SELECT 1 FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_shipdate > l1.l_shipdate"
        " AND l2.l_discount > 0.05) AND NOT EXISTS (SELECT 1 FROM lineitem l3 WHERE l3.l_orderkey = l1.l_orderkey"
        f" AND l3.l_shipdate > l1.l_shipdate AND l3.l_discount > 0.05 AND {LATE}) GROUP BY 1 ORDER BY 1",
        "anti apart?",
    ),
    (
        "other_keys_stay_apart",
        "SELECT count(*) AS n FROM lineitem l1 WHERE l1.l_quantity < 5 AND EXISTS (SELECT 1 FROM lineitem l2"
        " WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey) AND NOT EXISTS (SELECT 1 FROM"
        f" lineitem l3 WHERE l3.l_partkey = l1.l_partkey AND {LATE})",
        None,
    ),
]


#: small tables still split over the ranks and hashed (not read whole by every rank)
# joins in place by key range (planner/colocate.py) would read the two sides apart in one stage
SPREAD = PlannerOptions(replicated_scan_rows=0, broadcast_limit=0, join_in_place=False)


@pytest.fixture(scope="module")
def duck(sf001_parts: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_over(sf001_parts)
    yield con
    con.close()


def _lineitem_scans(plan: Plan) -> int:
    return sum(
        1 for st in plan.stages for i in st.inputs if isinstance(i, ScanInput) and i.table == "lineitem"
    )


@pytest.mark.parametrize("name,sql,flagged", CASES, ids=[c[0] for c in CASES])
def test_coalesced_subqueries_match_duckdb(
    sf001_parts: Path, duck, name: str, sql: str, flagged: str | None
) -> None:
    want = duck.sql(sql).to_arrow_table()
    off = dataclasses.replace(SPREAD, disabled_rules=("coalesce",))
    for workers in (2, 3):
        con = squall.connect(str(sf001_parts), workers=workers, planner_options=SPREAD)
        apart = squall.connect(str(sf001_parts), workers=workers, planner_options=off)
        try:
            plan, plain = con.plan(sql), apart.plan(sql)
            said = [n for n in plan.notes if n.startswith("subqueries coalesced")]
            separate = [n for n in plan.notes if n.startswith("subqueries not coalesced")]
            if flagged is None:
                assert not said and _lineitem_scans(plan) == _lineitem_scans(plain), plan.notes
            elif flagged.endswith("apart?") and not said:  # planned as written instead, and said
                assert not said and len(separate) == 1, plan.notes
                assert len(plan.stages) == len(plain.stages) and _lineitem_scans(plan) == _lineitem_scans(
                    plain
                )
            else:
                assert len(said) == 1 and f"the {flagged.split()[0]} join tests its own filter" in said[0], (
                    plan.notes
                )
                assert _lineitem_scans(plan) == _lineitem_scans(plain) - 1
                assert not [n for n in plain.notes if n.startswith("subqueries coalesced")]
            assert_same_result(con.sql(sql).arrow(), want, sql)
            assert_same_result(apart.sql(sql).arrow(), want, sql)
        finally:
            con.close()
            apart.close()


def test_nulls_in_the_flag_columns(tmp_path: Path) -> None:
    """A row whose own filter is NULL (a NULL date) counts for neither subquery, coalesced or not."""
    t = pa.table(
        {
            "k": pa.array([1, 1, 1, 2, 2, 3, 3, 4, None, None], pa.int64()),
            "s": pa.array([1, 2, 3, 1, 2, 1, 1, 5, 1, 2], pa.int64()),
            "due": pa.array([5, 5, None, 5, 5, 5, None, 1, 5, 5], pa.int32()),
            "done": pa.array([6, 4, 9, None, 7, 4, 9, 2, 9, 9], pa.int32()),
        }
    )
    pq.write_table(t, tmp_path / "t.parquet", row_group_size=3)
    sql = (
        "SELECT a.k, a.s FROM t a WHERE EXISTS (SELECT 1 FROM t b WHERE b.k = a.k AND b.s <> a.s)"
        " AND NOT EXISTS (SELECT 1 FROM t c WHERE c.k = a.k AND c.s <> a.s AND c.done > c.due) ORDER BY 1, 2"
    )
    ref = duckdb.connect()
    ref.register("t", t)
    want = ref.sql(sql).to_arrow_table()
    for workers in (2, 3):
        con = squall.connect(str(tmp_path), workers=workers, planner_options=SPREAD)
        try:
            assert any(n.startswith("subqueries coalesced") for n in con.plan(sql).notes)
            assert_same_result(con.sql(sql).arrow(), want, sql)
        finally:
            con.close()
