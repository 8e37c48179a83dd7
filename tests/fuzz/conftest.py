"""Fixtures of the fuzz tests: the fuzz data folder and one warm oracle (DuckDB + Squall at W = 1..4)."""

from __future__ import annotations

import pytest

from .dataset import fuzz_dataset
from .oracle import Oracle


@pytest.fixture(scope="session")
def fuzz_data(sf001):
    return fuzz_dataset(sf001)


@pytest.fixture(scope="session")
def fuzz_oracle(fuzz_data):
    oracle = Oracle(fuzz_data, (1, 2, 3, 4))
    yield oracle
    oracle.close()
