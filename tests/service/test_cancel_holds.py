"""Cancel and timeouts that hold, on a real ``squall serve`` (the session's ``server`` fixture, SF0.01, W=2).

- DELETE of a query whose workers are deep in a long stage (a join hashing 70 M concatenated strings): the workers'
  DuckDB is interrupted (the abort watch), the query ends ``cancelled`` and the same worker processes run the next
  query — they were not killed after the platform's drain time, which is what happened when a stage ran on;
- a query cancelled while queued never starts (no ``started_at``, still cancelled after the one before it ends);
- a table-free query the driver answers in its own DuckDB (``count(*)`` of ``range(10**12)``, 100 s when left
  alone) ends on DELETE and on ``timeout_s``.

No durations are asserted: each test waits for an event, with a ceiling far below what the query would take.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from squall.connection import Connection

from .test_http_api import call, submit, wait

requests = pytest.importorskip("requests")

LONG_JOIN = (
    "SELECT sum(hash(a.l_comment || b.o_comment)) AS h FROM lineitem a "
    "JOIN orders b ON a.l_linenumber = b.o_shippriority + 1"
)
ENDLESS = "SELECT count(*) AS n FROM range(1000000000000)"
#: the driver's own DuckDB is interrupted per query by the Connection of the pool branch (Connection.cancel(id))
per_query_cancel = pytest.mark.skipif(
    "query_id" not in inspect.signature(Connection.cancel).parameters,
    reason="needs Connection's per-query cancel, which interrupts the driver's DuckDB (the pool's branch)",
)


def _workers_of(server) -> set[int]:
    """The worker processes of ``server`` (their command line names its listener folder)."""
    mark = f"/squall-{server.proc.pid}-".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def test_delete_interrupts_a_running_stage_and_keeps_the_workers(server):
    assert (
        wait(server, submit(server, "SELECT count(*) FROM orders")["query_id"])[-1]["status"] == "succeeded"
    )
    before = _workers_of(server)
    assert before
    query_id = submit(server, LONG_JOIN)["query_id"]
    wait(server, query_id, until=("running", "succeeded", "failed", "cancelled"))
    response = call(server, "DELETE", f"/v1/queries/{query_id}")
    assert response.status_code == 202, response.text
    final = wait(server, query_id, timeout=60)[-1]
    assert final["status"] == "cancelled", final
    after_id = submit(server, "SELECT count(*) AS n FROM nation")["query_id"]
    assert wait(server, after_id)[-1]["status"] == "succeeded"
    assert _workers_of(server) == before  # interrupted, not killed and replaced


def test_a_query_cancelled_while_queued_never_starts(slow_server):
    # more slow queries than may run at once (a FIFO runs one, a scheduler a few): the last one waits
    ahead = [
        submit(slow_server, f"SELECT count(*) FROM orders WHERE o_orderkey > {i}")["query_id"]
        for i in range(8)
    ]
    last = submit(slow_server, "SELECT count(*) FROM customer")["query_id"]
    response = call(slow_server, "DELETE", f"/v1/queries/{last}")
    assert response.status_code == 202, response.text
    was_queued = response.json()["status"] == "cancelled"
    for query_id in ahead:  # free every slot: a query still queued would start now
        call(slow_server, "DELETE", f"/v1/queries/{query_id}")
    for query_id in ahead:
        wait(slow_server, query_id, timeout=120)
    if not was_queued:
        pytest.skip("the last query was not queued")
    doc = wait(slow_server, last)[-1]
    assert doc["status"] == "cancelled" and doc.get("started_at") is None, doc


@per_query_cancel
def test_delete_stops_a_query_the_driver_answers_itself(server):
    query_id = submit(server, ENDLESS)["query_id"]
    wait(server, query_id, until=("running",))
    assert call(server, "DELETE", f"/v1/queries/{query_id}").status_code == 202
    assert wait(server, query_id, timeout=30)[-1]["status"] == "cancelled"


@per_query_cancel
def test_timeout_stops_a_query_the_driver_answers_itself(server):
    query_id = submit(server, ENDLESS, timeout_s=1)["query_id"]
    doc = wait(server, query_id, timeout=30)[-1]
    assert doc["status"] == "failed" and "timed out" in doc["error"]["detail"], doc
