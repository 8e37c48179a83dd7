"""PIVOT and UNPIVOT against DuckDB on the same files (W = 1, 3, 4), dynamic PIVOT's first query included.

A PIVOT without an IN list reads its ON values with a first query (distributed like any query) and
is planned with them as its IN list; the notes say so; the values are read again on every run, so a
rewritten file shows at once. A PIVOT with IN lists runs distributed as a grouped aggregate with one
FILTER per value column, an UNPIVOT as an unnest; forms not rewritten run on one rank and say so.
"""

from __future__ import annotations

import datetime as dt
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.ir.nodes import WHOLE_QUERY_AT_W1
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result
from tests.fuzz.dataset import duckdb_reference

QUERIES = {
    # dynamic PIVOT: the ON values read by a first query (sorted as text, NULL left out)
    "dynamic": "PIVOT t1 ON grp USING sum(val) GROUP BY flag",
    "dynamic_default_count": "PIVOT t1 ON grp GROUP BY flag",
    "dynamic_several_on": 'PIVOT t1 ON grp, flag USING count(*) GROUP BY "MixedCase"',
    "dynamic_expression": "PIVOT t1 ON grp || '-' || (id % 3) USING sum(amount) GROUP BY flag",
    "dynamic_numbers_sorted_as_text": "PIVOT t1 ON id % 12 USING count(*) GROUP BY grp",
    "dynamic_several_aggregates": "PIVOT t1 ON flag USING sum(val) AS s, count(*) AS n, max(name) GROUP BY grp",
    "dynamic_no_group_by": "PIVOT (SELECT grp, flag, val FROM t1) ON flag USING sum(val)",
    "dynamic_no_using_no_group_by": "PIVOT (SELECT grp, flag FROM t1) ON flag",
    "dynamic_in_subquery": "PIVOT t1 ON grp IN (SELECT DISTINCT cat FROM t2 ORDER BY cat NULLS FIRST) "
    "USING count(*) GROUP BY flag",
    "dynamic_in_subquery_desc": "PIVOT (SELECT grp, val, id % 4 AS m FROM t1) ON m IN (SELECT score FROM t2 WHERE score < 4 GROUP BY score "
    "ORDER BY score DESC) USING sum(val) GROUP BY grp",
    "dynamic_over_cte": "WITH s AS (SELECT grp, flag, val FROM t1 WHERE id < 2000) "
    "PIVOT s ON grp USING avg(val) GROUP BY flag",
    "dynamic_in_from": "SELECT * FROM (PIVOT (SELECT grp, d, val FROM t1) ON year(d) USING sum(val) GROUP BY grp) p "
    "WHERE grp IS NOT NULL",
    "dynamic_in_cte": "WITH p AS (PIVOT t1 ON flag USING count(*) GROUP BY grp) SELECT * FROM p ORDER BY grp",
    "dynamic_mixed_with_in_list": 'PIVOT t1 ON flag IN (true), grp USING count(*) GROUP BY "MixedCase"',
    "dynamic_two_joined": "SELECT * FROM (PIVOT t1 ON flag USING count(*) GROUP BY grp) a "
    "JOIN (PIVOT (SELECT cat AS grp, score FROM t2) ON score % 3 USING count(*) GROUP BY grp) b USING (grp)",
    "dynamic_nested": "PIVOT (PIVOT (SELECT grp, flag, id % 2 AS m FROM t1) ON flag USING count(*) AS n "
    "GROUP BY grp, m) ON m "
    "USING sum(true_n) GROUP BY grp",
    "dynamic_all_null": "PIVOT t1 ON nothing USING sum(val) GROUP BY grp",
    "dynamic_all_null_no_group_by": "PIVOT (SELECT grp, flag, nothing, val FROM t1) ON nothing USING sum(val)",
    "dynamic_empty_source": "PIVOT t2_empty ON cat USING sum(score) GROUP BY t1_id",
    "dynamic_order_limit": "PIVOT t1 ON flag USING count(*) GROUP BY grp ORDER BY grp NULLS FIRST LIMIT 3",
    # PIVOT with IN lists
    "in_list": "PIVOT t1 ON flag IN (true, false) USING count(*) AS n, sum(val) AS s GROUP BY grp",
    "in_list_with_null": "PIVOT t1 ON grp IN ('g1', NULL, 'g3') USING sum(val) GROUP BY flag",
    "in_list_no_group_by": "PIVOT (SELECT grp, flag, val FROM t1) ON flag IN (true, false) USING sum(val)",
    "standard": "SELECT * FROM (SELECT grp, flag, val FROM t1) PIVOT (sum(val) FOR flag IN (true, false))",
    "standard_several": "SELECT * FROM t1 PIVOT (sum(val) AS s, count(*) AS n FOR flag IN (true, false) "
    "grp IN ('g1', 'g2') GROUP BY \"MixedCase\")",
    "in_list_many_values": "PIVOT t1 ON (id % 25) IN (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, "
    "19, 20, 21, 22, 23, 24) USING sum(val), count(*) GROUP BY grp",  # DuckDB: its LIST strategy above 20
    "dynamic_many_values": "PIVOT t1 ON id % 30 USING avg(val) AS a GROUP BY flag",
    "in_list_aggregate_keeping_nulls": "PIVOT t1 ON flag IN (true, false) USING list(id ORDER BY id) GROUP BY grp",
    "in_list_expression": "PIVOT t1 ON (grp || '!') IN ('g1!', 'g2!') USING max(amount) GROUP BY flag",
    "dynamic_boolean_expression": "PIVOT t1 ON id % 3 IN (0, 1) USING count(*) GROUP BY grp",  # DuckDB's grammar
    "standard_aliases": "SELECT * FROM t1 PIVOT (max(amount) FOR grp IN ('g1' AS one, 'g2' AS two) GROUP BY flag)",
    # UNPIVOT
    "unpivot_order_by": "UNPIVOT (SELECT cat, weight, weight * 2 AS w2 FROM t3b) ON weight, w2 INTO NAME k VALUE v "
    "ORDER BY cat, k",
    "unpivot_expression": "UNPIVOT (SELECT cat, weight FROM t3b) ON weight, weight + 1 INTO NAME k VALUE v",
    "unpivot_columns_exclude": 'UNPIVOT t1 ON COLUMNS(* EXCLUDE (id, grp, d, flag, "MixedCase", name, nothing)) '
    "INTO NAME k VALUE v",
    "unpivot_order_of_on_list": "UNPIVOT (SELECT cat, weight, weight * 2 AS w2 FROM t3b) ON w2, weight",
    "unpivot_columns": "UNPIVOT (SELECT cat, weight, weight + 1 AS w1 FROM t3b) ON COLUMNS('^w') INTO NAME k VALUE v",
    "unpivot_case": "UNPIVOT (SELECT cat, weight, weight * 2 AS W2 FROM t3b) ON WEIGHT, w2",
    "unpivot": "UNPIVOT (SELECT cat, weight, weight * 2 AS w2 FROM t3b) ON weight, w2 INTO NAME k VALUE v",
    "unpivot_nulls": "UNPIVOT (SELECT id, val, CAST(amount AS DOUBLE) AS a FROM t1 WHERE id < 300) ON val, a "
    "INTO NAME k VALUE v",
    "unpivot_include_nulls": "SELECT * FROM (SELECT id, val, CAST(amount AS DOUBLE) AS a FROM t1 WHERE id < 300) "
    "UNPIVOT INCLUDE NULLS (v FOR k IN (val, a))",
    "unpivot_standard": "SELECT * FROM (SELECT id, val, CAST(amount AS DOUBLE) AS a FROM t1) "
    "UNPIVOT (v FOR k IN (val, a))",
}


