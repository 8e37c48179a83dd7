"""Long literal IN lists: held as one syntax-tree node from parsing on, answered as DuckDB answers them.

A 100,000-element list took 7-12 s to plan and left ~1 M cyclic objects whose collection stalled
``squall serve`` for 0.5-0.9 s (issue 34); :mod:`squall.driver.frontend.value_lists` holds such a list as one
node, keeps its values for pruning, and the SQL the workers run has the list as written.
"""

from __future__ import annotations

import gc

import pytest
from sqlglot import exp

from squall.driver.catalog.literals import column_constraint
from squall.driver.frontend import value_lists
from squall.driver.frontend.parse import parse
from squall.errors import SqlSyntaxError
from squall.testing import assert_same_result

N = 3000
KEYS = ", ".join(str(1 + 7 * i) for i in range(N))
QUERIES = {
    "ints": f"SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE o_orderkey IN ({KEYS})",
    "not_in": f"SELECT o_orderstatus, count(*) AS n FROM orders WHERE o_orderkey NOT IN ({KEYS}) "
    "GROUP BY o_orderstatus",
    "negatives_and_decimals": "SELECT count(*) AS n FROM lineitem WHERE l_extendedprice IN ("
    + ", ".join(f"{-x}.5" if x % 2 else f"{x * 1000 + 0.01:.2f}" for x in range(N))
    + ") OR l_quantity IN ("
    + ", ".join(str(-x) if x % 3 else str(x % 50) for x in range(N))
    + ")",
    "strings_with_quotes": "SELECT c_mktsegment, count(*) AS n FROM customer WHERE c_name IN ("
    + ", ".join(f"'Customer#{i:09d}'" for i in range(1, N, 2))
    + ", 'it''s', 'AUTO''MOBILE') GROUP BY ALL",
    "in_a_join_and_a_subquery": f"SELECT n_name, count(*) AS n FROM orders JOIN customer ON o_custkey = c_custkey "
    f"JOIN nation ON c_nationkey = n_nationkey WHERE o_orderkey IN ({KEYS}) AND c_custkey IN "
    f"(SELECT c_custkey FROM customer WHERE c_custkey IN ({KEYS})) GROUP BY n_name",
    "in_select_list": f"SELECT o_orderkey IN ({KEYS}) AS hit, count(*) AS n FROM orders GROUP BY hit",
    "in_select_list_named_by_duckdb": f"SELECT o_orderkey IN ({KEYS}), count(*) AS n FROM orders GROUP BY ALL",
    "with_null": f"SELECT count(*) AS n FROM orders WHERE o_orderkey NOT IN ({KEYS}, NULL)",
}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_answers_match_duckdb(name, workers, sf001, reference_sf001, connections):
    sql = QUERIES[name]
    con = connections.get(sf001, workers)
    assert_same_result(con.sql(sql).to_arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)


def test_a_long_list_is_one_node_that_prints_as_written():
    tree = parse(QUERIES["strings_with_quotes"])
    (held,) = tree.find(exp.In).expressions
    assert isinstance(held, exp.Var)
    assert held.this.endswith("'Customer#000002999', 'it''s', 'AUTO''MOBILE'")
    assert tree.sql("duckdb").count("'") == parse(QUERIES["strings_with_quotes"]).sql("duckdb").count("'")
    assert sum(1 for _ in tree.walk()) < 20


def test_the_values_stay_readable_for_pruning_and_estimates():
    tree = parse(QUERIES["ints"])
    column, op, values = column_constraint(tree.find(exp.In))
    assert (column, op, len(values), values[:3], values[-1]) == (
        "o_orderkey",
        "in",
        N,
        [1, 8, 15],
        1 + 7 * (N - 1),
    )
    copied = tree.copy().find(exp.In)
    assert column_constraint(copied)[2] == values


