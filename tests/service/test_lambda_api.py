"""The REST API Lambda handler (``squall.functions.api.handler``) on captured API Gateway events.

State lives in moto's S3 server; the driver function is emulated in-process: the API's invocations of
``SQUALL_DRIVER_FUNCTION`` go to :func:`squall.service.runner.handle_driver_event` with an embedded
Connection (an "Event" invocation runs the query before returning, as if the driver were instant) through a fake boto3
Lambda client.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

from squall.service import backend as backend_module
from squall.service import records
from squall.service.runner import handle_driver_event
from squall.service.state import state_store
from squall.testing import assert_same_result

from ..s3server import moto_available, moto_s3

pytest.importorskip("aws_lambda_powertools")
pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))

EVENTS = Path(__file__).parent / "events"
BUCKET = "squall-lambda-api"


def event(name: str, **changes) -> dict:
    e = json.loads((EVENTS / f"apigw_rest_{name}.json").read_text())
    for key, value in changes.items():
        e[key] = value
    return e


def with_query_id(e: dict, query_id: str) -> dict:
    e = copy.deepcopy(e)
    e["path"] = e["path"].replace("q0123456789abcdef0123456789abcdef", query_id)
    return e


@pytest.fixture
def lambda_api(monkeypatch, connections, sf001):
    """The handler module with a fresh service from the environment and an emulated driver function."""
    with moto_s3(BUCKET):
        monkeypatch.setenv("SQUALL_BUCKET", BUCKET)
        monkeypatch.setenv("SQUALL_QUERIES_PREFIX", "queries/")
        monkeypatch.setenv("SQUALL_DRIVER_FUNCTION", "squall-driver")
        monkeypatch.setenv("SQUALL_INLINE_LIMIT", "1024")
        monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
        invocations: list[dict] = []
        hold = {"async": False}  # True: "Event" invocations do nothing (the query stays queued)

        class FakeLambda:
            """boto3's Lambda client, as far as LambdaBackend uses it."""

            def invoke(self, FunctionName, InvocationType, Payload):
                assert FunctionName == "squall-driver"
                payload = json.loads(Payload)
                asynchronous = InvocationType == "Event"
                invocations.append({**payload, "async": asynchronous})
                if asynchronous and hold["async"]:
                    return {"StatusCode": 202, "Payload": io.BytesIO(b"")}
                out = handle_driver_event(payload, lambda workers: connections.get(sf001, workers or 2))
                return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(out).encode())}

        fake = FakeLambda()
        monkeypatch.setattr(backend_module.LambdaBackend, "client", property(lambda self: fake))
        from squall.functions import api

        monkeypatch.setattr(api, "_handler", None)
        api.invocations = invocations  # type: ignore[attr-defined]
        api.hold = hold  # type: ignore[attr-defined]
        yield api


def body_of(response: dict) -> bytes:
    raw = response["body"] or ""
    return base64.b64decode(raw) if response["isBase64Encoded"] else raw.encode()


def headers_of(response: dict) -> dict[str, str]:
    return {k: v[-1] for k, v in response["multiValueHeaders"].items()}


def test_submit_poll_fetch_through_the_lambda_handler(lambda_api, reference_sf001):
    post = event("post_query")
    accepted = lambda_api.handler(post, None)
    assert accepted["statusCode"] == 202, accepted
    query_id = json.loads(accepted["body"])["query_id"]
    assert headers_of(accepted)["Location"] == f"/v1/v1/queries/{query_id}"  # behind the "v1" stage
    run = lambda_api.invocations[-1]
    assert run == {"op": "run", "query_id": query_id, "state": f"s3://{BUCKET}/queries/", "async": True}

    replay = lambda_api.handler(post, None)  # same Idempotency-Key
    assert json.loads(replay["body"])["query_id"] == query_id and len(lambda_api.invocations) == 1

    status = lambda_api.handler(with_query_id(event("get_query"), query_id), None)
    doc = json.loads(status["body"])
    assert status["statusCode"] == 200 and doc["status"] == "succeeded" and doc["stats"]["rows"] == 5

    result = lambda_api.handler(with_query_id(event("get_result"), query_id), None)
    assert result["statusCode"] == 200 and result["isBase64Encoded"] is True
    table = pa.ipc.open_stream(body_of(result)).read_all()
    assert table.to_pydict() == {"n_regionkey": [0, 1, 2, 3, 4], "n": [5] * 5}
    plain = event("get_result", queryStringParameters=None, multiValueQueryStringParameters=None)
    plain["headers"]["Accept"] = "*/*"  # no ?format= and any format: the submitted one (csv)
    plain["multiValueHeaders"]["Accept"] = ["*/*"]
    csv = lambda_api.handler(with_query_id(plain, query_id), None)
    assert csv["isBase64Encoded"] is False and body_of(csv).decode().splitlines()[1] == "0,5"
    assert headers_of(csv)["X-Total-Rows"] == "5" and "Link" not in headers_of(csv)
    # Accept chooses when there is no ?format=
    as_json = lambda_api.handler(with_query_id(event("get_result", queryStringParameters=None,
                                                     multiValueQueryStringParameters=None), query_id), None)  # fmt: skip
    assert json.loads(body_of(as_json)) == [{"n_regionkey": k, "n": 5} for k in range(5)]


