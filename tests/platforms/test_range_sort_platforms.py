"""Range-partitioned ORDER BY on every exchange: local folder, S3 on moto (local-s3, lambda-local), libfabric tcp.

The sample round and the range exchange go through the platform's own exchange, and the result
comes back as one part per rank, concatenated by the driver in rank order (local and fabric: a
file per rank; Lambda: an S3 object per rank). TPC-H SF0.1 lineitem (filtered, so the reference
comparison stays quick), W=4, ``range_sort_rows=0``; rows must equal DuckDB's in order (ties as
multisets) and nothing may be left behind.
"""

from __future__ import annotations

import pytest

from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result

from .backends import Site, backend_named

BACKENDS = ("local", "local-s3", "lambda-local", "fabric-tcp")
QUERIES = {
    "date_desc_string": "SELECT l_orderkey, l_linenumber, l_shipdate, l_comment FROM lineitem "
    "WHERE l_orderkey < 20000 ORDER BY l_shipdate DESC, l_comment",
    "nulls_first_decimal_ties": "SELECT l_orderkey, l_extendedprice, "
    "CASE WHEN l_linenumber = 1 THEN NULL ELSE l_discount END AS d FROM lineitem "
    "WHERE l_orderkey < 20000 ORDER BY d NULLS FIRST, l_extendedprice DESC",
    "all_null_key": "SELECT l_orderkey, NULLIF(l_linenumber, l_linenumber) AS z FROM lineitem "
    "WHERE l_orderkey < 3000 ORDER BY z, l_orderkey",
    "empty": "SELECT l_orderkey, l_shipdate FROM lineitem WHERE l_quantity < 0 ORDER BY l_shipdate",
}


@pytest.fixture(scope="module", params=BACKENDS)
def site(request, tmp_path_factory):
    backend = backend_named(request.param)
    reason = backend.skip()
    if reason:
        pytest.skip(reason)
    with backend.open(backend, tmp_path_factory.mktemp(backend.name)) as s:
        yield s


@pytest.fixture(scope="module")
def con(site: Site, sf01):
    c = site.connect(sf01, workers=4, planner_options=PlannerOptions(range_sort_rows=0))
    yield c
    c.close()
    assert site.leftovers() == [], "left behind after the connection closed"


@pytest.mark.parametrize("name", list(QUERIES))
def test_range_sort_matches_duckdb(site, con, reference, name):
    sql = QUERIES[name]
    result = con.sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    sort = result.stats["sort"]
    assert sum(sort["rows_sorted_per_rank"]) == result.num_rows
    if result.num_rows:
        assert sort["sampled_keys"] > 0
        assert sort["sample_bytes_sent"] > 0  # the sample round crossed the exchange
    assert site.leftovers() == [], "left behind after a successful query"
