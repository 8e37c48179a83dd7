"""A cancel stops a query wherever it is, on the SDK's Connection (real worker processes, TPC-H SF0.01):

- while it is being **planned** (pure Python: the planning thread is interrupted) — here a planner rule that
  spins until something stops it, so the test waits for an event, never for a duration;
- while the driver's own DuckDB answers a table-free query (``count(*)`` of ``range(10**12)``: 100 s when left
  alone), also when the cancel comes before DuckDB started the statement (the interrupt is repeated);
- and ``Connection.cancel(query_id)`` does not wait for another query's planning.
"""

from __future__ import annotations

import threading

import pytest

import squall
from squall.driver.planner.rules import aggregates

ENDLESS = "SELECT count(*) AS n FROM range(1000000000000)"


@pytest.fixture(scope="module")
def con(sf001):
    connection = squall.connect(data=str(sf001), workers=2)
    yield connection
    connection.close()


def _spinning_rule(monkeypatch):
    """Make the aggregate rule spin (in Python) until told to stop; returns (entered, finished, release)."""
    entered, finished, release = threading.Event(), threading.Event(), threading.Event()
    original = aggregates.plan

    def spin(ctx, node):
        entered.set()
        while not release.is_set():
            pass  # a planner step that would never end
        finished.set()
        return original(ctx, node)

    monkeypatch.setattr(aggregates, "plan", spin)
    return entered, finished, release


def test_cancel_interrupts_planning(con, monkeypatch):
    entered, finished, release = _spinning_rule(monkeypatch)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            con.sql("SELECT o_orderstatus, count(*) FROM orders GROUP BY 1", query_id="q-planning")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert entered.wait(60)
        con.cancel("q-planning")
        thread.join(60)
    finally:
        release.set()
        thread.join()
    assert isinstance(outcome[0], squall.QueryCancelled), outcome
    assert not finished.is_set()  # stopped inside the step, not after it
    monkeypatch.undo()
    assert con.sql("SELECT o_orderstatus, count(*) AS n FROM orders GROUP BY 1").to_arrow().num_rows == 3


def test_timeout_interrupts_planning(con, monkeypatch):
    entered, finished, release = _spinning_rule(monkeypatch)
    try:
        with pytest.raises(squall.QueryTimeout):
            con.sql("SELECT o_orderpriority, count(*) FROM orders GROUP BY 1", timeout=0.5)
    finally:
        release.set()
    assert entered.is_set() and not finished.is_set()


def test_a_cancel_does_not_wait_for_another_querys_planning(con, monkeypatch):
    entered, _finished, release = _spinning_rule(monkeypatch)
    planned: list[BaseException] = []
    sql = "SELECT o_orderstatus, count(*) FROM orders GROUP BY 1"
    planning = threading.Thread(
        target=_catch, args=(planned, con.sql, sql), kwargs={"query_id": "q-long-plan"}
    )
    planning.start()
    try:
        assert entered.wait(60)
        outcome: list[BaseException] = []
        driver = threading.Thread(
            target=_catch, args=(outcome, con.sql, ENDLESS), kwargs={"query_id": "q-driver"}
        )
        driver.start()
        while "q-driver" not in con._queries:  # registered: cancel() can find it
            driver.join(0.01)
        con.cancel("q-driver")
        driver.join(60)
        assert not driver.is_alive() and isinstance(outcome[0], squall.QueryCancelled), outcome
    finally:
        con.cancel("q-long-plan")
        release.set()
        planning.join()
    assert isinstance(planned[0], squall.QueryCancelled), planned


def test_the_drivers_duckdb_is_interrupted_even_right_at_its_start(con):
    for _ in range(10):  # timeouts landing before, while and after DuckDB starts the statement
        outcome: list[BaseException] = []
        thread = threading.Thread(target=_catch, args=(outcome, con.sql, ENDLESS), kwargs={"timeout": 0.01})
        thread.start()
        thread.join(60)
        assert not thread.is_alive() and isinstance(outcome[0], squall.QueryTimeout), outcome


def _catch(outcome: list, call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except BaseException as exc:
        outcome.append(exc)
