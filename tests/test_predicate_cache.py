"""Predicate cache (HRDBMS predicate-based data skipping) and Parquet Bloom filters: row groups skipped, answers
checked against DuckDB on the same files.

The data: TPC-H SF0.01 lineitem ordered by l_orderkey, 500-row row groups (121 of them), so min/max statistics
of l_shipdate / l_discount / l_quantity span nearly the whole domain in every row group and prune nothing.
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

import squall
from squall.driver.options import PlannerOptions
from squall.driver.skipping.predicate_cache import PredicateCache
from squall.driver.skipping.predicates import parse_key, predicate_key
from squall.testing import assert_same_result

from .s3server import moto_available, moto_s3

Q6 = """SELECT sum(l_extendedprice * l_discount) AS revenue, count(*) AS n FROM lineitem
WHERE l_shipdate >= DATE '{lo}' AND l_shipdate < DATE '{hi}'
  AND l_discount BETWEEN {dlo} AND {dhi} AND l_quantity < {q}"""
FIRST = Q6.format(lo="1994-01-01", hi="1994-01-04", dlo=0.05, dhi=0.07, q=24)


def _sorted_lineitem(sf001) -> pa.Table:
    con = duckdb.connect()
    try:
        path = os.path.join(str(sf001), "lineitem.parquet")
        return con.sql(
            f"SELECT * FROM read_parquet('{path}') ORDER BY l_orderkey, l_linenumber"
        ).to_arrow_table()
    finally:
        con.close()


@pytest.fixture(scope="module")
def lineitem(sf001):
    return _sorted_lineitem(sf001)


@pytest.fixture()
def data(tmp_path, lineitem):
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(lineitem, folder / "lineitem.parquet", row_group_size=500)
    return folder


def _check(con: squall.Connection, data, sql: str) -> dict:
    """Run ``sql`` on Squall and DuckDB over the same file; the answers must match. Returns the scan's skipping."""
    result = con.sql(sql)
    ref = duckdb.connect()
    try:
        ref.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{data / 'lineitem.parquet'}')")
        assert_same_result(result.to_arrow(), ref.sql(sql).to_arrow_table(), sql)
    finally:
        ref.close()
    (scan,) = result.stats["data_skipping"]["scans"]
    return scan


def _key(where: str) -> str:
    tree = sqlglot.parse_one(f"SELECT * FROM t WHERE {where}", dialect="duckdb")
    cond = tree.args["where"].this
    conjuncts = list(cond.flatten()) if isinstance(cond, sqlglot.exp.And) else [cond]
    return predicate_key(conjuncts, {"a": "a", "b": "b", "s": "s", "x": "a"})


@pytest.mark.parametrize(
    ("now", "cached", "implied"),
    [
        ("a >= 5 AND a < 10", "a < 10 AND a >= 5", True),  # same, other order
        ("x >= 5 AND 10 > x", "a >= 5 AND a < 10", True),  # other column alias, flipped comparison
        ("a BETWEEN 6 AND 8", "a >= 5 AND a < 10", True),  # narrower range
        ("a >= 5 AND a <= 9", "a BETWEEN 5 AND 9", True),  # BETWEEN spelled as two comparisons
        ("a = 7", "a >= 5 AND a < 10", True),  # equality inside a cached range
        ("a IN (6, 7)", "a BETWEEN 5 AND 9", True),  # IN list inside a range
        ("a IN (3, 1)", "a IN (1, 2, 3)", True),  # IN subset, other order
        ("a = 2 AND b > 1", "a IN (1, 2)", True),  # a conjunction containing an implied conjunct
        ("a < 5 AND s LIKE 'x%'", "s LIKE 'x%'", True),  # other conjuncts by canonical text
        ("a >= 5 AND a <= 10", "a >= 5 AND a < 10", False),  # wider (10 included)
        ("a >= 4 AND a < 10", "a >= 5 AND a < 10", False),  # wider below
        ("b >= 5 AND b < 10", "a >= 5 AND a < 10", False),  # another column
        ("a IN (1, 4)", "a IN (1, 2, 3)", False),  # not a subset
        ("a < 10", "a < 10 AND b = 1", False),  # the cached conjunction is narrower
        ("s LIKE 'y%'", "s LIKE 'x%'", False),
        ("a = DATE '1994-01-01'", "a < 5", False),  # values of different kinds: never implied
    ],
)
def test_implication(now, cached, implied):
    assert parse_key(_key(now)).implies(parse_key(_key(cached))) is implied


