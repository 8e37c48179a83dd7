"""TPC-H through the embedded engine, checked against DuckDB on the same files.

SF1 runs the queries of the "embedded engine" milestone for W = 1, 2, 4 with the
validation parameters and two random substitution sets. SF0.01 runs all 22
queries: each must match DuckDB or fail with a clear "not supported" — never a
wrong answer. Every plan also round-trips through JSON.
"""

from __future__ import annotations

import pytest

from squall import tpch
from squall.driver.plan import Plan
from squall.errors import NotSupportedError
from squall.testing import assert_same_result

MILESTONE = (1, 3, 5, 6, 10, 12, 14, 19)
WORKERS = (1, 2, 4)
PARAM_SETS = ("validation", 11, 29)


def _params(n: int, which):
    return tpch.validation_params(n) if which == "validation" else tpch.random_params(n, which)


def _check(con, reference, sql: str) -> None:
    plan = con.plan(sql)
    assert Plan.from_json(plan.to_json()) == plan
    result = con.sql(sql)
    expected = reference.sql(sql).to_arrow_table()
    assert_same_result(result.to_arrow(), expected, sql)


@pytest.mark.parametrize("params", PARAM_SETS, ids=lambda p: f"params-{p}")
@pytest.mark.parametrize("n", MILESTONE, ids=lambda n: f"q{n:02d}")
@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"w{w}")
def test_tpch_sf1(connections, sf1, reference_sf1, workers, n, params):
    con = connections.get(sf1, workers)
    _check(con, reference_sf1, tpch.query(n, _params(n, params)))


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"w{w}")
def test_tpch_sf001_all_queries_right_or_not_supported(connections, sf001, reference_sf001, workers, n):
    con = connections.get(sf001, workers)
    sql = tpch.query(n, sf=0.01)
    try:
        _check(con, reference_sf001, sql)
    except NotSupportedError as err:
        assert str(err).startswith("not supported: ")
        assert "\n" not in str(err)


@pytest.mark.parametrize("n", MILESTONE, ids=lambda n: f"q{n:02d}")
def test_tpch_on_split_files(connections, sf001_parts, reference_sf001, n):
    """Tables as folders of several files give the same answers (splits span files)."""
    con = connections.get(sf001_parts, 3)
    sql = tpch.query(n, sf=0.01)
    assert_same_result(con.sql(sql).to_arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)
