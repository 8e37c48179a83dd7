"""Fixtures the platform modules share (the SF0.1 data, its DuckDB reference, the parametrized backend),
and the deselection: each backend runs its own TPC-H queries — (backend, query) pairs outside
``Backend.queries`` are deselected."""

from __future__ import annotations

import pytest

from ..tpch_data import duckdb_over, tpch_dataset
from .backends import BACKENDS, SF, Backend


@pytest.fixture(scope="session")
def sf01(tmp_path_factory):
    return tpch_dataset(SF, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="session")
def reference(sf01):
    con = duckdb_over(sf01)
    yield con
    con.close()


@pytest.fixture(scope="module", params=BACKENDS, ids=[b.name for b in BACKENDS])
def site(request, tmp_path_factory):
    """The backend, stood up for the module (one at a time: the next param tears the previous down)."""
    b: Backend = request.param
    reason = b.skip()
    if reason:
        pytest.skip(reason)
    with b.open(b, tmp_path_factory.mktemp(b.name)) as s:
        yield s


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        backend, n = params.get("site"), params.get("n")
        if isinstance(backend, Backend) and n is not None and n not in backend.queries:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
