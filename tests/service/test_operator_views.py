"""The operator's views: ``GET /v1/queries?status=running|queued`` on a real ``squall serve`` (rank 0 sleeps 5 s
per stage, so a query stays running), and the ``queue`` field the scheduler writes on a queued query's status
(position, ahead, estimated wait, group), shown by the status and the history."""

from __future__ import annotations

import threading
import time

import pytest

from squall.service import records

from .test_http_api import call, error_of, submit, wait

requests = pytest.importorskip("requests")


def listed(server, query: str) -> list[dict]:
    response = call(server, "GET", f"/v1/queries?{query}")
    assert response.status_code == 200, response.text
    return response.json()["queries"]


def test_status_filter_lists_running_and_queued_queries(slow_server):
    first = submit(slow_server, "SELECT o_orderpriority, count(*) FROM orders GROUP BY 1")["query_id"]
    second = submit(slow_server, "SELECT count(*) FROM customer")["query_id"]
    done = submit(slow_server, "SELECT 1 AS x")["query_id"]  # table-free: the driver answers it at once
    try:
        wait(slow_server, first, until=("running",))
        running = listed(slow_server, "status=running&limit=100")
        active = listed(slow_server, "status=running,queued&limit=100")
        assert first in [q["query_id"] for q in running]
        assert all(q["status"] == "running" for q in running)
        assert {first, second} <= {q["query_id"] for q in active}
        assert all(q["status"] in ("running", "queued") for q in active)
        queued = listed(slow_server, "status=queued&limit=100")
        assert all(q["status"] == "queued" for q in queued)
        for query_id in (first, second):
            call(slow_server, "DELETE", f"/v1/queries/{query_id}")
        wait(slow_server, done, timeout=120)
        assert done not in [q["query_id"] for q in listed(slow_server, "status=running,queued&limit=100")]
        assert done in [q["query_id"] for q in listed(slow_server, "status=succeeded&limit=100")]
        detail = error_of(call(slow_server, "GET", "/v1/queries?status=waiting"), 422, "ValidationError")
        assert "status" in detail
    finally:
        for query_id in (first, second):
            call(slow_server, "DELETE", f"/v1/queries/{query_id}")


def test_a_long_filtered_scan_pages_on(tmp_path, sf001):
    from squall.service.backend import LocalBackend
    from squall.service.service import MAX_SCAN, Service
    from squall.service.state import state_store

    store = state_store(str(tmp_path / "state"))
    now = time.time()
    ids = [records.new_query_id(now - i) for i in range(MAX_SCAN + 10)]  # newest first
    for i, query_id in enumerate(ids):
        store.put_json(records.request_key(query_id), {"sql": "SELECT 1"})
        status = "running" if i in (3, MAX_SCAN + 5) else "succeeded"
        store.put_json(
            records.status_key(query_id), {"query_id": query_id, "status": status, "sql": "SELECT 1"}
        )
    backend = LocalBackend(str(sf001), workers=1)
    try:
        service = Service(store, backend)
        page = service.history(20, None, frozenset({"running"}))
        assert [q["query_id"] for q in page["queries"]] == [ids[3]]
        assert page["next_page_token"] == ids[MAX_SCAN - 1]  # read MAX_SCAN statuses, more to go
        page = service.history(20, page["next_page_token"], frozenset({"running"}))
        assert [q["query_id"] for q in page["queries"]] == [ids[MAX_SCAN + 5]]
        assert page["next_page_token"] is None
    finally:
        backend.close()


def test_queue_field_is_shown_for_queued_queries(tmp_path, sf001):
    from squall.service.api import make_handler
    from squall.service.backend import LocalBackend
    from squall.service.server import ApiServer
    from squall.service.service import Service
    from squall.service.state import state_store

    store = state_store(str(tmp_path / "state"))
    waiting, started = records.new_query_id(), records.new_query_id()
    queue = {"position": 2, "ahead": 1, "estimated_wait_s": 12.5, "group": "adhoc"}
    for query_id, status in ((waiting, "queued"), (started, "running")):
        store.put_json(records.request_key(query_id), {"sql": "SELECT 2"})
        store.put_json(
            records.status_key(query_id),
            {
                "query_id": query_id,
                "status": status,
                "sql": "SELECT 2",
                "queue": queue,
            },  # a stale one on "running"
        )
    backend = LocalBackend(str(sf001), workers=1)
    server = ApiServer(("127.0.0.1", 0), make_handler(Service(store, backend)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        doc = requests.get(f"{server.url}/v1/queries/{waiting}", timeout=30).json()
        assert doc["queue"] == queue
        assert requests.get(f"{server.url}/v1/queries/{started}", timeout=30).json()["queue"] is None
        items = requests.get(f"{server.url}/v1/queries?status=queued,running", timeout=30).json()["queries"]
        by_id = {q["query_id"]: q for q in items}
        assert by_id[waiting]["queue"] == queue and by_id[started]["queue"] is None
        spec = requests.get(f"{server.url}/v1/openapi.json", timeout=30).json()
        assert "estimated_wait_s" in spec["components"]["schemas"]["QueueInfo"]["properties"]
    finally:
        server.shutdown()
        server.server_close()
        backend.close()
