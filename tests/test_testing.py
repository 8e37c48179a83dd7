"""Tests of squall.testing: the result comparison every correctness test relies on."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from squall.testing import assert_same_result, compare_results


def table(**columns: list) -> pa.Table:
    return pa.table(columns)


# --- shape ------------------------------------------------------------------------------------------------


def test_identical_tables_match() -> None:
    t = table(a=[1, 2, 3], b=["x", "y", "z"])
    assert compare_results(t, t, "select a, b from t") is None
    assert_same_result(t, t, "select a, b from t")


def test_column_count_differs() -> None:
    msg = compare_results(table(a=[1]), table(a=[1], b=[2]), "select * from t")
    assert msg is not None and "column count differs" in msg


def test_column_names_differ() -> None:
    msg = compare_results(table(a=[1]), table(b=[1]), "select a from t")
    assert msg is not None and "column names differ" in msg


def test_column_names_are_case_sensitive() -> None:
    assert compare_results(table(A=[1]), table(a=[1]), "select a from t") is not None


def test_missing_row_detected() -> None:
    msg = compare_results(table(a=[1, 2]), table(a=[1, 2, 3]), "select a from t")
    assert msg is not None
    assert "row count differs" in msg and "only in expected" in msg and "(3)" in msg


def test_extra_duplicate_row_detected() -> None:
    msg = compare_results(table(a=[1, 1, 2]), table(a=[1, 2, 2]), "select a from t")
    assert msg is not None and "only in actual, e.g. (1)" in msg and "only in expected, e.g. (2)" in msg


def test_assert_raises_with_description() -> None:
    with pytest.raises(AssertionError, match=r"Results differ for `select a from t`"):
        assert_same_result(table(a=[1]), table(a=[2]), "select a from t")


def test_empty_tables_match() -> None:
    empty = pa.table({"a": pa.array([], pa.int64())})
    assert compare_results(empty, empty, "select a from t order by a limit 3") is None


# --- values -----------------------------------------------------------------------------------------------


def test_wrong_value_detected() -> None:
    msg = compare_results(table(a=[1, 2], b=["x", "y"]), table(a=[1, 2], b=["x", "Y"]), "select a, b from t")
    assert msg is not None and "only in actual" in msg and "'y'" in msg and "'Y'" in msg


def test_floats_within_tolerance_match() -> None:
    a = table(k=["a", "b"], v=[1.0, 1e9])
    e = table(k=["a", "b"], v=[1.0 + 1e-10, 1e9 * (1 + 1e-10)])
    assert compare_results(a, e, "select k, v from t") is None


def test_floats_beyond_tolerance_differ() -> None:
    a = table(k=["a"], v=[1.0])
    e = table(k=["a"], v=[1.001])
    assert compare_results(a, e, "select k, v from t") is not None
    assert compare_results(a, e, "select k, v from t", rel_tol=1e-2) is None


def test_float_tolerance_scales_with_the_values() -> None:
    # a relative tolerance: 1e-3 apart is a wrong answer near 1, a few ulps near 1e12 are not
    assert compare_results(table(v=[1.0]), table(v=[1.001]), "select v from t") is not None
    assert compare_results(table(v=[1e12]), table(v=[1e12 + 0.0005]), "select v from t") is None
    assert compare_results(table(v=[1e12]), table(v=[1e12 + 1e4]), "select v from t") is not None
    # near zero only the tiny absolute floor remains
    assert compare_results(table(v=[0.0]), table(v=[1e-13]), "select v from t") is None
    assert compare_results(table(v=[0.0]), table(v=[1e-9]), "select v from t") is not None
    assert compare_results(table(v=[0.0]), table(v=[1e-9]), "select v from t", abs_tol=1e-6) is None


def test_decimal_sum_off_by_a_cent_fails() -> None:
    t = pa.decimal128(38, 2)
    e = pa.table({"s": pa.array([Decimal("56586554400.73")], t)})
    a = pa.table({"s": pa.array([Decimal("56586554400.74")], t)})
    assert compare_results(e, e, "select sum(x) as s from t") is None
    msg = compare_results(a, e, "select sum(x) as s from t")
    assert msg is not None and "56586554400.74" in msg
    # also off by 0.01 in a small value, and inside an ORDER BY tie group
    small_e = pa.table({"k": [1, 1], "s": pa.array([Decimal("0.10"), Decimal("0.20")], t)})
    small_a = pa.table({"k": [1, 1], "s": pa.array([Decimal("0.21"), Decimal("0.10")], t)})
    assert compare_results(small_a, small_e, "select k, s from t order by k") is not None


def test_decimal_vs_float_column_fails() -> None:
    a = pa.table({"v": pa.array([Decimal("123141078.2283")], pa.decimal128(38, 4))})
    e = pa.table({"v": pa.array([123141078.2283], pa.float64())})
    msg = compare_results(a, e, "select v from t")
    assert msg is not None and "column 'v' has type decimal128(38, 4) in actual, double in expected" in msg


def test_decimal_precision_and_scale_count() -> None:
    a = pa.table({"v": pa.array([Decimal("10.00")], pa.decimal128(18, 2))})
    e = pa.table({"v": pa.array([Decimal("10.00")], pa.decimal128(38, 2))})
    assert compare_results(a, e, "select v from t") is not None
    a4 = pa.table({"v": pa.array([Decimal("10.0000")], pa.decimal128(38, 4))})
    assert compare_results(a4, e, "select v from t") is not None


def test_integer_vs_double_column_fails() -> None:
    a = pa.table({"v": pa.array([3], pa.int32())})
    e = pa.table({"v": pa.array([3.0], pa.float64())})
    msg = compare_results(a, e, "select v from t")
    assert msg is not None and "has type int32 in actual, double in expected" in msg
    # integer widths count too
    assert compare_results(pa.table({"v": pa.array([3], pa.int32())}), table(v=[3]), "select v from t")


def test_string_encodings_are_one_type() -> None:
    for t in (pa.string_view(), pa.large_string()):
        a = pa.table({"s": pa.array(["x", None], t), "l": pa.array([["a"], None], pa.large_list(t))})
        e = pa.table(
            {"s": pa.array(["x", None], pa.string()), "l": pa.array([["a"], None], pa.list_(pa.string()))}
        )
        assert compare_results(a, e, "select s, l from t") is None
    ints = pa.table({"l": pa.array([[1]], pa.list_(pa.int32()))})
    assert compare_results(ints, pa.table({"l": pa.array([[1]], pa.list_(pa.int64()))}), "select l from t")


def test_struct_field_names_and_types_count() -> None:
    e = pa.table({"s": pa.array([{"a": 1, "b": "x"}])})
    assert compare_results(e, e, "select s from t") is None
    assert compare_results(pa.table({"s": pa.array([{"a": 1, "c": "x"}])}), e, "select s from t") is not None


def test_null_is_not_nan() -> None:
    nan = float("nan")
    assert compare_results(table(v=[None]), table(v=[nan]), "select v from t") is not None
    assert compare_results(table(v=[nan]), table(v=[None]), "select v from t") is not None
    assert compare_results(
        table(k=[1, 2], v=[nan, None]), table(k=[1, 2], v=[None, nan]), "select k, v from t"
    )
    assert (
        compare_results(table(k=[1, 2], v=[nan, None]), table(k=[2, 1], v=[None, nan]), "select k, v from t")
        is None
    )
    # as ORDER BY keys too (DuckDB sorts NaN above every number, NULLs last)
    sql = "select v from t order by v"
    assert compare_results(table(v=[1.0, nan, None]), table(v=[1.0, None, nan]), sql) is not None
    assert compare_results(table(v=[float("inf")]), table(v=[nan]), "select v from t") is not None


def test_floats_in_nested_values_use_the_tolerance() -> None:
    a = table(l=[[1.0, 2.0]])
    assert compare_results(a, table(l=[[1.0, 2.0 + 1e-12]]), "select l from t") is None
    assert compare_results(a, table(l=[[1.0, 2.001]]), "select l from t") is not None


def test_integers_are_exact() -> None:
    a = table(v=[10_000_000_000])
    e = table(v=[10_000_000_001])
    assert compare_results(a, e, "select v from t") is not None


def test_nan_equals_nan() -> None:
    t = table(v=[float("nan"), 1.0])
    assert compare_results(t, table(v=[1.0, float("nan")]), "select v from t") is None


def test_nulls() -> None:
    a = table(k=[1, 2, 3], v=[None, 1.5, None], s=[None, "x", "y"])
    assert compare_results(a, a, "select k, v, s from t") is None
    assert compare_results(table(v=[None]), table(v=[0.0]), "select v from t") is not None
    assert compare_results(table(s=[None]), table(s=[""]), "select s from t") is not None
    # NULLs among floats sort and match as multisets
    assert compare_results(table(v=[None, 2.0, None]), table(v=[2.0, None, None]), "select v from t") is None


def test_dates_and_timestamps_are_exact() -> None:
    d = table(d=[dt.date(1995, 3, 15)])
    assert compare_results(d, table(d=[dt.date(1995, 3, 15)]), "select d from t") is None
    assert compare_results(d, table(d=[dt.date(1995, 3, 16)]), "select d from t") is not None
    ts = table(t=[dt.datetime(1995, 3, 15, 0, 0, 0)])
    assert compare_results(ts, table(t=[dt.datetime(1995, 3, 15, 0, 0, 1)]), "select t from t") is not None
    # a date is not a timestamp, even at midnight
    assert compare_results(d, table(d=[dt.datetime(1995, 3, 15)]), "select d from t") is not None


def test_string_view_and_string_compare_equal() -> None:
    a = pa.table({"s": pa.array(["x", "y"], pa.string_view())})
    e = pa.table({"s": pa.array(["x", "y"], pa.string())})
    assert compare_results(a, e, "select s from t") is None


def test_float_multiset_with_several_approx_columns() -> None:
    # sorted matching pairs these wrongly (0.1 vs 0.1+eps order flips); the greedy fallback finds the match
    eps = 1e-12
    eps = 1e-13
    a = table(x=[0.1, 0.1 + eps], y=[2.0, 1.0])
    e = table(x=[0.1 + eps, 0.1], y=[2.0, 1.0])
    assert compare_results(a, e, "select x, y from t") is None


def test_nested_values() -> None:
    a = table(k=[1, 2], l=[[1, 2], [3]])
    assert compare_results(a, table(k=[2, 1], l=[[3], [1, 2]]), "select k, l from t") is None
    assert compare_results(a, table(k=[1, 2], l=[[1, 2], [4]]), "select k, l from t") is not None


# --- order ------------------------------------------------------------------------------------------------


def test_without_order_by_order_does_not_matter() -> None:
    a = table(a=[3, 1, 2], b=["c", "a", "b"])
    e = table(a=[1, 2, 3], b=["a", "b", "c"])
    assert compare_results(a, e, "select a, b from t") is None


def test_wrong_order_detected() -> None:
    a = table(a=[2, 1, 3])
    e = table(a=[1, 2, 3])
    msg = compare_results(a, e, "select a from t order by a")
    assert msg is not None and "ORDER BY keys (a) differ at row 0" in msg


def test_order_by_desc_and_multiple_keys() -> None:
    sql = "select k1, k2, v from t order by k1 desc, k2"
    e = table(k1=[2, 2, 1], k2=["a", "b", "a"], v=[1.0, 2.0, 3.0])
    assert compare_results(e, e, sql) is None
    a = table(k1=[2, 2, 1], k2=["b", "a", "a"], v=[2.0, 1.0, 3.0])
    assert compare_results(a, e, sql) is not None


def test_ties_compare_as_multisets() -> None:
    sql = "select k, v from t order by k"
    e = table(k=[1, 1, 1, 2], v=["a", "b", "c", "d"])
    a = table(k=[1, 1, 1, 2], v=["c", "a", "b", "d"])
    assert compare_results(a, e, sql) is None


def test_wrong_value_inside_tie_group_detected() -> None:
    sql = "select k, v from t order by k"
    e = table(k=[1, 1, 2], v=["a", "b", "d"])
    a = table(k=[1, 1, 2], v=["b", "x", "d"])
    msg = compare_results(a, e, sql)
    assert msg is not None and "rows 0..1 (one ORDER BY tie group) differ" in msg


def test_row_moved_across_tie_groups_detected() -> None:
    # same multiset of rows, same key sequence, but a non-key value sits in the wrong group
    sql = "select k, v from t order by k"
    e = table(k=[1, 2], v=["a", "b"])
    a = table(k=[1, 2], v=["b", "a"])
    assert compare_results(a, e, sql) is not None


def test_float_keys_within_tolerance_count_as_ties() -> None:
    sql = "select r, name from t order by r desc"
    e = table(r=[1.0 + 1e-13, 1.0, 0.5], name=["x", "y", "z"])
    a = table(r=[1.0, 1.0 + 1e-13, 0.5], name=["y", "x", "z"])
    assert compare_results(a, e, sql) is None


def test_order_by_ordinal() -> None:
    e = table(a=[1, 2], b=[20, 10])
    a = table(a=[2, 1], b=[10, 20])
    assert compare_results(a, e, "select a, b from t order by 2 desc") is not None
    assert compare_results(e, e, "select a, b from t order by 2 desc") is None
    # ordinal 1 orders by a; rows in the other order must fail
    assert compare_results(a, e, "select a, b from t order by 1") is not None


def test_order_by_alias() -> None:
    sql = "select k, sum(x) as revenue from t group by k order by revenue desc"
    e = table(k=["a", "b"], revenue=[5.0, 3.0])
    assert compare_results(e, e, sql) is None
    assert compare_results(table(k=["b", "a"], revenue=[3.0, 5.0]), e, sql) is not None


def test_order_by_expression_equal_to_select_item() -> None:
    sql = "select k, sum(x) from t group by k order by sum(x) desc"
    e = table(k=["a", "b"], **{"sum(x)": [5, 3]})
    assert compare_results(e, e, sql) is None
    assert compare_results(table(k=["b", "a"], **{"sum(x)": [3, 5]}), e, sql) is not None


def test_order_by_column_renamed_in_output() -> None:
    sql = "select t.l_returnflag as rf, v from lineitem t order by l_returnflag"
    e = table(rf=["A", "N"], v=[1, 2])
    assert compare_results(table(rf=["N", "A"], v=[2, 1]), e, sql) is not None


def test_alias_wins_over_input_column_name() -> None:
    # DuckDB binds ORDER BY names to select-list aliases first: here `a` is the second output column
    sql = "select a as b, b as a from t order by a"
    e = table(b=[9, 8], a=[1, 2])
    assert compare_results(e, e, sql) is None
    assert compare_results(table(b=[8, 9], a=[2, 1]), e, sql) is not None


def test_order_by_with_cte_and_union() -> None:
    e = table(x=[1, 2, 3])
    a = table(x=[3, 2, 1])
    assert compare_results(a, e, "with c as (select 1 as x) select x from c order by x") is not None
    assert compare_results(a, e, "select x from a union all select x from b order by x") is not None
    assert compare_results(a, e, "select x from a union all select x from b") is None


def test_order_by_inside_subquery_only_is_ignored() -> None:
    sql = "select x from (select x from t order by x) as s"
    assert compare_results(table(x=[3, 1, 2]), table(x=[1, 2, 3]), sql) is None


def test_order_by_all() -> None:
    sql = "select a, b from t order by all desc"
    e = table(a=[2, 1], b=["x", "y"])
    assert compare_results(e, e, sql) is None
    assert compare_results(table(a=[1, 2], b=["y", "x"]), e, sql) is not None


def test_limit_percent_counts_as_a_possible_cut() -> None:
    sql = "select k, v from t order by k limit 50%"
    e = table(k=[1, 2, 2], v=["a", "b", "c"])
    con = _duck_t("(1, 'a'), (2, 'b'), (2, 'c'), (2, 'd'), (2, 'e'), (3, 'f')")
    assert compare_results(table(k=[1, 2, 2], v=["a", "d", "e"]), e, sql, reference=con) is None
    assert compare_results(table(k=[1, 2, 2], v=["a", "d", "e"]), e, sql) is not None


def test_unmappable_order_by_falls_back_to_multiset() -> None:
    sql = "select a from t order by b"
    e = table(a=[1, 2, 3])
    assert compare_results(table(a=[3, 1, 2]), e, sql) is None
    msg = compare_results(table(a=[3, 1, 4]), e, sql)
    assert msg is not None and "order not checked: ORDER BY b is not an output column" in msg


def test_unparsable_sql_falls_back_to_multiset() -> None:
    e = table(a=[1, 2])
    assert compare_results(table(a=[2, 1]), e, "this is not sql ((") is None
    msg = compare_results(table(a=[2, 3]), e, "this is not sql ((")
    assert msg is not None and "the SQL does not parse" in msg


# --- limit ------------------------------------------------------------------------------------------------


def _duck_t(rows: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"create table t as select * from (values {rows}) v(k, v)")
    return con


def test_limit_cut_tie_group_checked_against_duckdbs_candidates() -> None:
    # ORDER BY k LIMIT 3 over k=1,2,2,2,2: the last group (k=2) was cut; any two of its rows are right
    con = _duck_t("(1, 'a'), (2, 'b'), (2, 'c'), (2, 'd'), (2, 'e')")
    sql = "select k, v from t order by k limit 3"
    e = table(k=[1, 2, 2], v=["a", "b", "c"])
    assert compare_results(table(k=[1, 2, 2], v=["a", "d", "e"]), e, sql, reference=con) is None
    assert compare_results(table(k=[1, 2, 2], v=["a", "e", "b"]), e, sql, reference=con.sql) is None
    # but not rows DuckDB could not have returned, nor one candidate twice
    msg = compare_results(table(k=[1, 2, 2], v=["a", "b", "x"]), e, sql, reference=con)
    assert msg is not None and "not among DuckDB's tied rows" in msg and "'x'" in msg
    assert compare_results(table(k=[1, 2, 2], v=["a", "d", "d"]), e, sql, reference=con) is not None
    # the keys of the cut group are still checked, and the groups before it in full
    assert compare_results(table(k=[1, 2, 3], v=["a", "b", "c"]), e, sql, reference=con) is not None
    assert compare_results(table(k=[1, 2, 2], v=["z", "b", "c"]), e, sql, reference=con) is not None
    # without a reference the ties are not proven: a differing cut group fails
    msg = compare_results(table(k=[1, 2, 2], v=["a", "d", "e"]), e, sql)
    assert msg is not None and "no reference given" in msg
    assert compare_results(table(k=[1, 2, 2], v=["a", "c", "b"]), e, sql) is None


def test_wrong_last_row_after_limit_fails() -> None:
    # the last row's keys are unique in DuckDB's answer: its other columns must be DuckDB's
    con = _duck_t("(1, 'a'), (2, 'b'), (3, 'c'), (3, 'd')")
    sql = "select k, v from t order by k limit 2"
    e = table(k=[1, 2], v=["a", "b"])
    msg = compare_results(table(k=[1, 2], v=["a", "x"]), e, sql, reference=con)
    assert msg is not None and "DuckDB has no other row with these ORDER BY keys" in msg
    assert compare_results(table(k=[1, 2], v=["a", "x"]), e, sql) is not None
    assert compare_results(e, e, sql, reference=con) is None


def test_limit_not_reached_means_no_cut() -> None:
    sql = "select k, v from t order by k limit 10"
    e = table(k=[1, 2, 2], v=["a", "b", "c"])
    a = table(k=[1, 2, 2], v=["a", "c", "d"])
    assert compare_results(a, e, sql) is not None
    assert compare_results(table(k=[1, 2, 2], v=["a", "c", "b"]), e, sql) is None


def test_fetch_first_counts_as_limit() -> None:
    con = _duck_t("(1, 'a'), (2, 'b'), (2, 'x')")
    sql = "select k, v from t order by k fetch first 2 rows only"
    e = table(k=[1, 2], v=["a", "b"])
    assert compare_results(table(k=[1, 2], v=["a", "x"]), e, sql, reference=con) is None
    assert compare_results(table(k=[1, 2], v=["a", "y"]), e, sql, reference=con) is not None


def test_offset_first_tie_group_checked_against_candidates() -> None:
    con = _duck_t("(1, 'x'), (1, 'a'), (2, 'b')")
    sql = "select k, v from t order by k limit 10 offset 1"
    e = table(k=[1, 2], v=["a", "b"])
    assert compare_results(table(k=[1, 2], v=["x", "b"]), e, sql, reference=con) is None
    assert compare_results(table(k=[1, 2], v=["y", "b"]), e, sql, reference=con) is not None
    assert compare_results(table(k=[1, 2], v=["a", "x"]), e, sql, reference=con) is not None
    # an OFFSET without a LIMIT cuts only the first group
    sql = "select k, v from t order by k offset 1"
    assert compare_results(table(k=[1, 2], v=["x", "b"]), e, sql, reference=con) is None
    assert compare_results(table(k=[1, 2], v=["y", "b"]), e, sql, reference=con) is not None


def test_limit_without_order_by() -> None:
    e = table(a=[1, 2])
    # full: any two rows are right (without a reference, any at all; with one, rows of the unlimited answer)
    assert compare_results(table(a=[7, 8]), e, "select a from t limit 2") is None
    con = duckdb.connect()
    con.execute("create table t as select unnest([1, 2, 7]) as a")
    assert compare_results(table(a=[7, 2]), e, "select a from t limit 2", reference=con) is None
    assert compare_results(table(a=[7, 8]), e, "select a from t limit 2", reference=con) is not None
    # not full: the whole (unordered) result must match
    assert compare_results(table(a=[7, 8]), e, "select a from t limit 5") is not None
    assert compare_results(table(a=[2, 1]), e, "select a from t limit 5") is None
    # the row count is still checked
    assert compare_results(table(a=[7]), e, "select a from t limit 2") is not None


def test_limit_cut_with_float_ties_tpch_q3_shape() -> None:
    sql = (
        "select l_orderkey, sum(x) as revenue, o_orderdate from t group by l_orderkey, o_orderdate "
        "order by revenue desc, o_orderdate limit 2"
    )
    d = dt.date(1995, 3, 1)
    e = table(l_orderkey=[10, 11], revenue=[5.0, 4.0], o_orderdate=[d, d])
    con = duckdb.connect()
    con.execute(
        "create table t as select * from (values (10, 5.0::double, DATE '1995-03-01'), "
        "(11, 4.0, DATE '1995-03-01'), (12, 4.0, DATE '1995-03-01')) v(l_orderkey, x, o_orderdate)"
    )
    assert (
        compare_results(
            table(l_orderkey=[10, 12], revenue=[5.0, 4.0], o_orderdate=[d, d]), e, sql, reference=con
        )
        is None
    )
    assert (
        compare_results(table(l_orderkey=[12, 11], revenue=[5.0, 4.0], o_orderdate=[d, d]), e, sql)
        is not None
    )


# --- with DuckDB -------------------------------------------------------------------------------------------


def test_against_duckdb_outputs() -> None:
    con = duckdb.connect()
    con.execute("create table t as select range % 7 as k, range::double / 3 as v from range(100)")
    sql = "select k, sum(v) as s, count(*) from t group by k order by k"
    expected = con.sql(sql).to_arrow_table()
    actual = con.sql(
        "select k, sum(v) + 1e-12 as s, count(*) from t group by k order by k desc"
    ).to_arrow_table()
    assert actual.column_names == ["k", "s", "count_star()"]
    assert compare_results(actual, expected, sql) is not None  # reversed order
    assert compare_results(actual.sort_by("k"), expected, sql) is None
