"""The one platform suite every platform backend passes (local, local + S3 on moto, lambda-local,
fabric on tcp and shm): TPC-H against DuckDB, a failing and a cancelled query, a crashed rank, and
nothing left behind after either.

TPC-H at SF0.1 on the same files as the DuckDB reference. Every backend runs ``SUBSET`` (joins,
aggregates, subqueries, top-k); backends with ``queries=ALL`` run all 22 (one test per query, no
query twice). Each result's stats also go through the backend's own ``check_stats`` (S3 request
bounds, Lambda tree and cost, fabric writes). The fault tests open fresh connections with
``SQUALL_FAULTS`` in the workers' environment (see ``squall.operators.faults``).
"""

from __future__ import annotations

import threading

import pytest

import squall
from squall import tpch
from squall.testing import assert_same_result

from .backends import BACKENDS, SF, Site

FAILING = "SELECT CAST(c_name AS INTEGER) AS x, count(*) FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey GROUP BY 1"
JOIN = "SELECT o_orderpriority, count(*) AS n FROM orders JOIN customer ON o_custkey = c_custkey GROUP BY 1 ORDER BY 1"
NATION = "SELECT count(*) AS n FROM nation"


@pytest.fixture(scope="module")
def con(site: Site, sf01):
    """The backend's warm connection with the suite's worker count."""
    c = site.connect(sf01)
    yield c
    c.close()
    assert site.leftovers() == [], "left behind after the connection closed"


def _expected(reference, sql: str):
    return reference.sql(sql).to_arrow_table()


# --- TPC-H against DuckDB ---------------------------------------------------------------------------


# (backend, query) pairs outside the backend's ``queries`` are deselected by conftest.py
@pytest.mark.parametrize("n", sorted({n for b in BACKENDS for n in b.queries}), ids=lambda n: f"q{n:02d}")
def test_tpch_against_duckdb(site, con, reference, n):
    sql = tpch.query(n, sf=SF)
    result = con.sql(sql)
    assert_same_result(result.to_arrow(), _expected(reference, sql), sql)
    site.backend.check_stats(result.stats)
    _check_memory(result.stats)
    assert site.leftovers() == [], "left behind after a successful query"


def _check_memory(stats: dict) -> None:
    """Every platform sets each rank a memory budget and the rank reports its peak (issue 38)."""
    ranks = stats["per_worker"]
    assert ranks and all(r["memory_budget_bytes"] and r["peak_memory_bytes"] > 0 for r in ranks), [
        (r["memory_budget_bytes"], r["peak_memory_bytes"]) for r in ranks
    ]
    assert stats["memory"]["peak_bytes"] == max(r["peak_memory_bytes"] for r in ranks)


# --- abort: a failing query, a cancelled one ----------------------------------------------------------


def test_failing_query_fails_fast_and_cleans_up(site, con):
    with pytest.raises(squall.QueryRuntimeError) as info:
        con.sql(FAILING)
    # fast is the event, not a duration: the query failed with the rank's own error (not a timeout or a
    # retry's), in one line
    assert "\n" not in str(info.value) and "Could not convert string" in str(info.value)
    assert not isinstance(info.value, squall.QueryTimeout)
    assert site.leftovers() == [], "left behind after a failed query"
    assert con.sql(NATION).fetchall() == [(25,)]


def test_cancel_stops_the_query(site, sf01, monkeypatch):
    """Rank 0 sleeps before stage 1; cancelling (as the service does: until the query returns) ends the
    query early with a one-line error, and the connection still works."""
    # the event, not a duration: the query ends with a cancel error (without the cancel it would succeed after
    # the delay)
    monkeypatch.setenv("SQUALL_FAULTS", "delay:rank=0:seconds=6:stage=1")
    con = site.connect(sf01, site.backend.fault_workers)
    returned = threading.Event()

    def cancel_until_returned() -> None:
        while not returned.wait(0.25):
            con.platform.cancel()

    canceller = threading.Thread(target=cancel_until_returned, daemon=True)
    try:
        canceller.start()
        try:
            with pytest.raises(squall.SquallError) as info:
                con.sql(JOIN)
        finally:
            returned.set()
            canceller.join()
        # Lambda: QueryCancelled; local and fabric: the rank that stopped at the abort ("query aborted …")
        message = str(info.value)
        assert ("cancel" in message or "abort" in message) and "\n" not in message, repr(info.value)
        assert site.leftovers() == [], "left behind after a cancelled query"
        assert con.sql(NATION).fetchall() == [(25,)]  # the connection still works
    finally:
        con.close()


# --- a crashed rank -----------------------------------------------------------------------------------


def test_crashed_rank(site, sf01, reference, monkeypatch):
    """Rank 1 exits abruptly at stage 1: a clear error naming it (Lambda re-runs it: the right answer)."""
    monkeypatch.setenv("SQUALL_FAULTS", "crash:rank=1:stage=1")
    con = site.connect(sf01, site.backend.fault_workers)
    try:
        if site.backend.recovers_crashes:
            result = con.sql(JOIN)
            assert_same_result(result.to_arrow(), _expected(reference, JOIN), JOIN)
            # the crashed rank comes back: re-invoked when its heartbeat stops, or a straggler duplicate
            # of it wins first (whichever the timing gives; both run the same deterministic work)
            lam = result.stats["lambda"]
            assert lam["retries"] + lam["duplicates"] >= 1, lam
            assert any(r["rank"] == 1 for r in lam["relaunched"]), lam
        else:
            with pytest.raises(
                squall.WorkerError, match="rank 1 failed: worker process exited with code 17"
            ) as info:
                con.sql(JOIN)
            assert "\n" not in str(info.value)
        assert site.leftovers() == [], "left behind after a crashed rank"
        monkeypatch.delenv("SQUALL_FAULTS")
        # the dead worker is replaced (now without the fault) before the next query
        assert con.sql(NATION).fetchall() == [(25,)]
    finally:
        con.close()
    assert site.leftovers() == []
