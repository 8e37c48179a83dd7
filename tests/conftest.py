"""Shared fixtures: TPC-H datasets (generated once per session) and warm connections per worker count."""

from __future__ import annotations

import dataclasses

import pytest

import squall
import squall.connection
from squall.driver.options import PlannerOptions
from squall.plan import Plan

from .tpch_data import duckdb_over, tpch_dataset


@pytest.fixture(scope="session")
def sf1(tmp_path_factory):
    """TPC-H SF1, one file per table."""
    return tpch_dataset(1, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="session")
def sf001(tmp_path_factory):
    """TPC-H SF0.01, one file per table."""
    return tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="session")
def sf001_parts(tmp_path_factory):
    """TPC-H SF0.01 with tables split into 3 files each (``<table>/*.parquet``)."""
    return tpch_dataset(0.01, parts=3, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="session")
def reference_sf1(sf1):
    con = duckdb_over(sf1)
    yield con
    con.close()


@pytest.fixture(scope="session")
def reference_sf001(sf001):
    con = duckdb_over(sf001)
    yield con
    con.close()


class Connections:
    """One warm connection per (dataset, workers, whole query), closed at session end.

    At W=1 the connections plan Squall's own stages (``whole_query_at_w1=False``): by default DuckDB would
    plan the whole query there, and a test would compare DuckDB with DuckDB. ``whole_query=True`` asks for
    that default (the thin-shell path), which each suite checks once."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, int, bool], squall.Connection] = {}

    def get(self, data, workers: int, *, whole_query: bool = False) -> squall.Connection:
        whole_query = whole_query and workers == 1
        key = (str(data), workers, whole_query)
        if key not in self._open:
            options = None if whole_query or workers != 1 else PlannerOptions(whole_query_at_w1=False)
            self._open[key] = squall.connect(data=str(data), workers=workers, planner_options=options)
        return self._open[key]

    def close(self) -> None:
        for con in self._open.values():
            con.close()


@pytest.fixture(scope="session")
def connections():
    pool = Connections()
    yield pool
    pool.close()


@pytest.fixture(scope="session", autouse=True)
def metadata_mirrors_in_the_session_tmp(tmp_path_factory):
    """S3 objects' metadata mirrors (driver/skipping/metadata_mirror.py) go to the session's temp folder, not the
    machine's shared default."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SQUALL_MIRROR_DIR", str(tmp_path_factory.mktemp("mirrors")))
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def every_plan_round_trips_json():
    """Every plan any test compiles must survive JSON (plans travel in Lambda events)."""
    original = squall.connection.compile_sql

    def checked(*args, **kwargs):
        plan = original(*args, **kwargs)
        again = Plan.from_json(plan.to_json())
        assert again == plan, "plan changed through JSON"
        assert again.to_json() == plan.to_json()
        return plan

    patch = pytest.MonkeyPatch()
    patch.setattr(squall.connection, "compile_sql", checked)
    yield
    patch.undo()


@pytest.fixture
def stage_plans(engine):
    """The module's ``engine`` connection planning Squall's own stages at every W — at W=1 too, where by
    default DuckDB plans the whole query (``PlannerOptions.whole_query_at_w1``): for tests of plan shapes."""
    saved = engine.planner_options
    engine.planner_options = dataclasses.replace(saved or PlannerOptions(), whole_query_at_w1=False)
    yield engine
    engine.planner_options = saved
