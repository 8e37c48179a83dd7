"""The planner's type check binds stage SQL behind typed, empty CTEs (driver/planner/core.py): it must give
exactly the names and DuckDB types the registered-Arrow path gives, for every type a table can hold, and fall
back to that path (with its error) where the CTE text cannot be made or bound."""

from __future__ import annotations

import pyarrow as pa
import pytest

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import parse
from squall.driver.ir.sqlgen import InputRef, q, render
from squall.driver.planner import RULES
from squall.driver.planner.column_types import types_off_the_plan
from squall.driver.planner.core import Context
from squall.driver.planner.exprs import leaves
from squall.errors import NotSupportedError
from squall.operators import duck
from squall.operators.duck import Sandbox, typed_inputs
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


def _scan_ref() -> InputRef:
    return InputRef("s1_t", tuple(SCHEMA.names))


def _aggregate_shapes() -> list[L.Node]:
    """A partial/final aggregate per column: COUNT, MIN and MAX of it, and SUM where DuckDB sums its type."""
    shapes: list[L.Node] = []
    for i, name in enumerate(SCHEMA.names):
        column = SCHEMA.field(name).type
        aggs = [
            (f"c{i}", L.AggCall("count", (L.col(name),), False, parse(f"COUNT({q(name)})"))),
            (f"lo{i}", L.AggCall("min", (L.col(name),), False, parse(f"MIN({q(name)})"))),
            (f"hi{i}", L.AggCall("max", (L.col(name),), False, parse(f"MAX({q(name)})"))),
        ]
        summable = pa.types.is_integer(column) or pa.types.is_floating(column) or pa.types.is_decimal(column)
        if summable or pa.types.is_boolean(column):
            aggs.append((f"s{i}", L.AggCall("sum", (), False, parse(f"SUM({q(name)})"))))
        shapes.append(L.Aggregate(_scan_ref(), ((f"k{i}", L.col("i8")),), tuple(aggs)))
    return shapes


def _plan_shapes() -> list[L.Node]:
    scan, other = _scan_ref(), InputRef("x1", ("k", 'odd "name"'))
    renamed = L.Project(scan, tuple((f"r{i}", L.col(n)) for i, n in enumerate(SCHEMA.names)))
    keys = L.Project(other, (("k", L.col("k")),))  # no name in common with the scan
    shapes: list[L.Node] = [
        L.Filter(scan, parse('"i8" > 1')),
        renamed,
        L.Limit(L.Filter(renamed, parse('"r0" > 1')), 10),
        *(
            L.Join(scan, keys, kind, (L.col("i8"),), (L.col("k"),))
            for kind in ("inner", "left", "right", "full", "semi", "anti")
        ),
        L.Join(scan, keys, "cross"),
        L.SetOp(
            "union",
            True,
            (other, L.Project(other, (("k2", L.col("k")), ("n2", L.col('odd "name"'))))),
            ("u1", "u2"),
        ),
    ]
    return shapes + _aggregate_shapes() + _final_outputs()


def _final_outputs() -> list[L.Node]:
    """The planner's outputs over final aggregates (a COUNT's, an AVG's in both forms) per numeric column."""
    shapes: list[L.Node] = []
    for name in ("i8", "u64", "f", "d", "wide"):
        c = q(name)
        exprs = (
            ("n", parse(f"CAST(COALESCE({c}, 0) AS BIGINT)")),
            ("avg", parse(f"CAST({c} AS DOUBLE) / CAST({q('i8')} AS DOUBLE)")),
            (
                "avg_dec",
                parse(f"CAST(CAST({c} * 100 AS HUGEINT) AS DOUBLE) / (CAST({q('u64')} AS DOUBLE) * 100.0)"),
            ),
            ("same", L.col(name)),
        )
        shapes.append(L.Project(_scan_ref(), exprs))
    return shapes


