"""Users, roles and per-user limits on a real ``squall serve`` (``--users FILE``) and on the Lambda API handler.

Two users and an admin: each user sees, fetches, pages and cancels only their own queries (another user's id is
a 404 exactly like an unknown id), history and ``?status=`` list only theirs, the admin sees all; an unknown
token is 401; a table outside a user's catalogs is a 403 before anything runs; a user's bytes-scanned limit is a
400 before running and their result-rows limit fails the query; their max_running/max_queued go through the
scheduler (429 naming them); a bad users file is one line and exit 1; on the Lambda handler the IAM principal of
the request context is the user.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time

import pytest

from squall.service import records
from squall.service.runner import handle_driver_event
from squall.service.state import state_store

from .conftest import Server
from .test_lambda_api import BUCKET, event, lambda_api, with_query_id  # noqa: F401 - lambda_api: a fixture

requests = pytest.importorskip("requests")

TOKENS = {"alice": "alice-secret-token-1", "bob": "bob-secret-token-2", "root": "root-secret-token-3",
          "carol": "carol-secret-token-4", "dave": "dave-secret-token-5", "erin": "erin-secret-token-6"}  # fmt: skip


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


USERS_TOML = f"""
[users.alice]
token_sha256 = "{sha(TOKENS["alice"])}"

[users.bob]
token_sha256 = "{sha(TOKENS["bob"])}"
role = "user"
catalogs = ["nation", "region"]

[users.root]
token_sha256 = "{sha(TOKENS["root"])}"
role = "admin"

[users.carol]
token_sha256 = "{sha(TOKENS["carol"])}"
max_bytes_scanned = "20KB"
max_result_rows = 10

[users.dave]
token_sha256 = "{sha(TOKENS["dave"])}"
max_running = 1
max_queued = 1

