"""Common subplans computed once (driver/planner/reuse.py): a subquery read twice is one stage, whose exchange
both readers take; answers match DuckDB with reuse on and off, at W = 2..4 and with skew-aware exchanges."""

from __future__ import annotations

import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.driver.planner.reuse import stage_key
from squall.plan import DataSkipping, ExchangeInput, Output, ScanInput
from squall.testing import assert_same_result
from squall.tpch import query

#: a CTE read by both sides of a self-join: its partial aggregate is hash-partitioned by the join key
SELF_JOIN = (
    "WITH r AS (SELECT l_orderkey, sum(l_quantity) AS q, count(*) AS n FROM lineitem GROUP BY l_orderkey) "
    "SELECT count(*) AS c, sum(a.q + b.q) AS s, max(a.n + b.n) AS m FROM r a JOIN r b ON a.l_orderkey = b.l_orderkey"
)
#: the same subquery shape twice with another constant: two stages
DIFFERENT = (
    "SELECT (SELECT count(*) FROM lineitem WHERE l_quantity < 10) AS a, "
    "(SELECT count(*) FROM lineitem WHERE l_quantity < 20) AS b"
)

#: a CTE whose join reads a stage of its own (the filtered orders, broadcast) and aggregates above it, read twice:
#: the second copy reads that shared stage under its own names, so the stage above is the same and runs once too
SHARED_BELOW_SHARED = (
    "WITH v AS (SELECT l_suppkey AS k, sum(l_extendedprice) AS s FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
    "WHERE o_orderdate < DATE '1992-03-01' GROUP BY l_suppkey) "
    "SELECT count(*) AS n, sum(s) AS t FROM v WHERE s > (SELECT avg(s) FROM v)"
)

#: a CTE read twice, each read filtered by its own return flag (driver/logical/rules/shared_filters.py)
READS_FILTERED_APART = (
    "WITH r AS (SELECT l_suppkey AS k, l_returnflag AS f, sum(l_quantity) AS q, count(*) AS n FROM lineitem "
    "GROUP BY l_suppkey, l_returnflag) "
    "SELECT a.k, a.q, b.q AS q2, a.n + b.n AS n FROM r a JOIN r b ON a.k = b.k WHERE a.f = 'A' AND b.f = 'R'"
)


def _scan(name: str, alias: str, filters: tuple[str, ...] = (), probe: str = "") -> ScanInput:
    skipping = DataSkipping(planned=1, probe_sql=probe) if probe else None
    return ScanInput(
        name, "lineitem", "/d/lineitem.parquet", (("l_quantity", alias),), ((), ()), filters=filters,
        skipping=skipping,
    )  # fmt: skip


def test_stage_key_is_blind_to_column_names_only():
    out = Output("gather")
    one = stage_key('SELECT SUM("q") AS "s" FROM "s1_lineitem"', [_scan("s1_lineitem", "q")], (0, 1), out)
    two = stage_key(
        'SELECT SUM("q_2") AS "s_2" FROM "s3_lineitem"', [_scan("s3_lineitem", "q_2")], (0, 1), out
    )
    assert one == two
    other_function = stage_key(
        'SELECT MAX("q") AS "s" FROM "s1_lineitem"', [_scan("s1_lineitem", "q")], (0, 1), out
    )
    other_filter = stage_key(
        'SELECT SUM("q") AS "s" FROM "s1_lineitem"', [_scan("s1_lineitem", "q", ('"q" < 10',))], (0, 1), out
    )
    other_ranks = stage_key(
        'SELECT SUM("q") AS "s" FROM "s1_lineitem"', [_scan("s1_lineitem", "q")], (0,), out
    )
    other_output = stage_key(
        'SELECT SUM("q") AS "s" FROM "s1_lineitem"', [_scan("s1_lineitem", "q")], (0, 1), Output("broadcast")
    )
    other_input = stage_key('SELECT SUM("q") AS "s" FROM "x2"', [ExchangeInput("x2", 2)], (0, 1), out)
    assert len({one, other_function, other_filter, other_ranks, other_output, other_input}) == 6


def test_stage_key_reads_a_probe_condition_in_the_scans_own_names():
    """A probed scan's condition names the copy's own columns: two copies still compare equal (they did not,
    and every probed scan's subquery was computed once per read)."""
    out = Output("gather")

    def key(table: str, col: str, probe: str) -> tuple[object, ...]:
        scan = _scan(table, col, (f'"{col}" < 10',), probe=probe)
        return stage_key(f'SELECT SUM("{col}") AS "s" FROM "{table}"', [scan], (0, 1), out)

    assert key("s1_lineitem", "q", '("q" < 10)') == key("s3_lineitem", "q_2", '("q_2" < 10)')
    assert key("s1_lineitem", "q", '("q" < 10)') != key("s3_lineitem", "q_2", '("q_2" < 11)')


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_q15_computes_its_view_once(sf001, reference_sf001, workers):
    sql = query(15)
    expected = reference_sf001.sql(sql).to_arrow_table()
    with squall.connect(data=str(sf001), workers=workers) as con:
        plan = con.explain(sql)
        assert_same_result(con.sql(sql).to_arrow(), expected, sql)
    assert plan.count("scan lineitem") == 1 and "computed once" in plan, plan
    off = PlannerOptions(reuse_subplans=False)
    with squall.connect(data=str(sf001), workers=workers, planner_options=off) as con:
        plan = con.explain(sql)
        assert_same_result(con.sql(sql).to_arrow(), expected, sql)
    assert plan.count("scan lineitem") == 2 and "computed once" not in plan


