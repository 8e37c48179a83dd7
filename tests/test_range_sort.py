"""Range-partitioned ORDER BY (driver/planner/rules/sort.py, operators/rangepart.py) against DuckDB.

A table written here holds the awkward cases: ties and a dominant key, NULLs, an all-NULL column,
empty and non-ASCII strings and prefixes of each other, dates, decimals, doubles with NaN and
-0.0. Every query runs at W = 1..4 with ``range_sort_rows=0`` (so W > 1 range-partitions), and the
rows must equal DuckDB's in order (ties compared as multisets, ``squall.testing``). The stats must
show that every rank sorted only its range.
"""

from __future__ import annotations

import datetime
import decimal

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.operators.rangepart import splitters
from squall.testing import assert_same_result

ROWS = 8000

QUERIES = {
    "int_unique": "SELECT id, k_int FROM s ORDER BY k_int, id",
    "int_desc_ties": "SELECT id, k_int FROM s ORDER BY k_int DESC NULLS FIRST",
    "str_date": "SELECT id, k_str, k_date FROM s ORDER BY k_str NULLS FIRST, k_date DESC",
    "str_desc": "SELECT id, k_str FROM s ORDER BY k_str DESC NULLS LAST",
    "decimal_double": "SELECT id, k_dec, k_dbl FROM s ORDER BY k_dec DESC NULLS LAST, k_dbl",
    "double_desc": "SELECT id, k_dbl FROM s ORDER BY k_dbl DESC",
    "all_null": "SELECT id, k_null FROM s ORDER BY k_null",
    "empty": "SELECT id, k_date, k_str FROM s WHERE id < 0 ORDER BY k_date, k_str DESC",
    "dominant": "SELECT id, k_hot, k_str FROM s ORDER BY k_hot, k_str",
    "expression_ordinal": "SELECT id, k_int * 2 AS x, k_date FROM s ORDER BY 2 DESC, 3",
    "hidden_key": "SELECT id FROM s ORDER BY k_date NULLS FIRST, id DESC",
}


def _table(rng: np.random.Generator) -> pa.Table:
    n = ROWS
    nulls = rng.random(n) < 0.1
    strings = ["", "a", "ab", "abc", "b", "Z", "é", "ñu", "a b", "zz\u00e9"]
    base = datetime.date(1995, 1, 1)
    dbl_pool = np.array([-2.5, -0.0, 0.0, 1.0, 3.25, np.inf, -np.inf, np.nan])
    return pa.table(
        {
            "id": pa.array(np.arange(n), pa.int64()),
            "k_int": pa.array(rng.integers(0, 12, n), pa.int64(), mask=nulls),
            "k_str": pa.array(
                [strings[i] for i in rng.integers(0, len(strings), n)], pa.string(), mask=rng.random(n) < 0.05
            ),
            "k_date": pa.array(
                [base + datetime.timedelta(days=int(d)) for d in rng.integers(0, 400, n)],
                pa.date32(),
                mask=rng.random(n) < 0.05,
            ),
            "k_dec": pa.array(
                [decimal.Decimal(int(v)).scaleb(-2) for v in rng.integers(-5000, 5000, n)],
                pa.decimal128(15, 2),
                mask=rng.random(n) < 0.05,
            ),
            "k_dbl": pa.array(
                dbl_pool[rng.integers(0, len(dbl_pool), n)], pa.float64(), mask=rng.random(n) < 0.05
            ),
            "k_null": pa.nulls(n, pa.int32()),
            # 90 % of the rows share one key: must not all land on one rank
            "k_hot": pa.array(np.where(rng.random(n) < 0.9, 7, rng.integers(0, 100, n)), pa.int64()),
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rangesort")
    pq.write_table(_table(np.random.default_rng(14)), folder / "s.parquet", row_group_size=ROWS // 8)
    return folder


@pytest.fixture(scope="module")
def reference(data):
    con = duckdb.connect()
    con.execute(f"CREATE VIEW s AS SELECT * FROM read_parquet('{data / 's.parquet'}')")
    yield con
    con.close()


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda w: f"W{w}")
def con(request, data):
    c = squall.connect(
        data=str(data), workers=request.param, planner_options=PlannerOptions(range_sort_rows=0)
    )
    yield c
    c.close()


@pytest.mark.parametrize("name", list(QUERIES))
def test_order_by_matches_duckdb(con, reference, name):
    sql = QUERIES[name]
    result = con.sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    if con.workers > 1:
        assert "range(" in con.explain(sql)
        sort = result.stats["sort"]
        assert sort["method"] == "range"
        assert len(sort["rows_sorted_per_rank"]) == con.workers
        assert sum(sort["rows_sorted_per_rank"]) == result.num_rows
        for w in result.stats["per_worker"]:
            assert w["rows_sorted"] == sort["rows_sorted_per_rank"][w["rank"]]
    else:
        assert "sort" not in result.stats


def test_peak_rows_per_rank_well_below_total(data):
    """At W=4 no rank holds more than half the rows (balanced splits: about a quarter each);
    the same query gathered to rank 0 holds all of them there."""
    sql = "SELECT id, k_date, k_str FROM s ORDER BY k_date, id"
    with squall.connect(data=str(data), workers=4, planner_options=PlannerOptions(range_sort_rows=0)) as c:
        ranged = c.sql(sql)
    peaks = [w["peak_rows"] for w in ranged.stats["per_worker"]]
    assert ranged.stats["sort"]["peak_rows_per_rank"] == peaks
    assert max(peaks) <= ROWS // 2, peaks
    assert max(ranged.stats["sort"]["rows_sorted_per_rank"]) <= ROWS // 2
    with squall.connect(data=str(data), workers=4) as c:  # default threshold: too small to range-partition
        gathered = c.sql(sql)
        assert "ORDER BY on rank 0: ~" in c.explain(sql)
    assert "sort" not in gathered.stats
    assert gathered.stats["per_worker"][0]["peak_rows"] == ROWS


def test_dominant_key_spread_over_ranks(data):
    """90 % of the rows have k_hot = 7: its rows are spread round-robin over the ranks whose
    splitters it fills, so no rank sorts more than about half the rows."""
    sql = QUERIES["dominant"]
    with squall.connect(data=str(data), workers=4, planner_options=PlannerOptions(range_sort_rows=0)) as c:
        result = c.sql(sql)
    per_rank = result.stats["sort"]["rows_sorted_per_rank"]
    assert sum(per_rank) == ROWS
    assert max(per_rank) < ROWS * 0.5, per_rank
    assert sum(1 for n in per_rank if n > 0) == 4


def test_splitters_weighted_quantiles():
    """A rank with few rows (high weight per sampled key) moves the splitters as its rows deserve."""
    keys = [bytes([b]) for b in range(10)]
    sample = pa.table({"sk": pa.array(keys, pa.binary()), "w": pa.array([1.0] * 9 + [91.0])})
    assert splitters(sample, 2) == [bytes([9])]  # the heavy last key holds 91 % of the weight
    even = pa.table({"sk": pa.array(keys, pa.binary()), "w": pa.array([1.0] * 10)})
    assert splitters(even, 2) == [bytes([4])]
    assert splitters(even, 1) == []
    assert splitters(even.slice(0, 0), 4) == []
