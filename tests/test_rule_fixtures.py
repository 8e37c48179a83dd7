"""SQL and logical rules, one fixture file each: the query as the rule leaves it, planned from a catalog snapshot.

``tests/fixtures/sql/<rule>.sql`` holds SQL → the query after the SQL rules up to and including that rule
(pretty-printed DuckDB SQL); ``tests/fixtures/logical/<rule>.sql`` SQL → the logical plan after the logical
rules up to and including that one (``squall.driver.ir.nodes.describe``). Each case runs every enabled rule
before its own, as the pipeline does, so a fixture shows the rule on the input it really gets. Same format
and catalog as the planner's fixtures (``tests/fixtures/planner/README.md``); regenerate after an intended
change with ``SQUALL_UPDATE_GOLDEN=1 pytest tests/test_rule_fixtures.py`` and review the diff.
"""

from __future__ import annotations

import doctest
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from squall.driver import logical, sql
from squall.driver.catalog.snapshot import SnapshotCatalog, from_snapshot
from squall.driver.compile import compile_sql, translate_sql
from squall.driver.frontend.bind import Binder
from squall.driver.ir.nodes import describe
from squall.driver.logical import pushdown
from squall.driver.logical.rules import RULES as LOGICAL_RULES
from squall.driver.logical.rules import LogicalContext, shared_filters
from squall.driver.options import PlannerOptions, rule_name
from squall.driver.planner import RULES as PLANNER_RULES
from squall.driver.sql import RULES as SQL_RULES
from squall.driver.sql import SqlContext
from squall.errors import OptionError
from squall.operators.duck import Sandbox
from tests.fixture_cases import parse_cases, write_expect

FIXTURES = Path(__file__).parent / "fixtures"
STAGES: dict[str, tuple[ModuleType, ...]] = {"sql": SQL_RULES, "logical": LOGICAL_RULES}


@pytest.fixture(scope="module")
def catalog() -> SnapshotCatalog:
    return from_snapshot(json.loads((FIXTURES / "planner" / "catalog.json").read_text()))


@pytest.fixture(scope="module")
def db():
    sandbox = Sandbox(threads=1)
    yield sandbox
    sandbox.close()


def _upto(rules: tuple[ModuleType, ...], name: str) -> tuple[ModuleType, ...]:
    names = [rule_name(r) for r in rules]
    return rules[: names.index(name) + 1]


def after_sql_rule(catalog, db, text: str, name: str) -> str:
    ast = Binder(catalog, db).bind(text).ast.copy()
    context = SqlContext(catalog)
    for rule in _upto(SQL_RULES, name):
        ast = rule.apply(ast, context)
    return ast.sql(dialect="duckdb", pretty=True)


def after_logical_rule(catalog, db, text: str, name: str, options: PlannerOptions) -> str:
    planned, names = translate_sql(catalog, text, db)
    context = LogicalContext(catalog, options, names.fresh)
    node = planned.node
    for rule in _upto(LOGICAL_RULES, name):
        node = rule.apply(node, context)
    return "\n".join([describe(node), *context.notes])


def _params():
    for stage in STAGES:
        for path in sorted((FIXTURES / stage).glob("*.sql")):
            for case in parse_cases(path.read_text()):
                yield pytest.param(stage, path, case.name, id=f"{stage}-{path.stem}-{case.name}")


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_rule_has_a_fixture_file(stage):
    assert {rule_name(r) for r in STAGES[stage]} == {p.stem for p in (FIXTURES / stage).glob("*.sql")}


@pytest.mark.parametrize("stage,path,name", list(_params()))
def test_rule_case(catalog, db, stage: str, path: Path, name: str):
    text = path.read_text()
    case = next(c for c in parse_cases(text) if c.name == name)
    if stage == "sql":
        got = after_sql_rule(catalog, db, case.sql, path.stem)
    else:
        got = after_logical_rule(catalog, db, case.sql, path.stem, case.options)
    if os.environ.get("SQUALL_UPDATE_GOLDEN") and got != case.expect:
        write_expect(path, text, case, got)
        return
    assert got == case.expect, f"{stage} rule {path.stem}:{name} changed: review, then SQUALL_UPDATE_GOLDEN=1"


