"""The audit trail of a real ``squall serve --users FILE --audit-log FILE --access-log``: one JSON line when a
query is submitted and one when it ends (succeeded, failed, cancelled), a ``refused`` line for a submission
refused before it was stored, the access log with time and user — and no token anywhere in either log."""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest

from .conftest import TOKEN, Server

requests = pytest.importorskip("requests")

TOKENS = {"alice": "alice-audit-token-1", "bob": "bob-audit-token-2"}
USERS = "".join(
    f'[users.{name}]\ntoken_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
    + ('max_result_rows = 1\ncatalogs = ["nation"]\n' if name == "bob" else "")
    for name, token in TOKENS.items()
)
FIELDS = {"time", "event", "user", "query_id", "sql", "status", "rows", "bytes_scanned", "cost_usd", "client"}


@pytest.fixture(scope="module")
def audited(sf001, tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit")
    (folder / "users.toml").write_text(USERS)
    srv = Server(["--data", str(sf001), "--workers", "1", "--users", str(folder / "users.toml"),
                  "--audit-log", str(folder / "audit.jsonl"), "--access-log"],
                 folder / "server.log", env={"SQUALL_FAULTS": "delay:rank=0:seconds=1:stage=1"})  # fmt: skip
    srv.audit = folder / "audit.jsonl"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def call(srv, who: str, method: str, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"}
    return requests.request(method, srv.url + path, headers=headers, timeout=60, **kwargs)


def audit_lines(srv, wanted: int) -> list[dict]:
    """The audit file's lines, once it has at least ``wanted`` (the end line follows the final status)."""
    deadline = time.monotonic() + 30
    while True:
        lines = (
            [json.loads(line) for line in srv.audit.read_text().splitlines()] if srv.audit.exists() else []
        )
        if len(lines) >= wanted or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def finish(srv, who: str, query_id: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = call(srv, who, "GET", f"/v1/queries/{query_id}").json()
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            return doc
        time.sleep(0.05)
    raise AssertionError(f"{query_id} did not finish")


def test_every_query_has_a_submit_and_an_end_line(audited):
    srv = audited
    ok = call(srv, "alice", "POST", "/v1/queries", json={"sql": "SELECT count(*) AS n FROM nation"}).json()
    cancelled = call(srv, "alice", "POST", "/v1/queries", json={"sql": "SELECT count(*) FROM region"}).json()
    assert call(srv, "alice", "DELETE", f"/v1/queries/{cancelled['query_id']}").status_code == 202
    failed = call(srv, "bob", "POST", "/v1/queries", json={"sql": "SELECT n_name FROM nation"}).json()
    refused = call(srv, "bob", "POST", "/v1/queries", json={"sql": "SELECT * FROM region"})
    assert refused.status_code == 403
    statuses = {q["query_id"]: finish(srv, who, q["query_id"])["status"]
                for who, q in (("alice", ok), ("alice", cancelled), ("bob", failed))}  # fmt: skip
    assert list(statuses.values()) == ["succeeded", "cancelled", "failed"]

    lines = audit_lines(srv, 7)
    assert all(set(line) >= FIELDS for line in lines), lines
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]) for line in lines)
    by = {(line["query_id"], line["event"]): line for line in lines}
    for query_id, status in statuses.items():
        submit, end = by[(query_id, "submit")], by[(query_id, "end")]
        assert submit["status"] == "queued" and end["status"] == status
        assert submit["client"] == end["client"] == "127.0.0.1" and submit["sql"] == end["sql"]
    assert by[(ok["query_id"], "end")]["user"] == "alice" and by[(ok["query_id"], "end")]["rows"] == 1
    assert by[(ok["query_id"], "end")]["bytes_scanned"] > 0
    assert by[(failed["query_id"], "end")]["user"] == "bob"
    assert "max_result_rows 1" in by[(failed["query_id"], "end")]["error"]["detail"]
    denied = [line for line in lines if line["event"] == "refused"]
    assert len(denied) == 1 and denied[0]["user"] == "bob" and denied[0]["query_id"] is None
    assert denied[0]["error"]["error"] == "PermissionDenied" and denied[0]["sql"] == "SELECT * FROM region"

    access = [line for line in srv.output().splitlines() if '"POST /v1/queries' in line]
    assert access and all(
        re.match(r"^\d{4}-\d\d-\d\dT\S+Z 127\.0\.0\.1 (alice|bob) - ", line) for line in access
    )
    requests.get(srv.url + "/v1/queries", headers={"Authorization": "Bearer wrong-token-xyz"}, timeout=30)
    time.sleep(0.2)
    logs = srv.audit.read_text() + srv.output()
    for secret in (*TOKENS.values(), "wrong-token-xyz"):
        assert secret not in logs
    for name in TOKENS:  # the users file's hashes are no secrets, but they stay out of the logs too
        assert hashlib.sha256(TOKENS[name].encode()).hexdigest() not in logs


def test_token_shorthand_is_one_admin_user(server):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    who = requests.get(server.url + "/v1/whoami", headers=headers, timeout=30).json()
    assert who == {"user": "admin", "role": "admin", "limits": {}, "catalogs": None}