def test_large_results_are_presigned_urls(lambda_api, reference_sf001):
    sql = "SELECT * FROM nation ORDER BY n_nationkey"
    post = event("post_query", body=json.dumps({"sql": sql}))
    post["headers"]["Idempotency-Key"] = post["multiValueHeaders"]["Idempotency-Key"][0] = "large-1"
    query_id = json.loads(lambda_api.handler(post, None)["body"])["query_id"]
    response = lambda_api.handler(with_query_id(event("get_result"), query_id), None)
    assert response["statusCode"] == 303
    url = headers_of(response)["Location"]
    assert json.loads(response["body"])["url"] == url
    with urllib.request.urlopen(url) as download:
        table = pa.ipc.open_stream(download.read()).read_all()
    assert_same_result(table, reference_sf001.sql(sql).to_arrow_table(), sql)


def test_errors_catalog_and_explain(lambda_api):
    bad = lambda_api.handler(event("post_query", body=json.dumps({"sql": "SELEC 1"})), None)
    assert bad["statusCode"] == 400 and json.loads(bad["body"])["error"] == "SqlSyntaxError"
    bad = lambda_api.handler(event("post_query", body='{"sql": '), None)
    assert bad["statusCode"] == 422 and json.loads(bad["body"])["error"] == "ValidationError"
    missing = lambda_api.handler(event("get_query"), None)
    assert missing["statusCode"] == 404 and json.loads(missing["body"])["error"] == "NotFound"

    # the API only parses; binding happens in the driver, so an unknown table is a failed query
    post = event("post_query", body=json.dumps({"sql": "SELECT * FROM nope"}))
    post["headers"]["Idempotency-Key"] = post["multiValueHeaders"]["Idempotency-Key"][0] = "unknown-table"
    query_id = json.loads(lambda_api.handler(post, None)["body"])["query_id"]
    doc = json.loads(lambda_api.handler(with_query_id(event("get_query"), query_id), None)["body"])
    assert doc["status"] == "failed" and doc["error"]["error"] == "BindError"
    result = lambda_api.handler(with_query_id(event("get_result"), query_id), None)
    assert result["statusCode"] == 409 and json.loads(result["body"])["error"] == "BindError"

    tables = lambda_api.handler(event("get_query", path="/v1/tables"), None)
    assert tables["statusCode"] == 200 and "lineitem" in {
        t["name"] for t in json.loads(tables["body"])["tables"]
    }
    explain = event("post_query", path="/v1/explain", body=json.dumps({"sql": "SELECT count(*) FROM orders"}))
    plan = lambda_api.handler(explain, None)
    assert plan["statusCode"] == 200 and "Stage 1" in json.loads(plan["body"])["text"]
    explain["body"] = json.dumps({"sql": "SELECT * FROM nope"})
    unknown = lambda_api.handler(explain, None)
    assert unknown["statusCode"] == 400 and json.loads(unknown["body"])["error"] == "BindError"


def test_cancel_reaches_the_driver_through_the_store(lambda_api, connections, sf001):
    lambda_api.hold["async"] = True
    post = event("post_query", body=json.dumps({"sql": "SELECT count(*) FROM region"}))
    post["headers"]["Idempotency-Key"] = post["multiValueHeaders"]["Idempotency-Key"][0] = "held-1"
    query_id = json.loads(lambda_api.handler(post, None)["body"])["query_id"]
    store = state_store(f"s3://{BUCKET}/queries/")
    assert store.get_json(records.status_key(query_id))["status"] == "queued"

    response = lambda_api.handler(with_query_id(event("get_query", httpMethod="DELETE"), query_id), None)
    assert response["statusCode"] == 202 and json.loads(response["body"])["status"] == "cancelled"
    assert store.exists(records.cancel_key(query_id))
    # the driver's invocation arrives late: it sees the marker and does not run the query
    out = handle_driver_event({"op": "run", "query_id": query_id, "state": store.url},
                              lambda w: connections.get(sf001, w or 2))  # fmt: skip
    assert out == {"status": "cancelled"}
    assert store.get_json(records.status_key(query_id))["status"] == "cancelled"
