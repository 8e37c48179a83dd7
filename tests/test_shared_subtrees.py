"""A subtree a stage holds twice, equal up to column names, is rendered once as a CTE both copies read.

The planner computes a ``WITH`` query read twice once when the reads' copies end in one stage each (planner/
reuse.py); when both copies stay inside one stage (TPC-DS Q39's final GROUP BY over the one gathered partial
result, read by inv1 and inv2), DuckDB would compute the repeated subquery twice, and a CTE it reads twice it
computes once.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir import sqlgen
from squall.driver.ir.sqlgen import SHARED_CTE, InputRef, render


def _total(inp: L.Node, key: str, value: str, suffix: str) -> L.Node:
    """GROUP BY ``key`` SUM(``value``) over ``inp``, under names ending in ``suffix``."""
    call = L.AggCall("sum", (L.col(value),), expression=exp.func("sum", L.col(value)))
    return L.Aggregate(inp, (("k" + suffix, L.col(key)),), (("s" + suffix, call),))


def _two_reads() -> L.Node:
    x = InputRef("x", ("a", "b"))
    first = _total(x, "a", "b", "")  # the first read, on the input's own names
    renamed = L.Project(x, (("a2", L.col("a")), ("b2", L.col("b"))))  # how a reused stage is read again
    second = _total(renamed, "a2", "b2", "_2")
    small = L.Filter(second, exp.LT(this=L.col("s_2"), expression=exp.Literal.number(50)))
    return L.Join(first, small, "inner", (L.col("k"),), (L.col("k_2"),))


@pytest.fixture
def con():
    db = duckdb.connect()
    db.register("x", pa.table({"a": [1, 1, 2, 3, 3, 3], "b": [10, 20, 30, 40, 50, 60]}))
    yield db
    db.close()


def test_the_repeated_aggregate_is_one_cte_and_the_answer_is_the_same(con, monkeypatch):
    node = _two_reads()
    shared = render(node)
    assert shared.startswith(SHARED_CTE) and shared.count("GROUP BY") == 1, shared
    monkeypatch.setattr(sqlgen, "_repeated", lambda root: [])
    nested = render(node)
    assert nested.count("GROUP BY") == 2
    assert (
        sorted(con.sql(shared).fetchall())
        == sorted(con.sql(nested).fetchall())
        == [(1, 30, 1, 30), (2, 30, 2, 30)]
    )


def test_different_subtrees_over_one_input_stay_apart():
    x = InputRef("x", ("a", "b"))
    renamed = L.Project(x, (("a2", L.col("a")), ("b2", L.col("b"))))
    node = L.Join(
        _total(x, "a", "b", ""), _total(renamed, "b2", "a2", "_2"), "inner", (L.col("k"),), (L.col("k_2"),)
    )
    assert not render(node).startswith("WITH")


def test_an_input_read_once_costs_no_search(monkeypatch):
    def fail(*_args, **_kwargs):
        raise AssertionError("shapes computed for a tree that reads every input once")

    monkeypatch.setattr(sqlgen, "shape_of", fail)
    x, y = InputRef("x", ("a", "b")), InputRef("y", ("c", "d"))
    render(
        L.Join(_total(x, "a", "b", ""), _total(y, "c", "d", "_2"), "inner", (L.col("k"),), (L.col("k_2"),))
    )
