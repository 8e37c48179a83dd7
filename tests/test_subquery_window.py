"""A correlated AVG/MIN/MAX subquery over the outer query's own rows, answered as a window over them
(driver/sql/subquery_window.py): every case against DuckDB on the same files at W = 1, 2, 3, and whether the
plan says it was rewritten. The data has NULL keys and amounts, sales of items the items table lacks, and
items listed twice (the outer rows of such an item repeat: an average over them must not change)."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result
from tests.fuzz.dataset import duckdb_reference

REWRITTEN = "computed as a window over them"

#: name → (SQL, whether the subquery becomes a window)
CASES = {
    # TPC-DS Q32's shape: the outer query joins the item (filtered) and the dates; the subquery the dates
    "avg_per_item_as_window": (
        "SELECT sum(s.amount) AS t, count(*) AS n FROM sales s, items i, days d WHERE i.brand = 'b1' "
        "AND i.id = s.item AND d.d = s.day AND d.yr = 2001 AND s.amount > (SELECT 1.2 * avg(s.amount) "
        "FROM sales s, days d WHERE s.item = i.id AND d.d = s.day AND d.yr = 2001)",
        True,
    ),
    # items 3 and 7 are listed twice: their outer rows repeat, the minimum does not move
    "min_over_repeated_rows": (
        "SELECT i.brand, count(*) AS n, sum(s.amount) AS t FROM sales s, items i WHERE i.id = s.item "
        "AND s.amount <= (SELECT min(x.amount) + 20 FROM sales x WHERE x.item = i.id) GROUP BY i.brand "
        "ORDER BY i.brand",
        True,
    ),
    "max_on_the_left": (
        "SELECT count(*) AS n FROM sales s, items i WHERE i.id = s.item AND i.brand <> 'b3' "
        "AND (SELECT max(x.amount) - 5 FROM sales x WHERE x.item = i.id) < s.amount",
        True,
    ),
    # a SUM would count the repeated rows
    "sum_kept": (
        "SELECT count(*) AS n FROM sales s, items i WHERE i.id = s.item "
        "AND s.amount * 30 > (SELECT sum(x.amount) FROM sales x WHERE x.item = i.id)",
        False,
    ),
    # the outer query keeps fewer sales than the subquery averages over
    "outer_condition_on_the_sales_kept": (
        "SELECT count(*) AS n FROM sales s, items i WHERE i.id = s.item AND s.day < 30 "
        "AND s.amount > (SELECT avg(x.amount) FROM sales x WHERE x.item = i.id)",
        False,
    ),
    "subquery_condition_not_outer_kept": (
        "SELECT count(*) AS n FROM sales s, items i WHERE i.id = s.item "
        "AND s.amount > (SELECT avg(x.amount) FROM sales x WHERE x.item = i.id AND x.day < 30)",
        False,
    ),
    "distinct_average_kept": (
        "SELECT count(*) AS n FROM sales s, items i WHERE i.id = s.item "
        "AND s.amount > (SELECT avg(DISTINCT x.amount) FROM sales x WHERE x.item = i.id)",
        False,
    ),
    "correlated_to_the_sales_kept": (
        "SELECT count(*) AS n FROM sales s, items i WHERE i.id = s.item "
        "AND s.amount > (SELECT avg(x.amount) FROM sales x WHERE x.item = s.item)",
        False,
    ),
    "explicit_join_kept": (
        "SELECT count(*) AS n FROM sales s JOIN items i ON i.id = s.item "
        "WHERE s.amount > (SELECT avg(x.amount) FROM sales x WHERE x.item = i.id)",
        False,
    ),
}


def _tables(seed: int = 11) -> dict[str, pa.Table]:
    rng = random.Random(seed)
    n = 3000
    sales = pa.table(
        {
            "item": pa.array(
                [None if rng.random() < 0.05 else rng.randint(1, 40) for _ in range(n)], pa.int32()
            ),
            "amount": pa.array(
                [None if rng.random() < 0.1 else rng.randint(0, 100) for _ in range(n)], pa.int32()
            ),
            "day": pa.array([rng.randint(1, 60) for _ in range(n)], pa.int32()),
        }
    )
    ids = [*range(1, 36), 3, 7]  # items 36-40 are sold but not listed; 3 and 7 are listed twice
    items = pa.table(
        {
            "id": pa.array(ids, pa.int32()),
            "brand": [rng.choice(["b1", "b2", "b3", "b4"]) for _ in ids],
        }
    )
    days = pa.table({"d": pa.array(range(1, 61), pa.int32()), "yr": [2000 + d // 30 for d in range(1, 61)]})
    return {"sales": sales, "items": items, "days": days}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("subquery_window")
    for name, table in _tables().items():
        pq.write_table(table, folder / f"{name}.parquet", row_group_size=400)
    return folder


@pytest.fixture(scope="module")
def reference(data):
    con = duckdb_reference(data)
    yield con
    con.close()


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"w{w}")
def engine(request, data):
    con = squall.connect(
        data=str(data), workers=request.param, planner_options=PlannerOptions(whole_query_at_w1=False)
    )
    yield con
    con.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_answer_matches_duckdb(engine, reference, name):
    sql, rewritten = CASES[name]
    assert_same_result(engine.sql(sql).to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    assert any(REWRITTEN in note for note in engine.plan(sql).notes) == rewritten


def test_the_sales_are_read_once(engine):
    sql = CASES["avg_per_item_as_window"][0]
    scans = [i for s in engine.plan(sql).stages for i in s.inputs if getattr(i, "table", "") == "sales"]
    assert len(scans) == 1