def test_rule_names_are_unique_across_stages():
    names = [rule_name(r) for rules in (SQL_RULES, LOGICAL_RULES, PLANNER_RULES) for r in rules]
    assert len(names) == len(set(names))


def test_every_rule_documents_itself():
    for rule in (*SQL_RULES, *LOGICAL_RULES, *PLANNER_RULES):
        assert rule.__doc__ and len(rule.__doc__.strip()) > 40, rule.__name__


@pytest.mark.parametrize("rule", SQL_RULES, ids=rule_name)
def test_sql_rule_examples_run(rule):
    """Each SQL rule's docstring example is a doctest, and it holds."""
    result = doctest.testmod(rule)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("module", [shared_filters, pushdown], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_logical_examples_run(module):
    """The filter placement and shared-filter examples are doctests, and they hold."""
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_planning_breakdown_names_each_rule(catalog, db):
    breakdown: dict[str, float] = {}
    compile_sql(
        catalog,
        "SELECT n_name, count(*) FROM nation JOIN region ON n_regionkey = r_regionkey "
        "GROUP BY n_name ORDER BY 2 DESC LIMIT 3",
        4,
        PlannerOptions(),
        db,
        breakdown,
    )
    for rule in SQL_RULES:
        assert f"sql.{rule_name(rule)}_s" in breakdown
    for rule in LOGICAL_RULES:
        assert f"logical.{rule_name(rule)}_s" in breakdown
    for name in ("scans", "joins", "aggregates", "topk"):
        assert breakdown[f"planner.{name}_s"] >= 0.0
    assert all(v >= 0.0 for v in breakdown.values())


def test_a_disabled_rule_does_not_run(catalog, db):
    q21ish = (
        "SELECT count(*) FROM lineitem l1 WHERE EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = "
        "l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey) AND NOT EXISTS (SELECT * FROM lineitem l3 WHERE "
        "l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey AND l3.l_receiptdate > l3.l_commitdate)"
    )
    on, off = (
        PlannerOptions(join_in_place=False),
        PlannerOptions(join_in_place=False, disabled_rules=("coalesce",)),
    )
    breakdown: dict[str, float] = {}
    with_rule = compile_sql(catalog, q21ish, 4, on, db)
    without = compile_sql(catalog, q21ish, 4, off, db, breakdown)
    assert any("subqueries coalesced" in n for n in with_rule.notes)
    assert not any("coalesced" in n for n in without.notes)
    assert "logical.coalesce_s" not in breakdown and "logical.prune_s" in breakdown


def test_disabling_a_planner_rule_falls_to_the_next(catalog, db):
    breakdown: dict[str, float] = {}
    compile_sql(
        catalog,
        "SELECT count(*) FROM lineitem JOIN orders ON l_orderkey = o_orderkey",
        4,
        PlannerOptions(disabled_rules=("join_filters",)),
        db,
        breakdown,
    )
    assert "planner.join_filters_s" not in breakdown and "planner.joins_s" in breakdown


@pytest.mark.parametrize(
    "names,message",
    [
        (("no_such_rule",), "no rule named 'no_such_rule'"),
        (("qualify",), "'qualify' is required"),
        (("scans",), "'scans' is required"),
        (("prune",), "'prune' is required"),
    ],
)
def test_unknown_or_required_rules_are_refused(catalog, db, names, message):
    with pytest.raises(OptionError, match=message):
        compile_sql(catalog, "SELECT 1", 2, PlannerOptions(disabled_rules=names), db)


def test_setting_names_rules():
    assert PlannerOptions.setting("disabled_rules=coalesce+join_filters") == (
        "disabled_rules",
        ("coalesce", "join_filters"),
    )


def test_stage_packages_export_their_rules():
    assert sql.RULES is SQL_RULES and logical.rules.RULES is LOGICAL_RULES
