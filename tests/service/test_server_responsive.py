"""``squall serve`` never freezes: a real server on loopback (the session's ``server`` fixture, TPC-H SF0.01).

- ``/healthz`` and status polls are answered while another request plans a 100,000-element IN list (no lock is
  held while planning): answers arrive before the slow submit returns (events and their order, no durations; the
  list is long enough that planning it outlasts several round trips: 10,000 elements once planned in 2 of them);
- many threads resolving different requests at once get their own answers (the resolver's per-thread state);
- a burst of 100 connections opened at once is served without a reset, and the listen backlog is 128;
- 429 and 503 carry ``Retry-After``; a malformed or 100,000-deep JSON body is a 422, not a 500;
- deeply nested SQL (41 parentheses, 96 nested subqueries) runs and matches DuckDB; far deeper nesting, or 5,000
  chained UNION ALLs, is a one-line 400 — no internal error, no server path in the message.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from .test_http_api import AUTH, call, error_of, submit, wait

requests = pytest.importorskip("requests")


def rows_of(server, query_id: str) -> list[dict]:
    response = call(server, "GET", f"/v1/queries/{query_id}/result?format=json")
    assert response.status_code == 200, response.text
    return response.json()


def test_healthz_and_status_answer_while_a_huge_in_list_is_planned(server, reference_sf001):
    keys = range(1, 100_001)  # ~590 KB of SQL, under the 1 MB limit
    sql = f"SELECT count(*) AS n, sum(o_totalprice) AS total FROM orders WHERE o_orderkey IN ({','.join(map(str, keys))})"
    other = submit(server, "SELECT count(*) AS n FROM nation")["query_id"]
    events: list[str] = []
    lock = threading.Lock()

    def slow_submit() -> dict:
        response = call(server, "POST", "/v1/queries", json={"sql": sql})
        with lock:
            events.append("submitted")
        assert response.status_code == 202, response.text
        return response.json()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(slow_submit)
        session = requests.Session()
        while not future.done():
            health = session.get(server.url + "/healthz", timeout=30)
            status = session.get(f"{server.url}/v1/queries/{other}", headers=AUTH, timeout=30)
            assert health.status_code == 200 and status.status_code == 200
            with lock:
                events.append("answered")
        accepted = future.result()
    # several answers came back while the IN list was being planned (before its submit returned)
    assert events.index("submitted") >= 3, events[:10]
    assert wait(server, accepted["query_id"])[-1]["status"] == "succeeded"
    expected = reference_sf001.sql(sql).fetchall()[0]
    got = rows_of(server, accepted["query_id"])
    assert got[0]["n"] == expected[0] and got[0]["total"] == pytest.approx(float(expected[1]))


def test_requests_resolved_at_once_get_their_own_answers(server):
    ids = [submit(server, f"SELECT {i} AS i")["query_id"] for i in range(4)]

    def one(n: int) -> None:
        query_id = ids[n % len(ids)]
        kind = n % 4
        if kind == 0:
            response = call(server, "GET", f"/v1/queries/{query_id}")
            assert response.status_code == 200 and response.json()["query_id"] == query_id
        elif kind == 1:
            limit = 1 + n % 3
            response = call(server, "GET", f"/v1/queries?limit={limit}")
            assert response.status_code == 200 and len(response.json()["queries"]) == limit
        elif kind == 2:
            response = call(server, "GET", f"/v1/nothing-{n}")
            assert error_of(response, 404) == f"no route GET /v1/nothing-{n}"
        else:
            response = call(server, "POST", "/v1/explain", json={"sql": f"SELECT {n} AS n"})
            assert response.status_code == 200 and f"{n} AS" in response.json()["text"], response.text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for future in [pool.submit(one, n) for n in range(160)]:
            future.result()


def test_a_burst_of_connections_is_served_without_resets(server):
    clients = 100
    barrier = threading.Barrier(clients)

    def connect_and_ask(_: int) -> int:
        barrier.wait()
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=60) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return int(data.split(b" ", 2)[1])

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        codes = list(pool.map(connect_and_ask, range(clients)))
    assert codes == [200] * clients
    if shutil.which("ss"):  # a listening socket's Send-Q is its backlog
        port = server.url.rsplit(":", 1)[1]
        out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert out.split()[2] == "128", out


def test_a_malformed_or_deeply_nested_body_is_a_422(server):
    deep = '{"sql": "SELECT 1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for body in (deep, '{"sql": ', "[" * 100_000):
        response = call(
            server, "POST", "/v1/queries", data=body, headers={"Content-Type": "application/json"}
        )
        detail = error_of(response, 422, "ValidationError")
        assert "JSON" in detail
    response = call(server, "POST", "/v1/queries", data=deep, headers={"Content-Type": "application/json"})
    assert "nested too deeply" in response.json()["detail"]
    assert call(server, "GET", "/healthz").status_code == 200


def _nested_parentheses(n: int) -> str:
    return f"SELECT {'(' * n}n_nationkey + 1{')' * n} AS k FROM nation ORDER BY k"


def _nested_subqueries(n: int) -> str:
    sql = "SELECT n_nationkey, n_name FROM nation"
    for i in range(n):
        sql = f"SELECT * FROM ({sql}) AS t{i}"
    return sql + " ORDER BY n_nationkey"


@pytest.mark.parametrize("sql", [_nested_parentheses(41), _nested_subqueries(96)], ids=["parens41", "subq96"])
def test_deeply_nested_sql_runs(server, reference_sf001, sql):
    query_id = submit(server, sql)["query_id"]
    assert wait(server, query_id)[-1]["status"] == "succeeded"
    expected = reference_sf001.sql(sql).fetchall()
    assert [tuple(r.values()) for r in rows_of(server, query_id)] == [tuple(r) for r in expected]


@pytest.mark.parametrize(
    "sql",
    [_nested_parentheses(3000), " UNION ALL ".join(f"SELECT {i} AS x" for i in range(5000))],
    ids=["parens3000", "union5000"],
)
def test_too_deep_sql_is_a_one_line_400(server, sql):
    response = call(server, "POST", "/v1/queries", json={"sql": sql})
    detail = error_of(response, 400, "NotSupportedError")
    assert "\n" not in detail and "nests too deeply" in detail
    assert "internal" not in detail and not re.search(r"/(root|home|tmp)\b", detail), detail


# --- Retry-After, and no server path in a message (the real server class on loopback, in this process) ------


@pytest.fixture
def local_api(sf001, tmp_path):
    from squall.service.api import make_handler
    from squall.service.backend import LocalBackend
    from squall.service.server import ApiServer
    from squall.service.service import Service
    from squall.service.state import state_store

    backend = LocalBackend(str(sf001), workers=2)
    service = Service(state_store(str(tmp_path / "state")), backend)
    server = ApiServer(("127.0.0.1", 0), make_handler(service))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.service = service  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        backend.close()


def test_busy_and_unavailable_carry_retry_after(local_api, monkeypatch):
    from squall.service.errors import Busy, Unavailable

    errors = iter(
        [Busy("8 queries of yours are queued", retry_after_s=6.2), Busy("full"), Unavailable("stopping")]
    )

    def refuse(sql, workers):
        raise next(errors)

    monkeypatch.setattr(local_api.service.backend, "check", refuse)
    for status, after in ((429, "7"), (429, "1"), (503, "5")):
        response = requests.post(local_api.url + "/v1/queries", json={"sql": "SELECT 1"}, timeout=30)
        assert response.status_code == status, response.text
        assert response.headers["Retry-After"] == after


def test_no_server_path_in_an_internal_error(local_api, monkeypatch, tmp_path):
    from pathlib import Path

    from squall.driver.planner.rules import aggregates

    logs = tmp_path / "logs-of-the-server"
    monkeypatch.setenv("SQUALL_LOG_DIR", str(logs))

    def broken(ctx, node):
        raise KeyError(f"injected bug at {Path.home()}/secret")

    monkeypatch.setattr(aggregates, "plan", broken)
    response = requests.post(
        local_api.url + "/v1/queries",
        json={"sql": "SELECT n_regionkey, count(*) FROM nation GROUP BY 1"},
        timeout=60,
    )
    assert response.status_code == 500, response.text
    detail = response.json()["detail"]
    assert detail.startswith("internal error while planning (bug): KeyError")
    assert detail.endswith("traceback in the server's log")
    assert str(logs) not in detail and str(Path.home()) not in detail and "~/secret" in detail
    assert (logs / "internal-errors.log").is_file()


def test_error_details_in_status_name_no_server_path(local_api):
    from pathlib import Path

    from squall.service import records

    service = local_api.service
    query_id = submit_local(local_api, "SELECT 1 AS x")
    wait_local(local_api, query_id)
    doc = service.store.get_json(records.status_key(query_id))
    doc.update(
        status="failed",
        result=None,
        error={
            "error": "InternalError",
            "detail": f"oops in {Path.home()}/x; traceback in {Path.home()}/.cache/squall/internal-errors.log",
        },
    )
    service.store.put_json(records.status_key(query_id), doc)
    got = requests.get(f"{local_api.url}/v1/queries/{query_id}", timeout=30).json()["error"]["detail"]
    assert got == "oops in ~/x; traceback in the server's log"
    listed = requests.get(f"{local_api.url}/v1/queries", timeout=30).json()["queries"][0]
    assert listed["query_id"] == query_id and str(Path.home()) not in json.dumps(listed)


def submit_local(server, sql: str) -> str:
    response = requests.post(server.url + "/v1/queries", json={"sql": sql}, timeout=60)
    assert response.status_code == 202, response.text
    return response.json()["query_id"]


def wait_local(server, query_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = requests.get(f"{server.url}/v1/queries/{query_id}", timeout=30).json()
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            return doc
        time.sleep(0.05)
    raise AssertionError(f"query {query_id} did not finish")
