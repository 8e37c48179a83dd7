"""The planner's type check binds stage SQL behind typed, empty CTEs (driver/planner/core.py): it must give
exactly the names and DuckDB types the registered-Arrow path gives, for every type a table can hold, and fall
back to that path (with its error) where the CTE text cannot be made or bound."""

from __future__ import annotations

import pyarrow as pa
import pytest

from squall.driver.ir.sqlgen import InputRef
from squall.driver.planner import RULES
from squall.driver.planner.core import Context
from squall.errors import NotSupportedError
from squall.operators.duck import Sandbox
from squall.plan import ExchangeInput, ScanInput

SCHEMA = pa.schema(
    [
        ("i8", pa.int8()),
        ("u64", pa.uint64()),
        ("f", pa.float32()),
        ("d", pa.decimal128(15, 2)),
        ("wide", pa.decimal128(38, 10)),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("b", pa.binary()),
        ("flag", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("ms", tz="UTC")),
        ("ns", pa.timestamp("ns")),
        ("t", pa.time64("us")),
        ("iv", pa.month_day_nano_interval()),
        ("tags", pa.list_(pa.string())),
        ("fixed", pa.list_(pa.int32(), 3)),
        ("point", pa.struct([("x y", pa.float64()), ('q"uote', pa.int64())])),
        ("m", pa.map_(pa.string(), pa.int32())),
        ("cat", pa.dictionary(pa.int32(), pa.string())),
        ("nothing", pa.null()),
        ('odd "name"', pa.int32()),
    ]
)

QUERIES = [
    'SELECT * FROM "s1_t" AS t',
    'SELECT i8 + 1 AS a, sum(d) AS s, avg(f) AS f, max(tz) AS m, max(len(tags)) AS n FROM "s1_t" GROUP BY 1',
    'SELECT "point"."x y" AS x, m[\'k\'] AS v, cat || \'!\' AS c, coalesce(nothing, 1) AS z FROM "s1_t"',
    'WITH w AS (SELECT u64, wide FROM "s1_t") SELECT u64 * 2 AS u, wide / 3 AS q FROM w',
    'SELECT a.i8, b."odd ""name""" FROM "s1_t" AS a JOIN "x1" AS b ON a.i8 = b.k',
    'SELECT ts - INTERVAL 1 DAY AS earlier, day + 1 AS next, t AS clock, iv AS span FROM "s1_t"',
    'SELECT i8 FROM "s1_t" UNION ALL SELECT k FROM "x1"',
]


@pytest.fixture()
def ctx():
    db = Sandbox(threads=1)
    context = Context(None, 2, None, db, RULES)  # type: ignore[arg-type]  # no catalog: typecheck reads none
    context.inputs["s1_t"] = ScanInput(name="s1_t", table="t", location="", columns=(), splits=())
    context.scan_schemas["s1_t"] = SCHEMA
    context.inputs["x1"] = ExchangeInput("x1", 1)
    context.stage_types[1] = (("k", "TINYINT"), ('odd "name"', "INTEGER"))
    yield context
    db.close()


def _refs(sql: str) -> list[InputRef]:
    return [InputRef(name, ()) for name in ("s1_t", "x1") if f'"{name}"' in sql]


@pytest.mark.parametrize("sql", QUERIES)
def test_typed_ctes_give_the_registered_types(ctx, sql):
    refs = _refs(sql)
    assert ctx.typecheck(sql, refs) == ctx._typecheck_registered(sql, refs)


def test_every_arrow_type_reads_back_the_same(ctx):
    sql = 'SELECT * FROM "s1_t"'
    types = ctx.typecheck(sql, _refs(sql))
    assert [name for name, _t in types] == SCHEMA.names
    assert tuple(t for _n, t in types) == ctx._db.arrow_types(SCHEMA)


def test_a_name_the_sql_defines_itself_falls_back(ctx):
    sql = 'WITH "s1_t" AS (SELECT 1 AS one) SELECT * FROM "s1_t"'  # the CTE would be defined twice
    assert ctx.typecheck(sql, _refs(sql)) == (("one", "INTEGER"),)


def test_sql_duckdb_rejects_is_refused_with_its_error(ctx):
    with pytest.raises(NotSupportedError, match=r"planner produced SQL DuckDB rejects.*no_such_column"):
        ctx.typecheck('SELECT no_such_column FROM "s1_t"', _refs('"s1_t"'))


@pytest.mark.parametrize("sql", QUERIES)
def test_the_typed_ctes_answer_without_registering(ctx, sql, monkeypatch):
    expected = ctx._typecheck_registered(sql, _refs(sql))
    monkeypatch.setattr(ctx, "_typecheck_registered", lambda *a: pytest.fail("fell back to registering"))
    assert ctx.typecheck(sql, _refs(sql)) == expected
