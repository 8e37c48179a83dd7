"""Admission on the deployed API (squall/service/lambda_admission.py): running and queued limits per user and in
all, kept in the S3 state store (moto's server), with the real API handler (``squall.functions.api.handler``) and
the real driver handler (``squall.functions.driver.handler``, whose end-of-query hook promotes queued queries).

The driver function's asynchronous invocations are recorded, not run, so queries stay "running" (holding their
slot) until a test runs their driver event. moto's conditional PUT and DELETE check and then write without a lock
between its request threads; S3's are atomic, and :func:`atomic_moto` makes moto's the same for the race test.
"""

from __future__ import annotations

import io
import json
import threading
import types
from collections import Counter
from pathlib import Path

import pytest

from squall.errors import OptionError
from squall.service import lambda_admission, records
from squall.service.backend import LambdaBackend, deployed_limits
from squall.service.errors import Busy
from squall.service.lambda_admission import AdmissionLimits, default_max_running
from squall.service.state import state_store

from ..s3server import moto_available, moto_s3

pytest.importorskip("aws_lambda_powertools")
pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))

EVENTS = Path(__file__).parent / "events"
BUCKET = "squall-lambda-admission"
STATE = f"s3://{BUCKET}/queries/"
QUICK = "SELECT count(*) AS n FROM region"
CONTEXT = types.SimpleNamespace(
    function_name="squall-driver", memory_limit_in_mb=1024, aws_request_id="r-1",
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:squall-driver",
)  # fmt: skip


class FakeLambda:
    """boto3's Lambda client as LambdaBackend uses it: asynchronous invocations of the driver are recorded."""

    def __init__(self) -> None:
        self.launched: list[dict] = []
        self.lock = threading.Lock()

    def invoke(self, FunctionName, InvocationType, Payload):
        assert FunctionName == "squall-driver" and InvocationType == "Event"
        with self.lock:
            self.launched.append(json.loads(Payload))
        return {"StatusCode": 202, "Payload": io.BytesIO(b"")}

    def ids(self) -> list[str]:
        with self.lock:
            return [p["query_id"] for p in self.launched]


@pytest.fixture
def deployed(monkeypatch, connections, sf001):
    """The API and driver handlers over moto's S3; ``deployed.api(limits)`` a fresh API function instance."""
    with moto_s3(BUCKET):
        for key, value in {"SQUALL_BUCKET": BUCKET, "SQUALL_QUERIES_PREFIX": "queries/",
                           "SQUALL_DRIVER_FUNCTION": "squall-driver", "POWERTOOLS_TRACE_DISABLED": "1"}.items():  # fmt: skip
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(lambda_admission, "PROMOTE_EVERY_S", 0.0)  # every status request promotes
        fake = FakeLambda()
        monkeypatch.setattr(LambdaBackend, "client", property(lambda self: fake))
        from squall.functions import api, driver
        from squall.service import deployment

        monkeypatch.setattr(driver, "connection_for", lambda w: connections.get(sf001, w or 2))
        monkeypatch.setattr(deployment, "_backend", None)
        store = state_store(STATE)
        store.delete("_admission")

        def new_api(settings: dict) -> object:
            monkeypatch.setenv("SQUALL_SERVICE", json.dumps(settings))
            monkeypatch.setattr(api, "_handler", None)
            monkeypatch.setattr(deployment, "_backend", None)  # the driver reads the same settings
            return api.handler

        def run_driver(query_id: str) -> dict:
            return driver.handler({"op": "run", "query_id": query_id, "state": STATE}, CONTEXT)

        yield types.SimpleNamespace(api=new_api, fake=fake, store=store, run_driver=run_driver)


def post(handler, sql: str, key: str) -> dict:
    e = json.loads((EVENTS / "apigw_rest_post_query.json").read_text())
    e["body"] = json.dumps({"sql": sql})
    e["headers"]["Idempotency-Key"] = e["multiValueHeaders"]["Idempotency-Key"][0] = key
    return handler(e, None)


def query_event(query_id: str, method: str = "GET") -> dict:
    e = json.loads((EVENTS / "apigw_rest_get_query.json").read_text())
    e["path"] = e["path"].replace("q0123456789abcdef0123456789abcdef", query_id)
    e["httpMethod"] = method
    return e