def test_repeated_selective_query_reads_90_percent_fewer_row_groups(data):
    with squall.connect(data=str(data), workers=2) as con:
        first = _check(con, data, FIRST)
        assert first["planned"] == 121 and first["minmax"] <= 2  # min/max prunes (almost) nothing here
        assert first["cache"] == 0 and first["probed"] == first["read"]
        assert first["probe_empty"] + first["probe_matched"] == first["probed"]
        second = _check(con, data, FIRST)
        assert second["read"] <= first["read"] * 0.10, (first, second)
        assert second["cache"] == first["probe_empty"] and second["probed"] == 0
        assert "by predicate cache" in con.explain(FIRST)
        # the same predicate spelled differently, and narrower ones: skipped as well
        other = """SELECT sum(l_extendedprice * l_discount) AS revenue, count(*) AS n FROM lineitem AS li
            WHERE li.l_quantity < 24 AND li.l_discount >= 0.05 AND li.l_discount <= 0.07
              AND DATE '1994-01-04' > li.l_shipdate AND li.l_shipdate >= DATE '1994-01-01'"""
        assert _check(con, data, other)["cache"] == second["cache"]
        narrower = Q6.format(lo="1994-01-02", hi="1994-01-03", dlo=0.06, dhi=0.07, q=20)
        assert _check(con, data, narrower)["cache"] >= second["cache"]
        in_list = FIRST.replace("l_quantity < 24", "l_quantity IN (3, 7, 11)")
        assert _check(con, data, in_list)["cache"] >= second["cache"]
        # not implied: a wider range, another column's range
        wider = Q6.format(lo="1993-12-31", hi="1994-01-04", dlo=0.05, dhi=0.07, q=24)
        assert _check(con, data, wider)["cache"] == 0
        other_column = FIRST.replace("l_quantity < 24", "l_tax < 0.05")
        assert _check(con, data, other_column)["cache"] == 0


def test_disabled_by_planner_option(data):
    options = PlannerOptions(predicate_cache=False)
    with squall.connect(data=str(data), workers=1, planner_options=options) as con:
        _check(con, data, FIRST)
        again = _check(con, data, FIRST)
        assert again["cache"] == 0 and again["probed"] == 0 and len(con.predicate_cache) == 0


def test_changed_file_invalidates_its_entries(data, lineitem):
    path = data / "lineitem.parquet"
    with squall.connect(data=str(data), workers=2) as con:
        first = _check(con, data, FIRST)
        assert _check(con, data, FIRST)["cache"] == first["probe_empty"] > 0
        # rewrite the file so that every row group now matches: a cached "no match" must not hide them
        dates = pa.array([8_767] * lineitem.num_rows, pa.int32()).cast(pa.date32())  # 1994-01-02 in every row
        changed = lineitem.set_column(lineitem.schema.get_field_index("l_shipdate"), "l_shipdate", dates)
        pq.write_table(changed, path, row_group_size=500)
        after = _check(con, data, FIRST)
        assert after["cache"] == 0 and after["probe_empty"] < first["probe_empty"]
        assert con.predicate_cache.info()["invalidated"] > 0


def test_lru_bound_holds():
    cache = PredicateCache(max_entries=5)
    key = _key("a < 5")
    for rg in range(12):
        cache.record("f.parquet", rg, "1:1", key, True)
    assert len(cache) == 5 and cache.info()["evicted"] == 7
    assert cache.lookup("f.parquet", 0, "1:1", key) is None  # the oldest went first
    assert cache.lookup("f.parquet", 11, "1:1", key) == "empty"
    small = PredicateCache(max_bytes=1_000)
    for rg in range(100):
        small.record("f.parquet", rg, "1:1", key, rg % 2 == 0)
    assert small.info()["bytes"] <= 1_000 and 0 < len(small) < 100


