"""``sql_of`` remembers the text it generated per expression object, and never gives it for a changed tree."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from squall.driver.ir.nodes import sql_of


def _expr(text: str) -> exp.Expression:
    return sqlglot.parse_one(text, dialect="duckdb")


def test_same_object_same_text():
    e = _expr("a + 1 > b * 2")
    assert sql_of(e) == e.sql("duckdb") == sql_of(e)


def test_a_changed_descendant_gives_the_new_text():
    e = _expr("x = 'A' AND y < 3")
    assert sql_of(e) == "x = 'A' AND y < 3"
    e.find(exp.Literal).replace(exp.Literal.string("a"))  # only the case differs
    assert sql_of(e) == "x = 'a' AND y < 3"
    e.find(exp.LT).set("expression", exp.Literal.number(4))
    hash(e)  # the hash computed again, for the new tree
    assert sql_of(e) == "x = 'a' AND y < 4"


def test_a_changed_identifier_case_gives_the_new_text():
    e = _expr('"Col" IS NULL')
    assert sql_of(e) == '"Col" IS NULL'
    e.find(exp.Identifier).set("this", "col")
    hash(e)
    assert sql_of(e) == '"col" IS NULL'


def test_a_subtree_moved_under_another_parent_keeps_its_text():
    inner = _expr("c BETWEEN 1 AND 5")
    text = sql_of(inner)
    outer = exp.and_(inner, _expr("d"), copy=False)
    assert sql_of(inner) == text and sql_of(outer) == "c BETWEEN 1 AND 5 AND d"