def get_status(handler, query_id: str) -> dict:
    response = handler(query_event(query_id), None)
    assert response["statusCode"] == 200, response
    return json.loads(response["body"])


def submit_as(backend: LambdaBackend, store, user: str, sql: str = QUICK, limits: dict | None = None) -> str:
    """What Service._start does: the request with its user (and the user's own limits from the users file)."""
    query_id = records.new_query_id()
    store.put_json(records.request_key(query_id), {"sql": sql, "workers": None, "format": None,
                                                   "timeout_s": None, "user": user, "limits": limits or {}})  # fmt: skip
    store.put_json(records.status_key(query_id), {"query_id": query_id, "status": "queued", "sql": sql})
    backend.submit(query_id, store)
    return query_id


def test_limits_in_all_queue_positions_429_and_promotion(deployed):
    api = deployed.api({"max_running": 2, "max_queued": 2})
    accepted = [post(api, QUICK, f"all-{i}") for i in range(4)]
    assert [r["statusCode"] for r in accepted] == [202] * 4
    ids = [json.loads(r["body"])["query_id"] for r in accepted]
    assert deployed.fake.ids() == ids[:2]  # two run, two wait
    first = get_status(api, ids[0])
    # admitted; its driver has not started yet
    assert first["status"] == "queued" and first.get("queue") is None
    waiting = [get_status(api, q) for q in ids[2:]]
    assert [w["queue"]["position"] for w in waiting] == [1, 2]
    assert [w["queue"]["ahead"] for w in waiting] == [0, 1] and waiting[0]["queue"]["group"] == "default"
    assert all(w["queue"]["estimated_wait_s"] >= 0 for w in waiting)

    full = post(api, QUICK, "all-full")
    assert full["statusCode"] == 429 and int(full["multiValueHeaders"]["Retry-After"][0]) >= 1
    detail = json.loads(full["body"])["detail"]
    assert "max_queued = 2" in detail and "\n" not in detail

    assert deployed.run_driver(ids[0]) == {"status": "succeeded"}  # its end hook starts the oldest queued one
    assert deployed.fake.ids() == [*ids[:2], ids[2]]
    assert get_status(api, ids[3])["queue"]["position"] == 1
    for query_id in (ids[1], ids[2]):
        deployed.run_driver(query_id)
    assert deployed.fake.ids() == ids
    deployed.run_driver(ids[3])
    docs = [get_status(api, q) for q in ids]
    assert [d["status"] for d in docs] == ["succeeded"] * 4 and docs[3]["stats"]["rows"] == 1
    assert (
        deployed.store.entries("_admission/running") == []
        and deployed.store.entries("_admission/queue") == []
    )


def test_limits_per_user(deployed):
    deployed.api({})
    limits = AdmissionLimits(max_running=3, max_queued=10, user_running=1, user_queued=1)
    backend = LambdaBackend("squall-driver", store=deployed.store, limits=limits)
    store = deployed.store
    a1 = submit_as(backend, store, "alice")
    a2 = submit_as(backend, store, "alice")  # alice runs one: this one waits
    with pytest.raises(Busy, match=r"user 'alice' has 1 queries waiting \(user_queued = 1\)") as refused:
        submit_as(backend, store, "alice")
    assert refused.value.retry_after_s >= 1
    b1 = submit_as(backend, store, "bob")  # not behind alice's queued query
    assert deployed.fake.ids() == [a1, b1]
    info = backend.queue_info(a2)
    assert info is not None and (info["position"], info["ahead"]) == (1, 0)

    # the driver's hook reads the same settings from the environment
    deployed.api({"max_running": 3, "user_running": 1, "user_queued": 1})
    deployed.run_driver(a1)
    assert deployed.fake.ids() == [a1, b1, a2]
    assert backend.queue_info(a2) is None
    assert {e.name for e in store.entries("_admission/running")} == {"0", "1"}