def _tables(seed: int = 11) -> dict[str, pa.Table]:
    rng = random.Random(seed)
    n1, n2 = 3000, 2000
    t1 = pa.table(
        {
            "id": pa.array(range(1, n1 + 1), pa.int64()),
            "grp": [rng.choice(["g1", "g2", "g3", "g10", None]) for _ in range(n1)],
            "val": [None if rng.random() < 0.2 else round(rng.uniform(0, 50), 3) for _ in range(n1)],
            "amount": pa.array([rng.randint(0, 100000) for _ in range(n1)], pa.int64()),
            "d": [dt.date(2019, 6, 1) + dt.timedelta(days=rng.randint(0, 900)) for _ in range(n1)],
            "flag": [None if rng.random() < 0.1 else rng.random() < 0.5 for _ in range(n1)],
            "MixedCase": [rng.choice(["Up", "down", None]) for _ in range(n1)],
            "name": [rng.choice(["alpha", "beta", None]) for _ in range(n1)],
            "nothing": pa.array([None] * n1, pa.int32()),
        }
    )
    t2 = pa.table(
        {
            "id": pa.array(range(1, n2 + 1), pa.int64()),
            "t1_id": [rng.randint(1, n1) for _ in range(n2)],
            "score": pa.array(
                [None if rng.random() < 0.3 else rng.randint(0, 50) for _ in range(n2)], pa.int32()
            ),
            "cat": [rng.choice(["g1", "g2", "g9", "h", None]) for _ in range(n2)],
        }
    )
    t3b = pa.table({"cat": ["g1", "h", "y"], "weight": [1.5, 2.5, None]})
    return {"t1": t1, "t2": t2, "t3b": t3b, "t2_empty": t2.schema.empty_table()}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pivot")
    for name, table in _tables().items():
        pq.write_table(table, folder / f"{name}.parquet", row_group_size=400)
    return folder


