"""The planner's binds remembered up to column names (squall.driver.planner.bound_types)."""

from __future__ import annotations

import duckdb
import pytest

from squall.driver.planner import bound_types as bt
from squall.operators.duck import Sandbox, ident


@pytest.fixture
def counted():
    """A sandbox's ``relation`` that counts DuckDB binds, and an empty memo."""
    bt._known.clear()
    db = Sandbox(threads=1)
    calls: list[str] = []

    def relation(sql: str) -> duckdb.DuckDBPyRelation:
        calls.append(sql)
        return db.relation(sql)

    yield db, relation, calls
    db.close()
    bt._known.clear()


def _text(db: Sandbox, a: str, b: str, out: str) -> str:
    sql = f"SELECT {ident(a)} + 1 AS {ident(out)}, sum({ident(b)}) OVER () AS {ident(out + '_total')} FROM {ident('t_' + a)}"
    typed = db.typed_inputs({f"t_{a}": ((a, "INTEGER"), (b, "DECIMAL(12,2)"))}, sql)
    assert typed is not None
    return typed


def test_a_text_renamed_is_bound_once_and_answers_in_its_own_names(counted):
    db, relation, calls = counted
    first = bt.bound_types(relation, _text(db, "x", "y", "o"))
    assert first == (("o", "INTEGER"), ("o_total", "DECIMAL(38,2)"))
    second = bt.bound_types(relation, _text(db, "x_2", "y_2", 'p "q"'))
    assert second == (('p "q"', "INTEGER"), ('p "q"_total', "DECIMAL(38,2)"))
    assert len(calls) == 1
    other_types = db.typed_inputs(
        {"t_x": (("x", "BIGINT"), ("y", "DECIMAL(12,2)"))}, 'SELECT "x" + 1 AS "o" FROM "t_x"'
    )
    assert bt.bound_types(relation, other_types) == (("o", "BIGINT"),)  # another type: another empty table
    assert len(calls) == 2


def test_answers_that_name_the_text_or_read_one_name_in_two_cases_are_not_kept(counted):
    db, relation, calls = counted
    struct = db.typed_inputs({"t": (("a", "INTEGER"),)}, 'SELECT {"f": "a"} AS "s" FROM "t"')
    assert bt.bound_types(relation, struct) == (("s", "STRUCT(f INTEGER)"),)
    assert bt.bound_types(relation, struct.replace('"f"', '"g"')) == (("s", "STRUCT(g INTEGER)"),)
    assert len(calls) == 2  # the field's name is in the type: never answered from another text
    made_up = db.typed_inputs({"t": (("a", "INTEGER"),)}, 'SELECT "a" + 1 FROM "t"')
    bt.bound_types(relation, made_up)
    bt.bound_types(relation, made_up)
    assert len(calls) == 4  # DuckDB's own name for the column ("a" + 1) spells the text's identifier
    twins = 'SELECT "A" AS "o" FROM (SELECT 1 AS "a") AS t'
    bt.bound_types(relation, twins)
    bt.bound_types(relation, twins)
    assert len(calls) == 6


def test_errors_pass_through_and_are_not_kept(counted):
    db, relation, calls = counted
    bad = db.typed_inputs({"t": (("a", "INTEGER"),)}, 'SELECT "nope" AS "o" FROM "t"')
    for _ in range(2):
        with pytest.raises(duckdb.Error):
            bt.bound_types(relation, bad)
    assert len(calls) == 2
