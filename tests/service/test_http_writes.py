"""Write statements through the REST API (issue 33): ``squall serve --writable DIR`` accepts COPY, runs it on
its workers and shows what was written (status ``written``, ``stats["written"]`` per rank, the history); a
target outside the writable locations — or any write on a server without them — is a 400 with one line, and
nothing is written. The deployed API's two functions take the same from ``SQUALL_WRITABLE``: the API function
refuses a COPY target outside it before invoking the driver, whose Connection writes inside it (S3 on moto)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from squall.testing import assert_same_result

from ..s3server import moto_available, moto_s3
from .test_http_api import call, error_of, submit, wait

ORDERS = "SELECT o_orderkey, o_orderstatus, o_totalprice, o_orderdate FROM orders"


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_copy_over_http_shows_what_was_written(write_server, reference_sf001):
    sql = f"COPY ({ORDERS}) TO 'orders/' (PARTITION_BY (o_orderstatus))"
    explained = call(write_server, "POST", "/v1/explain", json={"sql": sql})
    assert explained.status_code == 200 and "write: 2 ranks write parquet files" in explained.json()["text"]
    query_id = submit(write_server, sql)["query_id"]
    doc = wait(write_server, query_id)[-1]
    assert doc["status"] == "succeeded", doc
    target = f"{write_server.out}/orders/"
    assert doc["written"]["target"] == target and doc["written"]["rows"] == 15000
    per_rank = doc["stats"]["written"]["per_rank"]
    assert sum(r["rows"] for r in per_rank) == 15000 and all(r["files"] for r in per_rank)  # both ranks wrote
    files = files_under(write_server.out / "orders")
    assert doc["written"]["files"] == len(files) and all(f.startswith("o_orderstatus=") for f in files)
    got = duckdb.sql(f"SELECT o_orderkey, o_orderstatus, o_totalprice, o_orderdate FROM read_parquet("
                     f"'{target}**/*.parquet', hive_partitioning = true)").to_arrow_table()  # fmt: skip
    assert_same_result(got, reference_sf001.sql(ORDERS).to_arrow_table(), ORDERS)

    rows = call(write_server, "GET", f"/v1/queries/{query_id}/result", params={"format": "json"}).json()
    assert rows == [{"status": "COPY", "rows": 15000, "files": len(files), "bytes": doc["written"]["bytes"],
                     "target": target}]  # fmt: skip
    history = call(write_server, "GET", "/v1/queries").json()["queries"]
    assert next(q for q in history if q["query_id"] == query_id)["written"] == doc["written"]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/tmp/squall-not-writable/x/", "outside the writable locations"),
        ("../x/", "may not contain '..'"),
        ("https://example.com/x.parquet", "only local folders and s3:// locations"),
    ],
)
def test_refused_copy_is_400_and_writes_nothing(write_server, target, message):
    before = files_under(write_server.out)
    response = call(write_server, "POST", "/v1/queries", json={"sql": f"COPY (SELECT 1 AS x) TO '{target}'"})
    assert message in error_of(response, 400, "UnsafeQueryError")
    assert files_under(write_server.out) == before
    assert not Path("/tmp/squall-not-writable").exists()


def test_server_without_writable_refuses_every_write(server):
    detail = error_of(call(server, "POST", "/v1/queries", json={"sql": "COPY (SELECT 1 AS x) TO 'x.csv'"}), 400,
                      "UnsafeQueryError")  # fmt: skip
    assert detail.startswith("writing is not enabled") and "\n" not in detail


@pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
def test_deployed_functions_take_squall_writable(monkeypatch, sf001, reference_sf001):
    """The Lambda API handler with its driver function emulated in-process (as in test_lambda_api), both
    configured from the environment the stack sets: ``SQUALL_WRITABLE`` names the output prefix."""
    pytest.importorskip("aws_lambda_powertools")
    from squall.functions import api
    from squall.service import backend as backend_module
    from squall.service import deployment
    from squall.service.runner import handle_driver_event

    from .test_lambda_api import body_of, event, with_query_id

    with moto_s3("squall-api-writes") as s3:
        for name, value in {"SQUALL_BUCKET": "squall-api-writes", "SQUALL_DRIVER_FUNCTION": "squall-driver",
                            "SQUALL_DATA": str(sf001), "SQUALL_PLATFORM": "local", "SQUALL_DEFAULT_WORKERS": "1",
                            "SQUALL_WRITABLE": "s3://squall-api-writes/out/", "POWERTOOLS_TRACE_DISABLED": "1"}.items():  # fmt: skip
            monkeypatch.setenv(name, value)
        invocations: list[dict] = []

        class FakeLambda:
            def invoke(self, FunctionName, InvocationType, Payload):
                invocations.append(json.loads(Payload))
                out = handle_driver_event(json.loads(Payload), deployment.connection_for)
                return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(out).encode())}

        fake = FakeLambda()
        monkeypatch.setattr(backend_module.LambdaBackend, "client", property(lambda self: fake))
        monkeypatch.setattr(api, "_handler", None)
        monkeypatch.setattr(deployment, "_connections", {})
        try:
            refused = api.handler(event("post_query", body=json.dumps({"sql": "COPY (SELECT 1) TO 's3://other/x/'"})),
                                  None)  # fmt: skip
            assert refused["statusCode"] == 400 and invocations == []  # the API function refused it
            assert "outside the writable locations" in json.loads(refused["body"])["detail"]

            post = event("post_query", body=json.dumps({"sql": f"COPY ({ORDERS}) TO 'orders.parquet'"}))
            post["headers"]["Idempotency-Key"] = post["multiValueHeaders"]["Idempotency-Key"][0] = "write-1"
            accepted = api.handler(post, None)
            assert accepted["statusCode"] == 202, accepted
            query_id = json.loads(accepted["body"])["query_id"]
            doc = json.loads(api.handler(with_query_id(event("get_query"), query_id), None)["body"])
            assert doc["status"] == "succeeded", doc
            assert doc["written"] == {"target": "s3://squall-api-writes/out/orders.parquet", "rows": 15000,
                                      "files": 1, "bytes": doc["written"]["bytes"]}  # fmt: skip
            result = api.handler(with_query_id(event("get_result"), query_id), None)
            assert result["statusCode"] == 200 and body_of(result)
            raw = s3.client().get_object(Bucket="squall-api-writes", Key="out/orders.parquet")["Body"].read()
            assert_same_result(
                pq.read_table(io.BytesIO(raw)), reference_sf001.sql(ORDERS).to_arrow_table(), ORDERS
            )
        finally:
            for con in deployment._connections.values():
                con.close()