def test_persistence_round_trips(tmp_path):
    path = str(tmp_path / "cache.json")
    cache = PredicateCache(path=path)
    key = _key("a >= 5 AND a < 10")
    cache.record("f.parquet", 3, "10:20", key, True)
    cache.record("f.parquet", 4, "10:20", key, False)
    cache.save(path)
    again = PredicateCache(path=path)
    assert len(again) == 2
    assert again.lookup("f.parquet", 3, "10:20", _key("a = 7")) == "empty"
    assert again.lookup("f.parquet", 4, "10:20", key) == "matched"
    assert again.lookup("f.parquet", 3, "11:20", key) is None  # another stamp: the file changed


def test_persisted_cache_skips_in_a_new_connection(data, tmp_path):
    path = str(tmp_path / "pcache.json")
    with squall.connect(data=str(data), workers=1, predicate_cache=PredicateCache(path=path)) as con:
        first = _check(con, data, FIRST)
    with squall.connect(data=str(data), workers=1, predicate_cache=PredicateCache(path=path)) as con:
        assert _check(con, data, FIRST)["cache"] == first["probe_empty"] > 0


def test_bloom_filters_skip_row_groups(tmp_path):
    # keys shuffled over the row groups: min/max of every row group spans nearly all of them
    n = 20_000
    keys = pa.array(np.random.default_rng(0).permutation(n), pa.int64())
    table = pa.table(
        {"k": keys, "name": pa.array([f"n{i % 1000}" for i in range(n)]), "v": pa.array(range(n))}
    )
    folder = tmp_path / "bloom"
    folder.mkdir()
    pq.write_table(
        table, folder / "t.parquet", row_group_size=1_000, bloom_filter_options={"k": {"ndv": 1_000}}
    )
    with squall.connect(
        data=str(folder), workers=1, planner_options=PlannerOptions(predicate_cache=False)
    ) as con:
        for sql in (
            "SELECT k, v FROM t WHERE k = 4242",
            "SELECT count(*) AS c FROM t WHERE k IN (4242, 9000, 15000)",
        ):
            result = con.sql(sql)
            source = f"FROM read_parquet('{folder / 't.parquet'}')"
            expected = duckdb.sql(sql.replace("FROM t", source))
            assert_same_result(result.to_arrow(), expected.to_arrow_table(), sql)
            (scan,) = result.stats["data_skipping"]["scans"]
            assert scan["minmax"] == 0 and scan["bloom"] >= 15, scan
            assert "by bloom" in con.explain(sql)


@pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
def test_s3_tables_use_the_cache_and_etag_invalidates(tmp_path, lineitem):
    bucket = "squall-pcache-test"
    local = tmp_path / "lineitem.parquet"
    pq.write_table(lineitem, local, row_group_size=500)
    with moto_s3(bucket) as s3:
        client = s3.client()
        client.upload_file(str(local), bucket, "li/lineitem.parquet")
        with squall.connect(workers=2) as con:
            con.register("lineitem", f"s3://{bucket}/li/lineitem.parquet")
            first = _check(con, tmp_path, FIRST)
            assert first["probed"] == first["read"] > 0
            second = _check(con, tmp_path, FIRST)
            assert second["read"] <= first["read"] * 0.10 and second["cache"] == first["probe_empty"]
            # a new object under the same key: a new ETag once the table is listed again
            dates = pa.array([8_767] * lineitem.num_rows, pa.int32()).cast(
                pa.date32()
            )  # 1994-01-02 everywhere
            changed = lineitem.set_column(lineitem.schema.get_field_index("l_shipdate"), "l_shipdate", dates)
            pq.write_table(changed, local, row_group_size=500)
            client.upload_file(str(local), bucket, "li/lineitem.parquet")
            con.register("lineitem", f"s3://{bucket}/li/lineitem.parquet")
            after = _check(con, tmp_path, FIRST)
            assert after["cache"] == 0


