"""Planner rules, one fixture file each: SQL → expected ``squall explain``, planned from a catalog snapshot.

``tests/fixtures/planner/<rule>.sql`` holds the cases of one rule module of
``squall.driver.planner`` (format: that folder's README); ``catalog.json`` is
TPC-H SF1's metadata, so no data is generated or read. After an intended plan
change, regenerate with ``SQUALL_UPDATE_GOLDEN=1 pytest tests/test_planner_rules.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from squall import tpch
from squall.driver.catalog.snapshot import SnapshotCatalog, from_snapshot
from squall.driver.compile import compile_sql
from squall.driver.forecast.predict import plan_need
from squall.driver.options import PlannerOptions
from squall.driver.planner import RULES
from squall.driver.report.explain import explain_plan
from squall.operators.duck import Sandbox
from tests.fixture_cases import parse_cases, write_expect
from tests.test_explain_golden import GOLDEN_WORKER_MEMORY

FIXTURES = Path(__file__).parent / "fixtures" / "planner"
GOLDEN = Path(__file__).parent / "golden" / "explain"


def _files() -> list[Path]:
    return sorted(FIXTURES.glob("*.sql"))


def _params():
    for path in _files():
        for case in parse_cases(path.read_text()):
            yield pytest.param(path, case.name, id=f"{path.stem}-{case.name}")


@pytest.fixture(scope="module")
def catalog() -> SnapshotCatalog:
    return from_snapshot(json.loads((FIXTURES / "catalog.json").read_text()))


@pytest.fixture(scope="module")
def db():
    sandbox = Sandbox(threads=1)
    yield sandbox
    sandbox.close()


@pytest.fixture(autouse=True)
def no_parquet(monkeypatch):
    """Planning from a snapshot must never open a Parquet file."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"planning opened a Parquet file: {args[:1]}")

    for name in ("read_metadata", "read_table", "ParquetFile", "read_schema"):
        monkeypatch.setattr(pq, name, refuse)


def explain(
    catalog: SnapshotCatalog, db: Sandbox, sql: str, workers: int, options: PlannerOptions | None = None
) -> str:
    return explain_plan(compile_sql(catalog, sql, workers, options, db))


def test_every_rule_has_a_fixture_file():
    rules = {rule.__name__.rsplit(".", 1)[-1] for rule in RULES}
    assert rules == {p.stem for p in _files()}


def test_snapshot_points_nowhere(catalog):
    for name in catalog.names():
        info = catalog.table(name)
        assert not any(os.path.exists(f) for f in info.files), info.files
    with pytest.raises(Exception, match="no storage"):
        catalog.storage(catalog.table("lineitem").location)


@pytest.mark.parametrize("path,name", list(_params()))
def test_rule_case(catalog, db, path: Path, name: str):
    text = path.read_text()
    case = next(c for c in parse_cases(text) if c.name == name)
    got = explain(catalog, db, case.sql, case.workers, case.options)
    if os.environ.get("SQUALL_UPDATE_GOLDEN") and got != case.expect:
        write_expect(path, text, case, got)
        return
    assert got == case.expect, f"plan of {path.stem}:{name} changed: review, then SQUALL_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_goldens_from_snapshot(catalog, db, n):
    """The snapshot holds all the planner reads: it plans the 22 TPC-H goldens (SF1, W=4) exactly, and
    explain's expected peak per worker from it as from the files."""
    plan = compile_sql(catalog, tpch.query(n), 4, None, db)
    memory = plan_need(plan).line(GOLDEN_WORKER_MEMORY)
    text = f"{explain_plan(plan).rstrip()}\n\nmemory per worker: {memory}\n"
    assert text == (GOLDEN / f"q{n:02d}.txt").read_text()