@pytest.mark.parametrize("skew_min_bytes", [64e6, 0.0])
@pytest.mark.parametrize("workers", [2, 3])
def test_a_cte_read_by_both_join_sides(sf001, reference_sf001, workers, skew_min_bytes):
    """The CTE's hash exchange feeds both sides; with skew-aware exchanges forced, the first copy's exchange
    becomes a key-range group member and the second copy is planned on its own (never a shared group)."""
    expected = reference_sf001.sql(SELF_JOIN).to_arrow_table()
    opts = PlannerOptions(broadcast_limit=0.0, gather_groups=0, skew_min_bytes=skew_min_bytes)
    with squall.connect(data=str(sf001), workers=workers, planner_options=opts) as con:
        plan = con.explain(SELF_JOIN)
        assert_same_result(con.sql(SELF_JOIN).to_arrow(), expected, SELF_JOIN)
    shared = "computed once" in plan
    assert shared == (skew_min_bytes > 0), plan
    assert plan.count("scan lineitem") == (1 if shared else 2)


def test_different_subqueries_are_not_merged(sf001, reference_sf001):
    with squall.connect(data=str(sf001), workers=2) as con:
        plan = con.explain(DIFFERENT)
        assert_same_result(
            con.sql(DIFFERENT).to_arrow(), reference_sf001.sql(DIFFERENT).to_arrow_table(), DIFFERENT
        )
    assert plan.count("scan lineitem") == 2 and "computed once" not in plan


@pytest.mark.parametrize("workers", [2, 3])
def test_reads_filtered_apart_share_one_computation(sf001, reference_sf001, workers):
    """Each read's filter goes into the CTE as one OR (only the two flags' rows are aggregated), the CTE is still
    computed once, and each read keeps its own filter; the same answer with the rule off."""
    sql = READS_FILTERED_APART
    expected = reference_sf001.sql(sql).to_arrow_table()
    with squall.connect(data=str(sf001), workers=workers) as con:
        plan = con.explain(sql)
        assert_same_result(con.sql(sql).to_arrow(), expected, sql)
    assert "filters of 2 reads of one subquery shared" in plan and "computed once" in plan, plan
    assert plan.count("scan lineitem") == 1 and 'OR "l_returnflag" = ' in plan, plan
    off = PlannerOptions(disabled_rules=frozenset({"shared_filters"}))
    with squall.connect(data=str(sf001), workers=workers, planner_options=off) as con:
        plan = con.explain(sql)
        assert_same_result(con.sql(sql).to_arrow(), expected, sql)
    assert "shared" not in plan and "OR" not in plan, plan


@pytest.mark.parametrize("workers", [2, 3])
def test_a_stage_over_a_shared_stage_is_shared_too(sf1, reference_sf1, workers):
    """TPC-DS Q24's shape: the second reader of the broadcast orders reads it under its own column names (an
    exchange input read as them, not a renaming projection), so the join and partial aggregate above it compare
    equal to the first copy's and run once: lineitem is scanned once, not twice (SF1: orders is split by row
    group, so its filtered rows are a stage of their own). On rank 0 the two reads' final aggregates are one."""
    sql = SHARED_BELOW_SHARED
    expected = reference_sf1.sql(sql).to_arrow_table()
    with squall.connect(data=str(sf1), workers=workers) as con:
        plan = con.explain(sql)
        assert_same_result(con.sql(sql).to_arrow(), expected, sql)
    assert plan.count("scan lineitem") == 1 and plan.count("computed once: the same subplan") == 2, plan
    # the two reads' final aggregates on rank 0: one MATERIALIZED CTE (driver/planner/repeats.py)
    assert "a subplan it reads 2 times computed once" in plan and "AS MATERIALIZED (" in plan, plan
    off = PlannerOptions(reuse_subplans=False)
    with squall.connect(data=str(sf1), workers=workers, planner_options=off) as con:
        assert_same_result(con.sql(sql).to_arrow(), expected, sql)


#: TPC-DS Q47/Q57's shape: a CTE with two windows over different partitions (so on rank 0), read three times;
#: the lag and lead reads use only the rank
WINDOWS_READ_THRICE = """
WITH v1 AS (
  SELECT l_suppkey, l_returnflag, l_linenumber, sum(l_quantity) AS s,
         avg(sum(l_quantity)) OVER (PARTITION BY l_suppkey, l_returnflag) AS a,
         rank() OVER (PARTITION BY l_suppkey ORDER BY l_returnflag, l_linenumber) AS rn
  FROM lineitem WHERE l_suppkey <= 40 GROUP BY l_suppkey, l_returnflag, l_linenumber)
SELECT v1.l_suppkey, v1.l_returnflag, v1.l_linenumber, v1.s, v1.a, lag.s AS before, lead.s AS after
FROM v1, v1 AS lag, v1 AS lead
WHERE v1.l_suppkey = lag.l_suppkey AND v1.l_suppkey = lead.l_suppkey AND v1.rn = lag.rn + 1 AND v1.rn = lead.rn - 1
ORDER BY 1, 2, 3
"""


@pytest.mark.parametrize("workers", [2, 3])
def test_a_ctes_windows_are_computed_once_for_all_its_reads(sf001, reference_sf001, workers):
    """The lag and lead reads keep the average they do not read (it reads nothing more), so the three reads
    stay equal and their windows are one MATERIALIZED CTE of the stage: each window function written once."""
    sql = WINDOWS_READ_THRICE
    with squall.connect(data=str(sf001), workers=workers) as con:
        plan = con.explain(sql)
        assert_same_result(con.sql(sql).to_arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)
    assert "a subplan it reads 3 times computed once" in plan, plan
    assert plan.count("RANK() OVER") == 1 and plan.count("AVG(") == 1, plan
