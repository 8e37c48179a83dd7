"""End to end over HTTP: ``squall serve`` subprocesses on loopback, driven with ``requests``.

TPC-H queries submitted, polled and fetched in every format; cancellation (queued and running) and timeouts
on a server whose rank 0 sleeps 5 s per stage; 401 without the token; 4xx JSON for malformed bodies, unknown
ids and bad SQL; Idempotency-Key replays (also concurrent); large results streamed (local state) or
redirected to presigned URLs (S3 state on moto).
"""

from __future__ import annotations

import concurrent.futures
import io
import json
import time

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from squall import tpch
from squall.testing import assert_same_result

from .conftest import TOKEN

requests = pytest.importorskip("requests")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def call(server, method: str, path: str, *, token: bool = True, **kwargs) -> requests.Response:
    headers = {**(AUTH if token else {}), **kwargs.pop("headers", {})}
    return requests.request(
        method, server.url + path, headers=headers, timeout=30, allow_redirects=False, **kwargs
    )


def submit(server, sql: str, *, expect: int = 202, headers: dict | None = None, **fields) -> dict:
    response = call(server, "POST", "/v1/queries", json={"sql": sql, **fields}, headers=headers or {})
    assert response.status_code == expect, response.text
    return response.json()


def wait(
    server, query_id: str, timeout: float = 60, until=("succeeded", "failed", "cancelled")
) -> list[dict]:
    """Poll until the status is one of ``until``; returns every status seen."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = call(server, "GET", f"/v1/queries/{query_id}")
        assert response.status_code == 200, response.text
        seen.append(response.json())
        if seen[-1]["status"] in until:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"query {query_id} still {seen[-1]['status']} after {timeout} s")


def error_of(response: requests.Response, status: int, error: str | None = None) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error", "detail"}, body
    assert "Traceback" not in body["detail"]
    if error is not None:
        assert body["error"] == error, body
    return body["detail"]


# --- queries, status, results -----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 13], ids=lambda n: f"q{n:02d}")
def test_tpch_query_over_http_in_every_format(server, reference_sf001, n):
    sql = tpch.query(n, sf=0.01)
    response = call(server, "POST", "/v1/queries", json={"sql": sql, "format": "csv"})
    assert response.status_code == 202, response.text
    accepted = response.json()
    query_id = accepted["query_id"]
    assert accepted["status"] in ("queued", "running")
    assert response.headers["Location"] == f"/v1/queries/{query_id}"

    final = wait(server, query_id)[-1]
    assert final["status"] == "succeeded", final
    expected = reference_sf001.sql(sql).to_arrow_table()
    assert final["sql"] == sql and final["format"] == "csv"
    assert final["progress"]["stages"] == final["progress"]["stages_done"] >= 1
    assert final["progress"]["world_size"] == 2 and final["progress"]["fraction"] == 1.0
    stats = final["stats"]
    assert stats["rows"] == expected.num_rows and stats["query_id"] == query_id
    assert stats["elapsed_s"] > 0 and stats["stages"] and stats["bytes_scanned"] > 0
    assert (
        final["result"]["rows"] == expected.num_rows and final["result"]["columns"] == expected.column_names
    )

    arrow = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "arrow"})
    assert arrow.status_code == 200 and arrow.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
    assert_same_result(pa.ipc.open_stream(arrow.content).read_all(), expected, sql)

    parquet = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "parquet"})
    assert parquet.status_code == 200 and parquet.content.startswith(b"PAR1")
    assert_same_result(pq.read_table(io.BytesIO(parquet.content)), expected, sql)

    default = call(server, "GET", f"/v1/queries/{query_id}/result")  # the submitted format: csv
    assert default.status_code == 200 and default.headers["Content-Type"].startswith("text/csv")
    csv_table = pcsv.read_csv(io.BytesIO(default.content))
    assert csv_table.column_names == expected.column_names and csv_table.num_rows == expected.num_rows

    rows = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "json"})
    assert rows.status_code == 200 and rows.headers["Content-Type"] == "application/json"
    data = rows.json()
    assert len(data) == expected.num_rows and list(data[0]) == expected.column_names
    first = expected.slice(0, 1).to_pylist()[0]
    for key, value in first.items():
        assert data[0][key] == pytest.approx(float(value)) if isinstance(data[0][key], float) else True


def test_large_result_is_streamed_from_the_local_state_folder(server, reference_sf001):
    sql = "SELECT o_orderkey, o_comment FROM orders ORDER BY o_orderkey LIMIT 3000"
    query_id = submit(server, sql)["query_id"]
    assert wait(server, query_id)[-1]["status"] == "succeeded"
    response = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "arrow"})
    assert response.status_code == 200
    assert int(response.headers["Content-Length"]) == len(response.content) > 4096
    assert "attachment" in response.headers["Content-Disposition"]
    assert "X-Squall-Internal-File" not in response.headers
    assert_same_result(
        pa.ipc.open_stream(response.content).read_all(), reference_sf001.sql(sql).to_arrow_table(), sql
    )
    csv_response = call(
        server, "GET", f"/v1/queries/{query_id}/result", params={"format": "csv", "limit": 3000}
    )
    assert csv_response.status_code == 200 and csv_response.text.count("\n") == 3001
    assert (server.state / query_id / "result.csv").exists()


def test_catalog_explain_and_openapi(server):
    tables = call(server, "GET", "/v1/tables")
    assert tables.status_code == 200
    by_name = {t["name"]: t for t in tables.json()["tables"]}
    assert set(by_name) == set(tpch.TABLES)
    nation = by_name["nation"]
    assert nation["rows"] == 25 and [c["name"] for c in nation["columns"]][:2] == ["n_nationkey", "n_name"]
    assert nation["columns"][0]["type"] == "int64"

    plan = call(server, "POST", "/v1/explain", json={"sql": "SELECT count(*) FROM lineitem", "workers": 1})
    assert plan.status_code == 200 and "Stage 1" in plan.json()["text"] and plan.json()["plan"]

    doc = call(server, "GET", "/v1/openapi.json", token=False)
    assert doc.status_code == 200
    spec = doc.json()
    assert spec["openapi"].startswith("3.1") and spec["info"]["title"] == "Squall"
    assert {"/v1/queries", "/v1/queries/{query_id}", "/v1/queries/{query_id}/result", "/v1/tables"} <= set(
        spec["paths"]
    )
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


# --- auth and errors ------------------------------------------------------------------------------


def test_token_is_required(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        for method, path in (("GET", "/v1/tables"), ("POST", "/v1/queries"), ("GET", "/v1/queries/x")):
            response = call(server, method, path, token=False, headers=headers, json={"sql": "SELECT 1"})
            error_of(response, 401, "Unauthorized")
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_malformed_requests_get_4xx_json(server):
    path = "/v1/queries"
    error_of(call(server, "POST", path, data="{not json", headers={"Content-Type": "application/json"}), 422)
    error_of(
        call(server, "POST", path, data=b"\xff\xfe\x00", headers={"Content-Type": "application/json"}), 422
    )
    error_of(call(server, "POST", path), 422, "ValidationError")
    error_of(call(server, "POST", path, json=[1, 2]), 422, "ValidationError")
    assert "body.sql" in error_of(call(server, "POST", path, json={"query": "SELECT 1"}), 422)
    error_of(call(server, "POST", path, json={"sql": ""}), 422)
    error_of(call(server, "POST", path, json={"sql": 5}), 422)
    error_of(call(server, "POST", path, json={"sql": "SELECT 1", "workers": 0}), 422)
    error_of(call(server, "POST", path, json={"sql": "SELECT 1", "format": "xlsx"}), 422)
    error_of(call(server, "POST", path, json={"sql": "SELECT 1", "timeout_s": -1}), 422)
    error_of(call(server, "POST", path, json={"sql": "SELECT 1", "workers": 3}), 400, "OptionError")
    error_of(call(server, "POST", "/v1/explain", json={}), 422)
    error_of(call(server, "GET", "/v1/queries/q0/result", params={"format": "xml"}), 422)


def test_bad_sql_gets_400_with_the_engine_error(server):
    cases = {
        "SELEC 1": "SqlSyntaxError",
        "SELECT * FROM no_such_table": "BindError",
        "SELECT nope FROM nation": "BindError",
        "DROP TABLE nation": "UnsafeQueryError",
        "SELECT 1; SELECT 2": "UnsafeQueryError",
        "SELECT * FROM read_parquet('/etc/passwd')": "UnsafeQueryError",
        "   ": "SqlSyntaxError",
    }
    for sql, error in cases.items():
        detail = error_of(call(server, "POST", "/v1/queries", json={"sql": sql}), 400, error)
        assert "\n" not in detail
    error_of(call(server, "POST", "/v1/explain", json={"sql": "SELEC 1"}), 400, "SqlSyntaxError")


def test_unknown_ids_and_routes_get_404(server):
    unknown = "q" + "0" * 32
    for method, path in (
        ("GET", f"/v1/queries/{unknown}"),
        ("GET", f"/v1/queries/{unknown}/result"),
        ("DELETE", f"/v1/queries/{unknown}"),
        ("GET", "/v1/queries/not-an-id"),
        ("GET", "/v1/queries/..%2F..%2Fetc"),
        ("GET", "/v1/nothing"),
    ):
        error_of(call(server, method, path), 404, "NotFound")
    wrong_method = call(server, "PUT", "/v1/queries")
    error_of(wrong_method, 405, "MethodNotAllowed")
    assert wrong_method.headers["Allow"] == "GET, POST"


def test_result_before_the_end_and_cancel_after_it_are_conflicts(slow_server):
    # slow_server's rank 0 sleeps 5 s before stage 1: the query is still running when its result is asked for
    query_id = submit(slow_server, JOIN)["query_id"]
    status = wait(slow_server, query_id, until=("queued", "running", "succeeded", "failed", "cancelled"))
    assert status[-1]["status"] in ("queued", "running"), status[-1]
    detail = error_of(call(slow_server, "GET", f"/v1/queries/{query_id}/result"), 409, "NotReady")
    assert "result is not ready" in detail
    final = wait(slow_server, query_id, timeout=60)[-1]
    assert final["status"] == "succeeded", final
    detail = error_of(call(slow_server, "DELETE", f"/v1/queries/{query_id}"), 409, "Conflict")
    assert "already succeeded" in detail
    assert call(slow_server, "GET", f"/v1/queries/{query_id}/result").status_code == 200


# --- idempotency ----------------------------------------------------------------------------------


def test_idempotency_key_returns_the_same_query(server):
    sql = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY 1"
    key = {"Idempotency-Key": f"key-{time.time_ns()}"}
    first = call(server, "POST", "/v1/queries", json={"sql": sql}, headers=key)
    second = call(server, "POST", "/v1/queries", json={"sql": sql}, headers=key)
    assert first.status_code == second.status_code == 202
    assert first.json()["query_id"] == second.json()["query_id"]
    assert second.headers.get("Idempotent-Replayed") == "true" and "Idempotent-Replayed" not in first.headers
    other = call(server, "POST", "/v1/queries", json={"sql": sql + " ORDER BY 1"}, headers=key)
    error_of(other, 409, "Conflict")
    assert submit(server, sql)["query_id"] != first.json()["query_id"]  # no key: a new query

    concurrent_key = {"Idempotency-Key": f"key-{time.time_ns()}-c"}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: submit(server, sql, headers=concurrent_key), range(8)))
    ids = {r["query_id"] for r in responses}
    assert len(ids) == 1
    (query_id,) = ids
    assert wait(server, query_id)[-1]["status"] == "succeeded"
    assert len(list(server.state.glob("q*/request.json"))) == len(list(server.state.glob("q*")))


# --- cancellation, timeouts, progress (rank 0 sleeps 5 s before stage 1) ------------------------------
# The local platform's cancel aborts the exchange: ranks stop when they next wait for data. A join makes
# rank 1 wait for rank 0 in stage 1 (aborted at once) and rank 0 wait for rank 1 in stage 2 (aborted
# right after its sleep), so a cancelled join ends after ~5 s instead of running to completion.

JOIN = "SELECT c_mktsegment, count(*) AS n FROM customer JOIN orders ON c_custkey = o_custkey GROUP BY 1"


def test_cancel_running_and_queued_queries(slow_server):
    # queries run at once up to the server's max_running: submit until one has to wait (it says where it stands)
    ids = []
    while len(ids) < 64:
        ids.append(submit(slow_server, JOIN)["query_id"])
        if call(slow_server, "GET", f"/v1/queries/{ids[-1]}").json().get("queue"):
            break
    *others, queued = ids
    running = others[0]
    wait(slow_server, running, until=("running",))

    cancelled = call(slow_server, "DELETE", f"/v1/queries/{queued}")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"

    response = call(slow_server, "DELETE", f"/v1/queries/{running}")
    assert response.status_code == 202, response.text
    assert response.json()["cancel_requested"] is True
    # the event, not a duration: the query ends cancelled (it would succeed if the cancel did not stop it)
    final = wait(slow_server, running, timeout=120)[-1]
    assert final["status"] == "cancelled" and final["error"]["error"] == "QueryCancelled", final
    error_of(call(slow_server, "GET", f"/v1/queries/{running}/result"), 409, "QueryCancelled")
    assert call(slow_server, "DELETE", f"/v1/queries/{running}").json()["status"] == "cancelled"
    final_queued = wait(slow_server, queued)[-1]
    assert final_queued["status"] == "cancelled" and final_queued.get("started_at") is None
    for query_id in others[1:]:
        call(slow_server, "DELETE", f"/v1/queries/{query_id}")
        assert wait(slow_server, query_id, timeout=120)[-1]["status"] in ("cancelled", "succeeded")


def test_timeout_fails_the_query(slow_server):
    query_id = submit(slow_server, JOIN, timeout_s=1.5)["query_id"]
    final = wait(slow_server, query_id, timeout=30)[-1]
    assert final["status"] == "failed", final
    assert final["error"] == {"error": "QueryCancelled", "detail": "query timed out after 1.5 s"}
    error_of(call(slow_server, "GET", f"/v1/queries/{query_id}/result"), 409, "QueryCancelled")


def test_progress_shows_while_running(slow_server):
    sql = "SELECT o_orderstatus, count(*) AS n FROM orders GROUP BY 1"  # rank 1 finishes stage 1 at once
    query_id = submit(slow_server, sql)["query_id"]
    seen = wait(slow_server, query_id, timeout=30)
    assert seen[-1]["status"] == "succeeded"
    running = [s for s in seen if s["status"] == "running" and s.get("progress")]
    assert running, "no progress reported while running"
    progress = running[0]["progress"]
    assert progress["world_size"] == 2 and progress["stages"] == 2 and progress["stages_done"] == 0
    assert progress["ranks_done"]["1"] == 1 and 0 < progress["fraction"] < 1  # rank 0 still sleeps
    assert seen[-1]["progress"]["fraction"] == 1.0


# --- S3 state (moto): presigned URLs for large results, conditional idempotency writes --------------


def test_s3_state_store_with_presigned_results(s3_server, reference_sf001):
    small_sql = "SELECT count(*) AS n FROM nation"
    big_sql = "SELECT n_nationkey, n_name, n_comment FROM nation ORDER BY 1"
    key = {"Idempotency-Key": "s3-key-1"}
    small = submit(s3_server, small_sql, headers=key)["query_id"]
    assert submit(s3_server, small_sql, headers=key)["query_id"] == small
    big = submit(s3_server, big_sql, format="json")["query_id"]
    assert wait(s3_server, small)[-1]["status"] == "succeeded"
    assert wait(s3_server, big)[-1]["status"] == "succeeded"

    inline = call(s3_server, "GET", f"/v1/queries/{small}/result", params={"format": "arrow"})
    assert inline.status_code == 200 and pa.ipc.open_stream(inline.content).read_all().to_pydict() == {
        "n": [25]
    }

    redirect = call(s3_server, "GET", f"/v1/queries/{big}/result", params={"format": "arrow"})
    assert redirect.status_code == 303, redirect.text
    link = redirect.json()
    assert redirect.headers["Location"] == link["url"] and link["format"] == "arrow" and link["bytes"] > 1024
    assert link["url"].startswith(s3_server.s3.endpoint_url) and "Signature" in link["url"]
    download = requests.get(link["url"], timeout=30)
    assert download.status_code == 200
    expected = reference_sf001.sql(big_sql).to_arrow_table()
    assert_same_result(pa.ipc.open_stream(download.content).read_all(), expected, big_sql)
    rows = requests.get(call(s3_server, "GET", f"/v1/queries/{big}/result").json()["url"], timeout=30).json()
    assert len(rows) == 25 and rows[0]["n_name"] == "ALGERIA"

    client = s3_server.s3.client()
    keys = {
        o["Key"] for o in client.list_objects_v2(Bucket="squall-api-state", Prefix="queries/")["Contents"]
    }
    assert {f"queries/{big}/status.json", f"queries/{big}/request.json", f"queries/{big}/result.arrow",
            f"queries/{big}/result.json"} <= keys  # fmt: skip
    assert sum(k.startswith("queries/_idempotency/") for k in keys) == 1
    status = json.loads(
        client.get_object(Bucket="squall-api-state", Key=f"queries/{big}/status.json")["Body"].read()
    )
    assert status["status"] == "succeeded"


def test_long_poll_answers_when_the_query_ends(slow_server):
    query_id = submit(slow_server, "SELECT count(*) AS n FROM lineitem")["query_id"]  # rank 0 sleeps 5 s
    early = call(slow_server, "GET", f"/v1/queries/{query_id}?wait_s=0.2")
    assert early.status_code == 200 and early.json()["status"] in (
        "queued",
        "running",
    )  # waited 0.2 s at most
    ended = call(slow_server, "GET", f"/v1/queries/{query_id}?wait_s=20")  # one request until the end
    assert ended.status_code == 200 and ended.json()["status"] == "succeeded", ended.text
    again = call(slow_server, "GET", f"/v1/queries/{query_id}?wait_s=20")  # an ended query: answered at once
    assert again.json()["status"] == "succeeded"
    for bad in ("21", "-1", "soon"):
        error_of(call(slow_server, "GET", f"/v1/queries/{query_id}?wait_s={bad}"), 422)
    assert "wait_s" in error_of(call(slow_server, "GET", f"/v1/queries/{query_id}?wait=1"), 422)