def test_service_keeps_one_cache_for_all_its_connections(data):
    from squall.service.backend import LocalBackend

    backend = LocalBackend(str(data), workers=1, max_workers=2)
    try:
        one, two = backend.connection_for(1), backend.connection_for(2)
        assert one.predicate_cache is two.predicate_cache is backend.predicate_cache
        first = _check(one, data, FIRST)
        assert _check(two, data, FIRST)["cache"] == first["probe_empty"] > 0  # learned on W=1, used on W=2
    finally:
        backend.close()


def test_unselective_scans_are_not_probed(data):
    options = PlannerOptions(probe_rows_per_group=100)
    with squall.connect(data=str(data), workers=1, planner_options=options) as con:
        wide = _check(
            con, data, "SELECT count(*) AS n FROM lineitem WHERE l_quantity < 40"
        )  # ~400 rows per group
        assert wide["probed"] == 0 and "rows per row group expected to pass" in wide["probe_note"]
        narrow = _check(con, data, FIRST)  # ~0.06 rows per group expected
        assert narrow["probed"] == narrow["read"] > 0 and narrow["probe_note"] == ""


def test_learning_replans_only_the_query_that_learned(data):
    other = "SELECT count(*) AS n FROM lineitem WHERE l_quantity < 3"
    with squall.connect(data=str(data), workers=1) as con:
        con.sql(other).to_arrow()
        con.sql(other).to_arrow()  # its own outcomes learned: planned again once, then kept
        kept = con.sql(other)
        first = con.sql(FIRST)
        assert (
            first.stats["plan_cache"] == "miss"
            and first.stats["data_skipping"]["scans"][0]["probe_empty"] > 0
        )
        second = con.sql(FIRST)  # learned on its first run: planned again, skipping what it learned
        assert second.stats["plan_cache"] == "miss" and second.stats["data_skipping"]["scans"][0]["cache"] > 0
        assert con.sql(FIRST).stats["plan_cache"] == "hit"  # nothing new learned: the plan is kept
        # another query's cached plan is kept although the cache learned since (it only skips less)
        assert kept.stats["plan_cache"] == "hit" and con.sql(other).stats["plan_cache"] == "hit"


def test_a_query_whose_probes_all_matched_runs_again_from_the_plan_cache(data):
    """Probed row groups that all held matching rows change nothing but the probes: the plan is cached without
    them, as planning it again would make it, and the next run is not planned again (it was: ~10-30 ms of a
    TPC-DS query's second run). A row group found empty still has the query planned again (above)."""
    every_group = "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem WHERE l_quantity < 3"
    with squall.connect(data=str(data), workers=2) as con:
        first = con.sql(every_group)
        (scan,) = first.stats["data_skipping"]["scans"]
        assert scan["probed"] == scan["read"] == 121 and scan["probe_matched"] == 121, scan
        second = con.sql(every_group)
        assert second.stats["plan_cache"] == "hit" and second.stats["data_skipping"]["learned"] == 0
        (scan,) = second.stats["data_skipping"]["scans"]
        assert scan["probed"] == 0 and scan["read"] == 121 and scan["cache"] == 0
        assert _check(con, data, every_group)["probed"] == 0  # the answer still right
        # the cached plan is the one a planner with the same predicate cache makes now
        with squall.connect(data=str(data), workers=2, predicate_cache=con.predicate_cache) as fresh:
            assert fresh.plan(every_group).to_json() == con.plan(every_group).to_json()
        # a wider predicate matches where this one did: nothing of it is probed, and its plan is kept as run
        wider = every_group.replace("< 3", "< 4")
        known = con.sql(wider).stats["data_skipping"]["scans"][0]
        assert known["probed"] == 0 and known["cache"] == 0 and known["read"] == 121
        assert con.sql(wider).stats["plan_cache"] == "hit"
