"""Where a SELECT's inner joins start, and the join filter a small broadcast subtree puts on a table scanned in
place (driver/estimate/join_order.py, driver/planner/rules/join_filters.py).

The data has TPC-DS Q25's shape, scaled down: ``sales`` written in ticket order (so its row groups hold ranges
of tickets), ``returns`` of some of its lines, ``catalog`` sales of the same customers and items, and a date
dimension. Only one month's sales, returns and catalog sales count: the month's returns meet few catalog rows,
so the joins start from ``returns`` and the few keys left cut ``sales`` where it is scanned — to the row groups
of their tickets. Every answer is DuckDB's.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.ir import nodes as L
from squall.driver.options import PlannerOptions
from squall.driver.planner.joinfilter import JoinFilter, apply_filters
from squall.testing import assert_same_result

SALES_ROWS = 120_000
ROW_GROUP = 6_000
QUERY = """
SELECT s_item, count(*) AS n, sum(s_amount) AS amount, sum(r_loss) AS loss, sum(c_profit) AS profit
FROM sales, returns, catalog, dates d1, dates d2, dates d3
WHERE d1.d_moy = 4 AND d1.d_year = 2001 AND s_date = d1.d_sk
  AND s_cust = r_cust AND s_item = r_item AND s_ticket = r_ticket
  AND r_date = d2.d_sk AND d2.d_moy = 4 AND d2.d_year = 2001
  AND r_cust = c_cust AND r_item = c_item
  AND c_date = d3.d_sk AND d3.d_moy = 4 AND d3.d_year = 2001
GROUP BY s_item ORDER BY s_item
"""
#: the same tables behind an EXISTS: the largest table starts
EXISTS_QUERY = """
SELECT count(*) AS n, sum(r_loss) AS loss
FROM sales, returns, dates d2
WHERE s_cust = r_cust AND s_item = r_item AND s_ticket = r_ticket
  AND r_date = d2.d_sk AND d2.d_moy BETWEEN 4 AND 10 AND d2.d_year = 2001
  AND EXISTS (SELECT 1 FROM catalog WHERE c_cust = r_cust AND c_item = r_item)
