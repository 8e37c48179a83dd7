"""The Lambda handlers run on captured events (``tests/lambda/events/*.json``), like Powertools examples.

- ``worker.json``: a worker invocation (plan inline, one rank, the S3 exchange on moto);
- ``driver-explain.json``, ``driver-tables.json``, ``driver-run.json``: the API's events to the driver
  function, whose platform is the local Lambda emulator here (``SQUALL_PLATFORM=lambda-local``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from squall.driver.platforms.lambda_ import state as keys
from squall.driver.platforms.lambda_.emulator_process import LambdaContext
from squall.service import deployment, records
from squall.service.state import state_store

from ..s3server import moto_available, moto_s3
from ..tpch_data import tpch_dataset

pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
EVENTS = Path(__file__).parent / "events"
BUCKET = "squall-lambda-test"


def _event(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def _context(name: str) -> LambdaContext:
    return LambdaContext(name, 1024, "req-0001", deadline=4102444800.0)


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    with moto_s3(BUCKET) as server:
        yield server


def test_worker_event(s3):
    from squall.functions.worker import handler

    event = _event("worker")
    client, prefix = s3.client(), event["exchange"]["prefix"]
    try:
        out = handler(event, _context("squall-worker"))
        assert out == {"rank": 0, "attempt": 0, "status": "done"}
        done = client.get_object(Bucket=BUCKET, Key=keys.attempt_prefix(prefix, 0, 0) + "done")
        doc = json.loads(done["Body"].read())
        assert doc["report"]["rank"] == 0 and doc["billed_ms"] > 0 and doc["invocations"] == 0
        body = client.get_object(Bucket=BUCKET, Key=doc["result_key"])["Body"].read()
        assert pa.ipc.open_file(pa.py_buffer(body)).read_all().to_pylist() == [
            {"answer": 42, "name": "squall"}
        ]
    finally:  # the bucket is shared with the platform tests, which check that nothing is left over
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
        for obj in listed.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])


@pytest.fixture
def driver_env(s3, monkeypatch, tmp_path_factory):
    data = tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)
    monkeypatch.setenv("SQUALL_DATA", str(data))
    monkeypatch.setenv("SQUALL_PLATFORM", "lambda-local")
    monkeypatch.setenv("SQUALL_BUCKET", BUCKET)
    yield data
    for con in deployment._connections.values():
        con.close()
    deployment._connections.clear()


def test_driver_events(driver_env, tmp_path):
    from squall.functions.driver import handler

    explained = handler(_event("driver-explain"), _context("squall-driver"))
    assert "lineitem" in explained["text"] and explained["plan"]["world_size"] == 4
    tables = handler(_event("driver-tables"), _context("squall-driver"))["tables"]
    assert {t["name"] for t in tables} >= {"lineitem", "orders"}

    event = _event("driver-run")
    event["state"] = str(tmp_path)
    store = state_store(str(tmp_path))
    qid = event["query_id"]
    sql = "SELECT l_returnflag, count(*) AS n FROM lineitem GROUP BY 1 ORDER BY 1"
    store.put_json(records.request_key(qid), {"sql": sql, "workers": 4, "format": "arrow", "timeout_s": None})
    store.put_json(records.status_key(qid), {"query_id": qid, "status": "queued"})
    assert handler(event, _context("squall-driver")) == {"status": "succeeded"}
    status = store.get_json(records.status_key(qid))
    assert status["result"]["rows"] == 3
    assert status["stats"]["platform"] == "lambda-local" and status["stats"]["cost_usd"] > 0