def test_a_users_own_limits_from_the_users_file_replace_the_deployments(deployed):
    deployed.api({})
    limits = AdmissionLimits(max_running=4, max_queued=10, user_running=1, user_queued=5)
    backend = LambdaBackend("squall-driver", store=deployed.store, limits=limits)
    store, own = deployed.store, {"max_running": 2, "max_queued": 0}
    c1, c2 = (submit_as(backend, store, "carol", limits=own) for _ in range(2))  # two at once (1 for others)
    with pytest.raises(
        Busy, match=r"user 'carol' has 0 queries waiting \(max_queued in the users file = 0\)"
    ):
        submit_as(backend, store, "carol", limits=own)
    d1, d2 = submit_as(backend, store, "dave"), submit_as(backend, store, "dave")  # the deployment's: 1 runs
    assert deployed.fake.ids() == [c1, c2, d1]
    assert backend.queue_info(d2) is not None


@pytest.mark.parametrize("limit", ["max_running", "user_running"])
def test_cancel_a_queued_query_and_a_lost_promotion_heals(deployed, monkeypatch, connections, sf001, limit):
    """The first query runs, the others wait (at ``max_running`` = 1, or at ``user_running`` = 1 with room in all);
    the first one's end hook is lost, and a status request gives its slots back."""
    settings = {"max_running": 1} if limit == "max_running" else {"max_running": 3, "user_running": 1}
    api = deployed.api(settings)
    ids = [json.loads(post(api, QUICK, f"heal-{limit}-{i}")["body"])["query_id"] for i in range(3)]
    assert deployed.fake.ids() == ids[:1]
    response = api(query_event(ids[1], "DELETE"), None)
    assert response["statusCode"] == 202 and json.loads(response["body"])["status"] == "cancelled"
    assert deployed.store.get_json(records.status_key(ids[1]))["status"] == "cancelled"

    from squall.service.runner import handle_driver_event  # a driver without the end hook

    event = {"op": "run", "query_id": ids[0], "state": STATE}
    assert handle_driver_event(event, lambda w: connections.get(sf001, w or 2)) == {"status": "succeeded"}
    assert get_status(api, ids[2])["queue"]["position"] == 1  # slots younger than CHECK_AFTER_S: not checked
    monkeypatch.setattr(lambda_admission, "CHECK_AFTER_S", 0.0)
    doc = get_status(api, ids[2])  # a status request heals: the slots of the ended query are given back
    assert doc["status"] == "queued" and doc.get("queue") is None
    assert deployed.fake.ids() == [ids[0], ids[2]]  # the cancelled one never starts
    assert len(deployed.store.entries("_admission/running")) == 1


@pytest.fixture
def atomic_moto(monkeypatch):
    """moto's S3 PutObject and DeleteObject as atomic as S3's (its conditions are checked, then written)."""
    from moto.s3.responses import S3Response

    lock = threading.RLock()
    for name in ("put_object", "delete_object"):
        original = getattr(S3Response, name)

        def locked(self, _original=original):
            with lock:
                return _original(self)

        monkeypatch.setattr(S3Response, name, locked)


def test_two_api_instances_racing_to_promote_start_each_query_once(deployed, atomic_moto):
    deployed.api({})
    limits = AdmissionLimits(max_running=3, max_queued=50)
    one, two = (LambdaBackend("squall-driver", store=state_store(STATE), limits=limits) for _ in range(2))
    store = deployed.store
    running = [submit_as(one, store, "anonymous") for _ in range(3)]
    queued = [submit_as(two, store, "anonymous") for _ in range(9)]
    assert deployed.fake.ids() == running
    for _round in range(3):
        for query_id in running:  # they end (their drivers' hooks are raced below)
            doc = store.get_json(records.status_key(query_id))
            doc.update(status="succeeded", started_at=1.0, finished_at=2.0)
            store.put_json(records.status_key(query_id), doc)
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def instance(backend: LambdaBackend, ended: list[str], barrier=barrier, errors=errors) -> None:
            try:
                barrier.wait()
                for query_id in ended:
                    backend.query_ended(query_id, backend.store)
                backend.admission(backend.store).promote()
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=instance, args=(b, running)) for b in (one, two)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        started = deployed.fake.ids()
        assert not [q for q, n in Counter(started).items() if n > 1], "a query was started twice"
        running = started[-3:]
        assert len(started) == 3 * (_round + 2) and set(running) <= set(queued)
        assert len(store.entries("_admission/running")) == 3
    assert sorted(deployed.fake.ids()[3:]) == sorted(queued) and store.entries("_admission/queue") == []