@pytest.fixture(scope="module")
def reference(data):
    con = duckdb_reference(data)
    yield con
    con.close()


@pytest.fixture(scope="module", params=[1, 3, 4], ids=lambda w: f"w{w}")
def engine(request, data):
    """Squall's own stage plan at every W, W=1 included (``whole_query_at_w1`` off: by default DuckDB would
    run the whole PIVOT there and the cases would compare DuckDB with DuckDB)."""
    options = PlannerOptions(whole_query_at_w1=False)
    con = squall.connect(data=str(data), workers=request.param, planner_options=options)
    yield con
    con.close()


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_pivot_matches_duckdb(engine, reference, name):
    sql = QUERIES[name]
    expected = reference.sql(sql).to_arrow_table()
    result = engine.sql(sql).to_arrow()
    assert_same_result(result, expected, sql, reference=reference)


def test_pivot_whole_query_at_w1(data, reference):
    """The thin-shell path: at W=1 by default DuckDB runs the whole PIVOT over Squall's scans."""
    sql = QUERIES["dynamic_several_on"]
    with squall.connect(data=str(data), workers=1) as con:
        assert any(n.startswith(WHOLE_QUERY_AT_W1) for n in con.plan(sql).notes)
        assert_same_result(
            con.sql(sql).to_arrow(), reference.sql(sql).to_arrow_table(), sql, reference=reference
        )


def test_first_query_is_said(engine):
    """The first query is never quiet: its values count is in explain (which runs it too) and the stats."""
    sql = QUERIES["dynamic_several_on"]
    text = engine.explain(sql)
    assert "note: PIVOT values read by a first query: 4 values of grp" in text
    assert "note: PIVOT values read by a first query: 2 values of flag" in text
    stats = engine.sql(sql).stats
    assert stats["notes"][:2] == [
        "PIVOT values read by a first query: 4 values of grp",
        "PIVOT values read by a first query: 2 values of flag",
    ]
    assert stats["planning_breakdown"]["pivot_values_s"] >= 0
    assert not any("PIVOT values" in n for n in engine.sql(QUERIES["in_list"]).stats["notes"])


def test_too_many_pivot_columns_is_duckdbs_error(engine, reference):
    sql = "PIVOT t1 ON id, id % 97 USING count(*) GROUP BY grp"  # 3000 * 97 > pivot_limit = 100000
    with pytest.raises(duckdb.BinderException, match="Pivot column limit of 100000 exceeded") as ref:
        reference.sql(sql)
    with pytest.raises(squall.BindError) as err:
        engine.sql(sql)
    assert str(err.value) == str(ref.value).splitlines()[0]


