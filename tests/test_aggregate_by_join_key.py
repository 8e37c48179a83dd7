"""An aggregate grouped by exactly a join's keys, where both join sides are hashed, finishes where its groups
are hashed (driver/planner/rules/joins.py ``_aggregate_by_key``): TPC-H Q17's per-part average (as TPC-DS
Q32/Q92's per-item one) is no longer gathered to rank 0, finished there and hashed out again — a round and a
one-rank stage fewer. Explain says so. (Q17's subquery is planned as written here: by default
``driver/sql/subquery_window`` answers it as a window over the outer rows, which reads lineitem once.) Not where skew-aware exchanges would be planned (the join's bytes at
or over the threshold), and not for an aggregate with more keys than the join; a subquery's projections
that rename the keys are looked through. Answers equal DuckDB's.
"""

from __future__ import annotations

import dataclasses

import pytest

import squall
from squall import tpch
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result

NOTE = "aggregate by l_partkey_2 finished where its groups are hashed by them"
AS_WRITTEN = PlannerOptions(disabled_rules=("subquery_window",))


def _one_rank_middle_stages(plan) -> list[int]:
    last = plan.stages[-1].id
    return [s.id for s in plan.stages if len(s.ranks) == 1 and s.id != last]


@pytest.mark.parametrize("workers", [2, 3])
def test_q17s_average_per_part_is_finished_by_key(sf001, reference_sf001, workers):
    sql = tpch.query(17, sf=0.01)
    with squall.connect(str(sf001), workers=workers, planner_options=AS_WRITTEN) as con:
        plan = con.plan(sql)
        assert _one_rank_middle_stages(plan) == [], con.explain(sql)
        assert any(NOTE in n for n in plan.notes), plan.notes
        assert len(plan.stages) == 4
        assert_same_result(con.sql(sql).arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)


def test_not_where_the_join_would_take_skew_aware_exchanges(sf001, reference_sf001):
    sql = tpch.query(17, sf=0.01)
    with squall.connect(
        str(sf001), workers=2, planner_options=dataclasses.replace(AS_WRITTEN, skew_min_bytes=0)
    ) as con:
        plan = con.plan(sql)
        assert not any(NOTE in n for n in plan.notes), plan.notes
        assert _one_rank_middle_stages(plan), con.explain(sql)  # gathered, finished on rank 0, hashed out
        assert_same_result(con.sql(sql).arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)


SUBQUERY = (
    "SELECT count(*) AS n, sum(x.a) AS s FROM part AS p LEFT JOIN (SELECT l_partkey, {more}avg(l_quantity) AS a "
    "FROM lineitem GROUP BY {keys}) AS x ON p.p_partkey = x.l_partkey WHERE p.p_brand = 'Brand#23'"
)


@pytest.mark.parametrize(
    ("more", "keys", "by_key"),
    [("", "1", True), ("l_suppkey, ", "1, 2", False)],
    ids=["same-keys", "more-keys"],
)
def test_a_subquerys_aggregate_under_renaming_projections(sf001, reference_sf001, more, keys, by_key):
    sql = SUBQUERY.format(more=more, keys=keys)
    with squall.connect(str(sf001), workers=2) as con:
        plan = con.plan(sql)
        noted = any("finished where its groups are hashed" in n for n in plan.notes)
        assert noted == by_key and (not _one_rank_middle_stages(plan)) == by_key, con.explain(sql)
        assert_same_result(con.sql(sql).arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)