def test_short_mixed_and_pivot_lists_stay_as_written():
    short = ", ".join(str(i) for i in range(value_lists.MIN_VALUES - 1))
    assert (
        len(parse(f"SELECT * FROM t WHERE x IN ({short})").find(exp.In).expressions)
        == value_lists.MIN_VALUES - 1
    )
    mixed = f"SELECT * FROM t WHERE x IN ({KEYS}, y)"
    assert len(parse(mixed).find(exp.In).expressions) == N + 1
    cast = f"SELECT * FROM t WHERE x IN ({KEYS}, DATE '2024-01-01')"
    assert len(parse(cast).find(exp.In).expressions) == N + 1
    pivot = f"PIVOT t ON k IN ({KEYS}) USING sum(v)"
    assert len(parse(pivot).find(exp.In).expressions) == N


def test_planning_a_long_list_leaves_no_cyclic_garbage(sf001, connections):
    """What stalled the server: the garbage of planning had to wait for a full collection."""
    con = connections.get(sf001, 2)
    keys = ", ".join(str(1 + 3 * i) for i in range(50_000))
    sql = f"SELECT count(*) FROM orders WHERE o_orderkey IN ({keys}) AND o_custkey > 7"
    con.explain(sql.replace("> 7", "> 6"))  # the catalog and the caches warm
    gc.collect()
    gc.disable()
    try:
        con.explain(sql)
        collected = gc.collect()
    finally:
        gc.enable()
    # written-out, each of the ~10 copies of the list was 50,000 nodes of cyclic garbage (500,000+ objects)
    assert collected < 20_000, collected


def test_the_parser_never_reads_a_long_list():
    """Compiled sqlglot tokenizes in one call that holds the interpreter (~250 ms for 100,000 values)."""
    text, held = value_lists.hold(QUERIES["negatives_and_decimals"])
    assert len(text) < 300 and len(held.runs) == 2
    tree = parse(QUERIES["negatives_and_decimals"])
    assert [len(column_constraint(i)[2]) for i in tree.find_all(exp.In)] == [N, N]


LOOKALIKES = {
    "string": f"SELECT 'x IN ({KEYS})' AS s, count(*) AS n FROM nation",
    "string_across": f"SELECT 'x IN (1, ' AS s, {KEYS.replace(', 8,', ' AS a, 8 AS b,', 1)} AS c",
    "comment": f"SELECT count(*) AS n FROM nation -- IN ({KEYS})\nWHERE n_nationkey IN (1, 2)",
    "block_comment": f"SELECT count(*) AS n /* IN ({KEYS}) */ FROM nation",
    "quoted_name": f'SELECT 1 AS "IN ({KEYS[:4000]})" FROM nation LIMIT 1',
}


@pytest.mark.parametrize("name", sorted(LOOKALIKES))
def test_list_lookalikes_in_strings_comments_and_names_stay_as_written(
    name, sf001, reference_sf001, connections
):
    sql = LOOKALIKES[name]
    result = connections.get(sf001, 2).sql(sql).to_arrow()
    assert_same_result(result, reference_sf001.sql(sql).to_arrow_table(), sql)
    if name == "string":
        assert result.column("s")[0].as_py() == f"x IN ({KEYS})"


def test_a_syntax_error_after_a_long_list_points_into_the_text_as_written(sf001, connections):
    sql = f"SELECT count(*) FROM orders\nWHERE o_orderkey IN ({KEYS})\n  AND o_custkey >> FROM"
    with pytest.raises(SqlSyntaxError, match="line 3, column 20"):
        connections.get(sf001, 2).sql(sql)


def test_a_list_the_text_step_misses_is_held_from_the_tree():
    """A comment inside the list: the regular expression leaves it, :func:`value_lists.compact` holds it."""
    sql = (
        f"SELECT * FROM t WHERE x IN (/* ids */ {KEYS}) AND y IN ({KEYS.replace(', 8,', ', 8 /* x */,', 1)})"
    )
    assert not value_lists.hold(sql)[1]
    ins = list(parse(sql).find_all(exp.In))
    assert [len(column_constraint(i)[2]) for i in ins] == [N, N]
    assert all(len(i.expressions) == 1 and isinstance(i.expressions[0], exp.Var) for i in ins)