[users.erin]
token_sha256 = "{sha(TOKENS["erin"])}"
max_run_time = "1s"
"""


def call(server, who: str | None, method: str, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {TOKENS.get(who, who)}"} if who else {}
    return requests.request(method, server.url + path, headers=headers, timeout=60, **kwargs)


def submit(server, who: str, sql: str, expect: int = 202) -> dict:
    response = call(server, who, "POST", "/v1/queries", json={"sql": sql})
    assert response.status_code == expect, response.text
    return response.json()


def wait(server, who: str, query_id: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = call(server, who, "GET", f"/v1/queries/{query_id}").json()
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            return doc
        time.sleep(0.05)
    raise AssertionError(f"{query_id} did not finish")


@pytest.fixture(scope="module")
def users_server(sf001, tmp_path_factory):
    folder = tmp_path_factory.mktemp("users")
    (folder / "users.toml").write_text(USERS_TOML)
    srv = Server(["--data", str(sf001), "--workers", "1", "--users", str(folder / "users.toml"),
                  "--audit-log", str(folder / "audit.jsonl"), "--access-log"], folder / "server.log")  # fmt: skip
    srv.audit = folder / "audit.jsonl"  # type: ignore[attr-defined]
    yield srv
    code = srv.stop()
    assert code == 0 and "Traceback" not in srv.output(), srv.output()


def test_each_user_sees_only_their_own_queries_and_the_admin_all(users_server):
    srv = users_server
    mine = submit(srv, "alice", "SELECT n_name FROM nation ORDER BY n_name LIMIT 3")["query_id"]
    theirs = submit(srv, "bob", "SELECT count(*) AS n FROM region")["query_id"]
    assert wait(srv, "alice", mine)["status"] == "succeeded"
    assert wait(srv, "bob", theirs)["status"] == "succeeded"
    unknown = "q" + "0" * 32
    for who, other in (("alice", theirs), ("bob", mine)):
        for method, path in (("GET", "/v1/queries/{}"), ("GET", "/v1/queries/{}/result?format=json"),
                             ("GET", "/v1/queries/{}/result?format=csv&offset=1&limit=1"),
                             ("DELETE", "/v1/queries/{}")):  # fmt: skip
            foreign = call(srv, who, method, path.format(other))
            missing = call(srv, who, method, path.format(unknown))
            assert foreign.status_code == missing.status_code == 404, (foreign.text, missing.text)
            assert foreign.json()["detail"] == missing.json()["detail"].replace(unknown, other)
    page = call(srv, "alice", "GET", f"/v1/queries/{mine}/result?format=json&offset=1&limit=1")
    assert page.status_code == 200 and page.json() == [{"n_name": "ARGENTINA"}]
    assert call(srv, "bob", "GET", f"/v1/queries/{theirs}").json()["user"] == "bob"

    def listed(who: str, query: str = "") -> set[str]:
        doc = call(srv, who, "GET", "/v1/queries" + query).json()
        return {q["query_id"] for q in doc["queries"]}

    assert mine in listed("alice") and theirs not in listed("alice")
    assert theirs in listed("bob", "?status=succeeded") and mine not in listed("bob", "?status=succeeded")
    assert {mine, theirs} <= listed("root") and {mine, theirs} <= listed("root", "?status=succeeded")
    users = {q["query_id"]: q["user"] for q in call(srv, "root", "GET", "/v1/queries").json()["queries"]}
    assert users[mine] == "alice" and users[theirs] == "bob"
    assert call(srv, "root", "GET", f"/v1/queries/{theirs}/result?format=json").json() == [{"n": 5}]
    # an admin cancels anyone's query (this one already ended: a conflict, not a 404)
    assert call(srv, "root", "DELETE", f"/v1/queries/{mine}").status_code == 409

    who = call(srv, "bob", "GET", "/v1/whoami").json()
    assert who == {"user": "bob", "role": "user", "limits": {}, "catalogs": ["nation", "region"]}
    assert call(srv, "root", "GET", "/v1/whoami").json()["role"] == "admin"
    assert "token" not in json.dumps(call(srv, "carol", "GET", "/v1/whoami").json())


def test_unknown_or_missing_token_is_401(users_server):
    for who in ("not-a-user-token", None):
        response = call(users_server, who, "GET", "/v1/queries")
        assert response.status_code == 401 and response.json()["error"] == "Unauthorized"
    assert call(users_server, None, "GET", "/healthz").status_code == 200


def test_a_table_outside_the_users_catalogs_is_refused_before_running(users_server):
    srv = users_server
    response = call(srv, "bob", "POST", "/v1/queries",
                    json={"sql": "SELECT count(*) FROM customer JOIN nation ON c_nationkey = n_nationkey"})  # fmt: skip
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["error"] == "PermissionDenied" and "customer" in body["detail"] and "bob" in body["detail"]
    explain = call(srv, "bob", "POST", "/v1/explain", json={"sql": "SELECT * FROM orders"})
    assert explain.status_code == 403 and "orders" in explain.json()["detail"]
    names = {t["name"] for t in call(srv, "bob", "GET", "/v1/tables").json()["tables"]}
    assert names == {"nation", "region"}
    assert "customer" in {t["name"] for t in call(srv, "alice", "GET", "/v1/tables").json()["tables"]}
    assert submit(srv, "alice", "SELECT count(*) FROM customer")["status"] in (
        "queued",
        "running",
        "succeeded",
    )


def test_per_user_limits_name_the_limit(users_server):
    srv = users_server
    refused = call(srv, "carol", "POST", "/v1/queries", json={"sql": "SELECT sum(l_quantity) FROM lineitem"})
    assert refused.status_code == 400, refused.text
    detail = refused.json()["detail"]
    assert refused.json()["error"] == "LimitExceeded" and "carol" in detail and "max_bytes_scanned" in detail
    assert "19.5 KiB" in detail  # 20KB
    # explain shows what it would read (the limit applies to running it)
    assert call(srv, "carol", "POST", "/v1/explain", json={"sql": "SELECT sum(l_quantity) FROM lineitem"}).ok
    # the same query is fine for alice (the server's limits are wider)
    assert submit(srv, "alice", "SELECT sum(l_quantity) FROM lineitem")["query_id"]
    # a result larger than carol's max_result_rows: found while running, the query fails naming it
    query_id = submit(srv, "carol", "SELECT n_name FROM nation")["query_id"]
    doc = wait(srv, "carol", query_id)
    assert doc["status"] == "failed" and doc["error"]["error"] == "LimitExceeded"
    assert "max_result_rows 10" in doc["error"]["detail"] and "25 rows" in doc["error"]["detail"]
    small = submit(srv, "carol", "SELECT r_name FROM region")["query_id"]
    assert wait(srv, "carol", small)["status"] == "succeeded"


BAD_USERS = {
    '[users.eve]\nrole = "root"\ntoken_sha256 = "' + "a" * 64 + '"\n': "user eve: role must be user or admin",
    '[users.eve]\ntoken_sha256 = "' + "a" * 64 + '"\nmax_qeued = 3\n': "user eve: unknown key 'max_qeued'",
    '[users.eve]\ntoken_sha256 = "' + "a" * 64 + '"\nmax_bytes_scanned = "ten"\n': "user eve: max_bytes_scanned",
    '[users.eve]\ntoken_sha256 = "secret"\n': "user eve: token_sha256 must be 64 hex digits",
    '[users.eve]\nrole = "user"\n': "user eve: needs token_sha256",
    '[users.eve]\ntoken_sha256 = "' + "a" * 64 + '"\ncatalogs = "lake"\n': "",  # one name is fine
    '[users.eve]\ntoken_sha256 = "' + "a" * 64 + '"\ncatalogs = [1]\n': "user eve: catalogs must be a list",
    "[users.eve\n": "not TOML",
}  # fmt: skip


def test_bad_users_file_is_one_line_naming_file_user_and_key(tmp_path):
    from squall.errors import OptionError
    from squall.service.users import Users

    for i, (text, expected) in enumerate(BAD_USERS.items()):
        path = tmp_path / f"users{i}.toml"
        path.write_text(text)
        if not expected:
            assert Users.from_file(str(path)).users["eve"].catalogs == ("lake",)
            continue
        with pytest.raises(OptionError) as err:
            Users.from_file(str(path))
        message = str(err.value)
        assert "\n" not in message and str(path) in message and expected in message, message


def test_squall_serve_with_a_bad_users_file_exits_1(sf001, tmp_path):
    path = tmp_path / "users.toml"
    path.write_text('[users.eve]\ntoken_sha256 = "' + "a" * 64 + '"\nmax_running = 0\n')
    proc = subprocess.run(
        [sys.executable, "-m", "squall.cli", "serve", "--data", str(sf001), "--users", str(path), "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: users file ") and str(path) in lines[0], lines[0]
    assert "user eve: max_running must be a whole number of at least 1" in lines[0]


@pytest.fixture(scope="module")
def slow_users_server(sf001, tmp_path_factory):
    folder = tmp_path_factory.mktemp("users-slow")
    (folder / "users.toml").write_text(USERS_TOML)
    srv = Server(["--data", str(sf001), "--workers", "1", "--users", str(folder / "users.toml")],
                 folder / "server.log", env={"SQUALL_FAULTS": "delay:rank=0:seconds=1.5:stage=1"})  # fmt: skip
    yield srv
    srv.stop()


def test_users_running_and_queued_limits_go_through_the_scheduler(slow_users_server):
    srv = slow_users_server
    sql = "SELECT count(*) FROM nation"
    first = submit(srv, "dave", sql)["query_id"]
    second = submit(srv, "dave", sql)["query_id"]  # dave may run 1: this one waits (max_queued 1)
    refused = call(srv, "dave", "POST", "/v1/queries", json={"sql": sql})
    assert refused.status_code == 429 and "Retry-After" in refused.headers, refused.text
    detail = refused.json()["detail"]
    assert "dave" in detail and "max_queued 1" in detail and "max_running 1" in detail
    # alice is not held back by dave's limits
    other = submit(srv, "alice", sql)["query_id"]
    assert call(srv, "dave", "GET", f"/v1/queries/{second}").json()["status"] == "queued"
    assert call(srv, "alice", "GET", f"/v1/queries/{other}").json()["status"] in ("running", "succeeded")
    for query_id in (first, second):
        assert wait(srv, "dave", query_id)["status"] == "succeeded"
    assert wait(srv, "alice", other)["status"] == "succeeded"


def test_a_users_max_run_time_stops_the_query(slow_users_server):
    query_id = submit(slow_users_server, "erin", "SELECT count(*) FROM nation")["query_id"]
    doc = wait(slow_users_server, "erin", query_id)
    assert doc["status"] == "failed" and doc["error"]["error"] == "QueryCancelled", doc
    assert "user erin's maximum run time (max_run_time 1 s)" in doc["error"]["detail"]


def test_scheduler_applies_a_users_own_limits_over_every_group():
    from squall.service.scheduler import DEFAULT, FAST, GroupSpec, QueueFull, Scheduler, SchedulerConfig

    started: list[str] = []
    config = SchedulerConfig(8, 8, (GroupSpec(FAST, 8, 8, max_scan_bytes=100), GroupSpec(DEFAULT, 8, 8)))
    scheduler = Scheduler(config, start=lambda t: started.append(t.query_id))
    scheduler.submit("a1", user="a", scan_bytes=10, user_limits=(1, 1))
    scheduler.submit("a2", user="a", scan_bytes=1000, user_limits=(1, 1))  # another group: still waits
    with pytest.raises(QueueFull, match="max_queued 1"):
        scheduler.submit("a3", user="a", scan_bytes=10, user_limits=(1, 1))
    scheduler.submit("b1", user="b", scan_bytes=10)
    assert started == ["a1", "b1"]
    scheduler.finish("a1")
    assert started == ["a1", "b1", "a2"]


# --- the deployed API: the IAM principal is the user ---------------------------------------------------------

ANALYST = "arn:aws:iam::123456789012:user/analyst"  # the sample events' caller


def as_principal(e: dict, arn: str) -> dict:
    e = json.loads(json.dumps(e))
    e["requestContext"]["identity"]["userArn"] = arn
    return e


def test_lambda_handler_maps_the_iam_principal_to_the_user(request, monkeypatch, capsys, connections, sf001):
    users = {"users": {"analyst": {"iam_principal": ANALYST, "catalogs": ["nation"]},
                       "other": {"iam_principal": "arn:aws:iam::123456789012:user/other"},
                       "ops": {"iam_principal": ["arn:aws:iam::123456789012:role/ops"], "role": "admin"}}}  # fmt: skip
    monkeypatch.setenv("SQUALL_USERS", json.dumps(users))
    api = request.getfixturevalue("lambda_api")  # the API handler, its service made on the first call
    accepted = api.handler(event("post_query"), None)
    assert accepted["statusCode"] == 202, accepted
    query_id = json.loads(accepted["body"])["query_id"]
    doc = json.loads(api.handler(with_query_id(event("get_query"), query_id), None)["body"])
    assert doc["user"] == "analyst" and doc["status"] == "succeeded"

    other = as_principal(with_query_id(event("get_query"), query_id), "arn:aws:iam::123456789012:user/other")
    assert api.handler(other, None)["statusCode"] == 404
    session = "arn:aws:sts::123456789012:assumed-role/ops/alice-session"  # a session of the admin role
    ops = api.handler(as_principal(with_query_id(event("get_query"), query_id), session), None)
    assert ops["statusCode"] == 200 and json.loads(ops["body"])["user"] == "analyst"
    stranger = as_principal(event("get_query", path="/v1/whoami"), "arn:aws:iam::123456789012:user/stranger")
    denied = api.handler(stranger, None)
    assert denied["statusCode"] == 403 and "stranger" in json.loads(denied["body"])["detail"]
    whoami = json.loads(api.handler(event("get_query", path="/v1/whoami"), None)["body"])
    assert whoami["user"] == "analyst" and whoami["catalogs"] == ["nation"]

    # a table outside analyst's catalogs: the API refuses the SQL that names it (it does not plan) ...
    post = event("post_query", body=json.dumps({"sql": "SELECT count(*) FROM region"}))
    post["headers"]["Idempotency-Key"] = post["multiValueHeaders"]["Idempotency-Key"][0] = "region-1"
    refused = api.handler(post, None)
    assert refused["statusCode"] == 403 and "region" in json.loads(refused["body"])["detail"]
    # ... and the driver refuses it from the plan before running (a request stored with the user's catalogs)
    store = state_store(f"s3://{BUCKET}/queries/")
    refused_id = "q" + "f" * 32
    store.put_json(records.request_key(refused_id), {"sql": "SELECT count(*) FROM region", "user": "analyst",
                                                     "catalogs": ["nation"], "client": "203.0.113.7"})  # fmt: skip
    store.put_json(records.status_key(refused_id), {"query_id": refused_id, "status": "queued"})
    out = handle_driver_event({"op": "run", "query_id": refused_id, "state": store.url},
                              lambda w: connections.get(sf001, w or 2))  # fmt: skip
    doc = store.get_json(records.status_key(refused_id))
    assert out == {"status": "failed"} and doc["error"]["error"] == "PermissionDenied"
    assert "region" in doc["error"]["detail"]
    audit = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    ends = {(a["query_id"], a["event"]): a for a in audit}
    assert (
        ends[(query_id, "submit")]["user"] == "analyst" and ends[(query_id, "end")]["status"] == "succeeded"
    )
    assert (
        ends[(query_id, "submit")]["client"] == "203.0.113.7"
        and ends[(refused_id, "end")]["status"] == "failed"
    )


def test_authenticate_rest_and_http_api_principals_tokens_and_no_users():
    from squall.service.api import authenticate
    from squall.service.users import User, Users, sha256_hex

    users = Users([User("ana", iam_principals=(ANALYST,)), User("tok", token_sha256=sha256_hex("t0k"))])
    rest = {"requestContext": {"identity": {"userArn": ANALYST}}}
    http = {"requestContext": {"authorizer": {"iam": {"userArn": ANALYST}}}}
    assert authenticate(users, rest).name == authenticate(users, http).name == "ana"  # type: ignore[union-attr]
    stranger = authenticate(users, {"requestContext": {"identity": {"userArn": ANALYST + "x"}}})
    assert isinstance(stranger, dict) and stranger["statusCode"] == 403
    bearer = {"headers": {"Authorization": "Bearer t0k"}}
    assert authenticate(users, bearer).name == "tok"  # type: ignore[union-attr]
    wrong = authenticate(users, {"headers": {"Authorization": "Bearer nope"}})
    assert isinstance(wrong, dict) and wrong["statusCode"] == 401 and "nope" not in wrong["body"]
    # no users file: every IAM principal is a user of its own (an admin); no principal: anonymous
    assert authenticate(Users(), rest).name == ANALYST  # type: ignore[union-attr]
    assert authenticate(Users(), {}).name == "anonymous"  # type: ignore[union-attr]
    # --token beside a users file: one more user, an admin called admin
    both = users.with_token("t0k2")
    assert authenticate(both, {"headers": {"Authorization": "Bearer t0k2"}}).role == "admin"  # type: ignore[union-attr]
    with pytest.raises(Exception, match="already has a user called admin"):
        Users([User("admin", token_sha256=sha256_hex("x"))]).with_token("y")


def test_sql_tables_names_the_tables_of_from_clauses_not_ctes():
    from squall.service.users import User, sql_tables

    sql = "WITH x AS (SELECT * FROM region) SELECT * FROM x, nation JOIN lake.ns.t ON true"
    assert sorted(sql_tables(sql)) == ["lake.ns.t", "nation", "region"]
    assert sql_tables("SELECT * FROM range(3)") == [] and sql_tables('SELECT * FROM "t$snapshots"') == ["t"]
    user = User("u", token_sha256="0" * 64, catalogs=("data",))
    assert user.may_read("nation") and not user.may_read("lake.ns.t")
    assert User("v", catalogs=("lake", "nation")).may_read("lake.ns.t")


def test_nobody_changes_a_table_they_may_not_read():
    from squall.errors import PermissionDenied
    from squall.service.users import User, check_write_target

    bob = User("bob", catalogs=("nation", "lake"))
    for sql in ("DROP TABLE customer", "INSERT INTO customer SELECT * FROM customer",
                "CREATE TABLE copy_of_nation AS SELECT * FROM nation"):  # fmt: skip
        with pytest.raises(
            PermissionDenied, match=r"^user bob may not read table (customer|copy_of_nation) "
        ):
            check_write_target(bob, sql)
    check_write_target(bob, "INSERT INTO lake.ns.t SELECT 1")  # a table of a catalog he may read
    check_write_target(bob, "COPY (SELECT 1) TO 'out.parquet'")  # a path: the writable locations decide
    check_write_target(bob, "SELECT * FROM customer")  # not a write (its tables are checked from the plan)
    check_write_target(User("alice"), "DROP TABLE customer")  # no catalogs: every table
