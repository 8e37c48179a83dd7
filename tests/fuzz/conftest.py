"""Fixtures of the fuzz tests: the fuzz data folders and warm oracles (DuckDB + Squall at W = 1..4).

TPC-H's oracle lives for the session; TPC-DS's (10 more worker processes) for one test module.
"""

from __future__ import annotations

import pytest

from tests.tpcds_data import tpcds_dataset

from .dataset import fuzz_dataset
from .oracle import Oracle
from .schema import TPCDS


@pytest.fixture(scope="session")
def fuzz_data(sf001):
    return fuzz_dataset(sf001)


@pytest.fixture(scope="session")
def fuzz_oracle(fuzz_data):
    oracle = Oracle(fuzz_data, (1, 2, 3, 4))
    yield oracle
    oracle.close()


@pytest.fixture(scope="session")
def fuzz_tpcds_data(tmp_path_factory):
    """TPC-DS SF0.01 as ``squall.tpcds`` generates it (cached under ``$SQUALL_TPCH_CACHE``, like test_tpcds.py)."""
    return tpcds_dataset(0.01, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def fuzz_tpcds_oracle(fuzz_tpcds_data):
    oracle = Oracle(fuzz_tpcds_data, (1, 2, 3, 4), TPCDS)
    yield oracle
    oracle.close()