def test_bad_on_column_is_an_error_on_the_users_text(engine):
    with pytest.raises(squall.BindError, match='column "nope" not found'):
        engine.sql("PIVOT t1 ON nope USING count(*) GROUP BY grp")


@pytest.mark.parametrize("workers", [1, 3])
def test_values_are_read_again_after_the_data_changes(tmp_path, workers):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"g": [1, 2, 1], "c": ["a", "b", None], "x": [1, 2, 3]}), path)
    sql = "SELECT * FROM (PIVOT t ON c USING sum(x) GROUP BY g) ORDER BY g"
    with squall.connect(data=str(tmp_path), workers=workers) as con:
        first = con.sql(sql)
        assert first.to_arrow().column_names == ["g", "a", "b"]
        assert con.sql(sql).stats["plan_cache"] == "hit"  # same values, same plan
        pq.write_table(pa.table({"g": [1, 2, 3, 3], "c": ["a", "z", "b", "q"], "x": [5, 6, 7, 8]}), path)
        again = con.sql(sql)
        assert again.to_arrow().column_names == ["g", "a", "b", "q", "z"]
        assert again.to_arrow().to_pylist() == [
            {"g": 1, "a": 5, "b": None, "q": None, "z": None},
            {"g": 2, "a": None, "b": None, "q": None, "z": 6},
            {"g": 3, "a": None, "b": 7, "q": 8, "z": None},
        ]
        assert "PIVOT values read by a first query: 4 values of c" in again.stats["notes"]


DISTRIBUTED = [
    "dynamic",
    "dynamic_several_on",
    "dynamic_no_group_by",
    "dynamic_in_from",
    "in_list",
    "in_list_with_null",
    "in_list_many_values",
    "standard_several",
    "unpivot",
    "unpivot_include_nulls",
    "unpivot_standard",
    "unpivot_columns",
    "unpivot_columns_exclude",
]


@pytest.fixture(scope="module")
def engine_w3(data):
    with squall.connect(data=str(data), workers=3) as con:
        yield con


@pytest.mark.parametrize("name", DISTRIBUTED)
def test_pivot_and_unpivot_are_distributed(engine_w3, name):
    """PIVOT as a grouped aggregate with FILTERs, UNPIVOT as an unnest: no part on one rank, several stages
    at W = 3 (at W = 1 Squall's plan needs no exchange, so one stage says nothing), and said."""
    plan = engine_w3.plan(QUERIES[name])
    notes = plan.notes
    assert not any(n.startswith(WHOLE_QUERY_AT_W1) for n in notes), notes
    assert len(plan.stages) > 1, plan.stages
    assert not any(n.startswith("one rank") for n in notes), notes
    rewrite = "UNPIVOT as an unnest of 2 columns" if "unpivot" in name else "PIVOT as a grouped aggregate"
    assert any(n.startswith(rewrite) for n in notes), notes


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("unpivot_expression", "one rank (PIVOT as a query"),  # an expression in the ON list: kept as it is
    ],
)
def test_forms_not_rewritten_run_on_one_rank_and_say_so(stage_plans, name, why):
    notes = stage_plans.plan(QUERIES[name]).notes
    assert any(n.startswith(why) for n in notes), notes


def test_dynamic_pivot_without_a_connection_is_refused(data):
    """``compile_sql`` alone has no platform to read the values with: one line, not a wrong plan."""
    from squall.driver.catalog.tables import Catalog
    from squall.driver.compile import compile_sql

    catalog = Catalog()
    catalog.register_folder(str(data))
    with pytest.raises(
        squall.NotSupportedError, match="PIVOT without an IN list of values outside a connection"
    ):
        compile_sql(catalog, QUERIES["dynamic"], 2)
    assert compile_sql(catalog, QUERIES["in_list"], 2).result_names[:3] == ("grp", "true_n", "true_s")
