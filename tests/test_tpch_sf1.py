"""The main correctness suite: TPC-H with its validation and random substitution parameters on the
local platform, checked against DuckDB on the same files.

At SF1 all 22 queries run for W = 1, 2, 4 with the validation parameters, and
with two random substitution sets (all queries on W = 2, the milestone ones on
W = 1 and 4). At SF0.01 all 22 run with three random sets on every W, and once
on tables split into several files. Every plan also round-trips through JSON.

Plans do not depend on the platform, so parameters are varied here only; every
platform runs TPC-H with the default parameters in ``tests/platforms`` (the
platform suite).
"""

from __future__ import annotations

import pytest

from squall import tpch
from squall.driver.ir.nodes import WHOLE_QUERY_AT_W1
from squall.plan import Plan
from squall.testing import assert_same_result

MILESTONE = (1, 3, 5, 6, 10, 12, 14, 19)
ALL = tpch.QUERY_NUMBERS
WORKERS = (1, 2, 4)
SEEDS = (11, 29)


def _check(con, reference, sql: str) -> None:
    """At W=1 too Squall's own stage plan (``connections`` turns ``whole_query_at_w1`` off), checked by the
    strict comparator with DuckDB's tied rows as the LIMIT candidates."""
    plan = con.plan(sql)
    assert Plan.from_json(plan.to_json()) == plan
    result = con.sql(sql)
    expected = reference.sql(sql).to_arrow_table()
    assert_same_result(result.to_arrow(), expected, sql, reference=reference)


@pytest.mark.parametrize("n", ALL, ids=lambda n: f"q{n:02d}")
@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"w{w}")
def test_tpch_sf1_validation_params(connections, sf1, reference_sf1, workers, n):
    _check(connections.get(sf1, workers), reference_sf1, tpch.query(n, tpch.validation_params(n)))


def test_tpch_sf1_whole_query_at_w1(connections, sf1, reference_sf1):
    """The thin-shell path: at W=1 DuckDB plans the whole query (Q9's joins, grouping, ordering) over
    Squall's scans."""
    con = connections.get(sf1, 1, whole_query=True)
    sql = tpch.query(9, tpch.validation_params(9))
    assert any(n.startswith(WHOLE_QUERY_AT_W1) for n in con.plan(sql).notes)
    _check(con, reference_sf1, sql)


RANDOM_CASES = [(2, n, seed) for n in ALL for seed in SEEDS] + [
    (w, n, seed) for w in (1, 4) for n in MILESTONE for seed in SEEDS
]


@pytest.mark.parametrize(("workers", "n", "seed"), RANDOM_CASES, ids=lambda v: str(v))
def test_tpch_sf1_random_params(connections, sf1, reference_sf1, workers, n, seed):
    _check(connections.get(sf1, workers), reference_sf1, tpch.query(n, tpch.random_params(n, seed)))


@pytest.mark.parametrize("seed", (3, 5, 8), ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("n", ALL, ids=lambda n: f"q{n:02d}")
@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"w{w}")
def test_tpch_sf001_random_params(connections, sf001, reference_sf001, workers, n, seed):
    sql = tpch.query(n, tpch.random_params(n, seed, sf=0.01), sf=0.01)
    _check(connections.get(sf001, workers), reference_sf001, sql)


@pytest.mark.parametrize("n", ALL, ids=lambda n: f"q{n:02d}")
def test_tpch_on_split_files(connections, sf001_parts, reference_sf001, n):
    """Tables as folders of several files give the same answers (splits span files)."""
    con = connections.get(sf001_parts, 3)
    sql = tpch.query(n, sf=0.01)
    expected = reference_sf001.sql(sql).to_arrow_table()
    assert_same_result(con.sql(sql).to_arrow(), expected, sql, reference=reference_sf001)