def test_types_read_off_the_plan_are_duckdbs(ctx):
    """Where the planner reads a stage's types off its plan instead of binding it (planner/column_types.py),
    they are exactly DuckDB's, for every Arrow type a table can hold."""
    for node in _plan_shapes():
        derived = types_off_the_plan(node, ctx.input_types)
        assert derived is not None, f"{type(node).__name__} should be read off the plan"
        bound = ctx.typecheck(render(node), leaves(node))
        assert derived == bound, render(node)


def test_computed_columns_are_left_to_duckdb(ctx):
    scan = _scan_ref()
    computed = [
        L.Project(scan, (("a", parse('"i8" + 1')),)),
        L.Aggregate(scan, (), (("s", L.AggCall("sum", (), False, parse('SUM("i8" * 2)'))),)),
        L.Aggregate(scan, (), (("m", L.AggCall("min", (), False, parse('MIN("i8", 2)'))),)),
        L.Aggregate(scan, (), (("a", L.AggCall("avg", (L.col("i8"),), False, parse('AVG("i8")'))),)),
        L.Join(
            scan, InputRef("x1", ("k", 'odd "name"')), "inner", (L.col("i8"),), (L.col("k"),)
        ),  # a name twice
        L.Project(scan, (("a", parse('CAST("s" AS DOUBLE)')),)),  # not a number
        L.Project(scan, (("a", parse('CAST("i8" AS INTEGER)')),)),  # another type
        L.Project(scan, (("a", parse('"i8" / "f"')),)),  # not DOUBLEs
        L.Project(scan, (("a", parse('CAST("i8" AS DOUBLE) / "i8"')),)),
        L.SetOp(
            "union",
            True,
            (
                InputRef("x1", ("k", 'odd "name"')),
                L.Project(scan, (("a", L.col("d")), ("b", L.col("i8")))),
            ),
            ("u1", "u2"),
        ),
    ]
    for node in computed:
        assert types_off_the_plan(node, ctx.input_types) is None, render(node)


def test_inputs_read_from_kept_empty_tables_bind_as_typed_nulls(ctx):
    """The planner binds over empty tables kept in its DuckDB instance (Sandbox.typed_inputs): every type a
    table can hold reads back exactly as the CTE of typed NULLs gives it, made once per list of column types and
    read under any column names."""
    columns = tuple(zip(SCHEMA.names, ctx._db.arrow_types(SCHEMA)))
    sql = 'SELECT * FROM "s1_t"'
    kept = ctx._db.typed_inputs({"s1_t": columns}, sql)
    assert "__squall_empty_" not in kept  # the NULL-typed column: a table would hold it as INTEGER
    assert ctx._db.relation(kept).types == ctx._db.relation(typed_inputs({"s1_t": columns}, sql)).types
    for column in columns:
        kept = ctx._db.typed_inputs({"s1_t": (column,)}, sql)
        plain = typed_inputs({"s1_t": (column,)}, sql)
        if column[1] != '"NULL"':
            assert "__squall_empty_" in kept, column
        assert [str(t) for t in ctx._db.relation(kept).types] == [column[1]], column
        assert ctx._db.relation(kept).types == ctx._db.relation(plain).types, column
    before = set(duck._EMPTY_TABLES[id(ctx._db._root)])
    ctx._db.typed_inputs({"other_name": (columns[0],)}, sql)  # the same columns under another name
    renamed = (("Other col", columns[0][1]),)  # the same type under another column name
    kept = ctx._db.typed_inputs({"s1_t": renamed}, sql)
    assert duck._EMPTY_TABLES[id(ctx._db._root)] == before
    rel = ctx._db.relation(kept)
    assert rel.columns == ["Other col"] and [str(t) for t in rel.types] == [columns[0][1]]
    twins = (("a", "INTEGER"), ("A", "VARCHAR"))  # one CTE column list cannot name both: typed NULLs
    kept = ctx._db.typed_inputs({"s1_t": twins}, sql)
    assert "__squall_empty_" not in kept
    assert [str(t) for t in ctx._db.relation(kept).types] == ["INTEGER", "VARCHAR"]