"""
#: returns of one month joined to sales by customer only: customers are in every row group of sales
SPREAD_QUERY = """
SELECT count(*) AS n, sum(s_amount) AS amount
FROM sales, returns, catalog, dates d2, dates d3
WHERE s_cust = r_cust
  AND r_date = d2.d_sk AND d2.d_moy = 4 AND d2.d_year = 2001
  AND r_cust = c_cust AND r_item = c_item
  AND c_date = d3.d_sk AND d3.d_moy = 4 AND d3.d_year = 2001
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("join_start")
    rng = np.random.default_rng(7)
    days = 3 * 365
    dates = pa.table(
        {
            "d_sk": np.arange(days, dtype=np.int64),
            "d_year": (2000 + np.arange(days) // 365).astype(np.int32),
            "d_moy": (1 + (np.arange(days) % 365) // 31).clip(1, 12).astype(np.int32),
        }
    )
    april_2001 = np.flatnonzero((dates["d_year"].to_numpy() == 2001) & (dates["d_moy"].to_numpy() == 4))
    ticket = np.arange(SALES_ROWS, dtype=np.int64) // 4  # four lines a ticket, written in ticket order
    item = rng.integers(1, 3_000, SALES_ROWS)
    cust = rng.integers(1, 20_000, SALES_ROWS)
    sold = rng.integers(0, days, SALES_ROWS)
    returned = rng.choice(SALES_ROWS, SALES_ROWS // 10, replace=False)
    returned_on = rng.integers(0, days, returned.size)
    # a few lines sold and returned in April 2001 and bought from the catalog then too: the answer's rows
    planted = rng.choice(returned.size, 12, replace=False)
    sold[returned[planted]] = rng.choice(april_2001, planted.size)
    returned_on[planted] = rng.choice(april_2001, planted.size)
    sales = pa.table(
        {
            "s_ticket": ticket,
            "s_item": item,
            "s_cust": cust,
            "s_date": sold,
            "s_amount": rng.integers(1, 1_000, SALES_ROWS).astype(np.float64),
        }
    )
    returns = pa.table(
        {
            "r_ticket": ticket[returned],
            "r_item": item[returned],
            "r_cust": cust[returned],
            "r_date": returned_on,
            "r_loss": rng.integers(1, 100, returned.size).astype(np.float64),
        }
    )
    n_catalog = SALES_ROWS // 2
    catalog = pa.table(
        {
            "c_cust": np.concatenate([rng.integers(1, 20_000, n_catalog), cust[returned[planted]]]),
            "c_item": np.concatenate([rng.integers(1, 3_000, n_catalog), item[returned[planted]]]),
            "c_date": np.concatenate(
                [rng.integers(0, days, n_catalog), rng.choice(april_2001, planted.size)]
            ),
            "c_profit": rng.integers(1, 500, n_catalog + planted.size).astype(np.float64),
        }
    ).sort_by("c_date")
    for name, table in (("dates", dates), ("sales", sales), ("returns", returns), ("catalog", catalog)):
        pq.write_table(table, out / f"{name}.parquet", row_group_size=ROW_GROUP)
    return out


@pytest.fixture(scope="module")
def duck(data: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name in ("dates", "sales", "returns", "catalog"):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{data / name}.parquet')")
    return con


@pytest.fixture(scope="module")
def con(data: Path):
    # only the date dimension is read whole by every rank (the tables here are small)
    c = squall.connect(data=str(data), workers=2, planner_options=PlannerOptions(replicated_scan_rows=2_000))
    yield c
    c.close()


def test_joins_start_from_the_returns_and_their_keys_cut_sales_where_it_is_read(con, duck) -> None:
    plan = con.plan(QUERY)
    assert any(
        n.startswith("join order: starts from returns, not the largest source sales") for n in plan.notes
    )
    sales_filters = [
        label for stage in plan.stages for label, *_ in stage.join_filters if "scan of sales" in label
    ]
    in_place = [f for f in sales_filters if "a broadcast the plan makes anyway" in f]
    assert in_place and "s_ticket" in in_place[0], sales_filters
    # the few keys' filter reads the scan; the month's dates read what it kept
    sales_stage = next(s for s in plan.stages if any("scan of sales" in f[0] for f in s.join_filters))
    assert "s_ticket" in sales_stage.join_filters[0][0]
    result = con.sql(QUERY)
    assert result.to_arrow().num_rows > 0  # the planted lines
    assert_same_result(result.to_arrow(), duck.sql(QUERY).to_arrow_table(), QUERY, reference=duck)
    ticket_filter = next(f for f in result.stats["join_filters"] if "s_ticket" in f["filter"])
    assert (
        ticket_filter["rows_before"] > 0 and ticket_filter["rows_after"] < ticket_filter["rows_before"] / 100
    )


def test_with_a_subquery_after_the_joins_the_largest_table_starts(con, duck) -> None:
    plan = con.plan(EXISTS_QUERY)
    assert not any(n.startswith("join order") for n in plan.notes)
    got = con.sql(EXISTS_QUERY).to_arrow()
    assert_same_result(got, duck.sql(EXISTS_QUERY).to_arrow_table(), EXISTS_QUERY, reference=duck)


def test_no_in_place_filter_on_a_key_spread_over_every_row_group(con, duck) -> None:
    plan = con.plan(SPREAD_QUERY)
    labels = [label for stage in plan.stages for label, *_ in stage.join_filters]
    assert not any(
        "a broadcast the plan makes anyway" in label and "scan of sales" in label for label in labels
    )
    got = con.sql(SPREAD_QUERY).to_arrow()
    assert_same_result(got, duck.sql(SPREAD_QUERY).to_arrow_table(), SPREAD_QUERY, reference=duck)


def test_the_filter_keeping_fewest_rows_reads_the_scan_first() -> None:
    scan = L.Scan("t", (("a", "a"), ("b", "b")), est_rows=1000.0)

    def jf(col: str, keep: float) -> JoinFilter:
        return JoinFilter("keys", 1, f"f_{col}", (col,), ("BIGINT",), 0, "t", keep, f"on {col}")

    class Ctx:
        join_filters = {id(scan): [jf("a", 0.2), jf("b", 0.001)]}

    out = apply_filters(Ctx(), scan, scan)
    # the outermost filter is the last applied: the one on "a", which keeps more
    assert out.label == "on a"  # type: ignore[attr-defined]
    assert out.inputs[0].label == "on b"  # type: ignore[attr-defined]