def test_deployed_limits_from_the_environment():
    assert default_max_running(1000, 64) == 15 and default_max_running(10, 64) == 1
    limits = deployed_limits(64, {"SQUALL_CONCURRENCY": "1000"})
    assert limits == AdmissionLimits(15, 64, None, None)
    given = deployed_limits(
        8, {"SQUALL_SERVICE": '{"max_running": 4, "user_running": 1, "user_queued": "off"}'}
    )
    assert given == AdmissionLimits(4, 64, 1, None)
    assert deployed_limits(4, {}).max_running == 200  # an account's default concurrency: 1000 // 5
    with pytest.raises(OptionError, match="SQUALL_SERVICE must be"):
        deployed_limits(4, {"SQUALL_SERVICE": "{"})
    with pytest.raises(OptionError, match=r"SQUALL_SERVICE \[service\]: max_queued must be at least 0"):
        deployed_limits(4, {"SQUALL_SERVICE": '{"max_queued": -1}'})
    with pytest.raises(OptionError, match="SQUALL_CONCURRENCY must be"):
        deployed_limits(4, {"SQUALL_CONCURRENCY": "many"})


def test_a_driver_gone_for_longer_than_lambda_allows_fails_its_query(deployed, monkeypatch):
    store = deployed.store
    launched: list[str] = []
    admission = lambda_admission.Admission(store, AdmissionLimits(1, 5), launched.append, stale_s=0.0)
    backend = types.SimpleNamespace(store=store, submit=lambda qid, st: admission.submit(qid, "anonymous"))
    first, second = submit_as(backend, store, "anonymous"), submit_as(backend, store, "anonymous")
    assert launched == [first]
    doc = store.get_json(records.status_key(first))
    store.put_json(
        records.status_key(first), {**doc, "status": "running", "started_at": doc.get("created_at", 0)}
    )
    monkeypatch.setattr(lambda_admission, "CHECK_AFTER_S", 0.0)
    assert admission.promote() == [second] and launched == [first, second]
    error = store.get_json(records.status_key(first))["error"]
    assert error["error"] == "DriverStopped" and "Lambda timeout or crash" in error["detail"]


def test_status_requests_promote_at_most_once_a_second_per_instance(deployed, monkeypatch):
    monkeypatch.setattr(lambda_admission, "PROMOTE_EVERY_S", 1.0)
    store, now, launched = deployed.store, [1000.0], []
    admission = lambda_admission.Admission(
        store, AdmissionLimits(1, 5), launched.append, clock=lambda: now[0]
    )
    backend = types.SimpleNamespace(store=store, submit=lambda qid, st: admission.submit(qid, "anonymous"))
    first, second = submit_as(backend, store, "anonymous"), submit_as(backend, store, "anonymous")
    assert admission.queue_info(second)["position"] == 1  # promoted: nothing could start
    store.delete("_admission/running/0")  # the first one's slot is given back behind this instance's back
    assert admission.queue_info(second)["position"] == 1 and launched == [first]  # no promotion yet
    now[0] += 1.0
    assert admission.queue_info(second) is None and launched == [first, second]


def test_a_driver_the_api_may_not_invoke_fails_the_query_in_one_line(deployed, monkeypatch):
    from botocore.exceptions import ClientError

    class Denying:
        def invoke(self, **_kwargs):
            error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}
            raise ClientError(error, "Invoke")

    monkeypatch.setenv("SQUALL_ROLE", "api")
    monkeypatch.setattr(LambdaBackend, "client", property(lambda self: Denying()))
    api = deployed.api({"max_running": 2})
    response = post(api, QUICK, "denied")
    query_id = json.loads(response["body"])["query_id"]
    doc = get_status(api, query_id)
    assert doc["status"] == "failed" and doc["error"] == {
        "error": "DriverUnavailable",
        "detail": "the driver function could not be started: "
        "access denied: lambda function squall-driver (lambda:InvokeFunction) for the api's role",
    }
    assert deployed.store.entries("_admission/running") == []  # its slot is free again
