"""The Python SDK and the DB-API, embedded and remote, checked against DuckDB on TPC-H SF0.01.

Remote runs go to a real ``squall serve`` subprocess (the ``server`` fixture). Queries the engine does not
support yet raise NotSupportedError (remote: the same class, with the server's message) and are skipped.
"""

from __future__ import annotations

import http.server
import json
import threading

import pyarrow as pa
import pytest

import squall
from squall import dbapi, tpch
from squall.client import AuthenticationError, RemoteConnection, RemoteError, RemoteUserError
from squall.driver.platforms.base import Progress
from squall.plan import Plan
from squall.testing import assert_same_result

from .conftest import TOKEN

MODES = ("sdk-embedded", "sdk-remote", "dbapi-embedded", "dbapi-remote")


@pytest.fixture(scope="module")
def remote(server):
    with squall.connect(server.url, token=TOKEN) as con:
        yield con


@pytest.fixture(scope="module")
def db_embedded(sf001):
    con = dbapi.connect(str(sf001), workers=2)
    yield con
    con.close()


@pytest.fixture(scope="module")
def db_remote(server):
    con = dbapi.connect(endpoint=server.url, token=TOKEN)
    yield con
    con.close()


def _description_type(d: tuple) -> pa.DataType:
    """The Arrow type a DB-API description says (its ``type_code`` is the type as text)."""
    _name, type_code, _, _, precision, scale, _ = d
    if str(type_code).startswith("decimal"):
        return pa.decimal128(precision, scale)
    return pa.type_for_alias(str(type_code))


def _rows_to_table(cursor: dbapi.Cursor) -> pa.Table:
    """The cursor's rows as a table typed as its description says (so the comparator checks the types)."""
    names = [d[0] for d in cursor.description]
    types = [_description_type(d) for d in cursor.description]
    rows = cursor.fetchall()
    assert len(rows) == cursor.rowcount
    columns = [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)]
    return pa.table(columns, names=names)


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
@pytest.mark.parametrize("mode", MODES)
def test_tpch_matches_duckdb(request, connections, sf001, reference_sf001, mode, n):
    sql = tpch.query(n, sf=0.01)
    expected = reference_sf001.sql(sql).to_arrow_table()
    try:
        if mode == "sdk-embedded":
            actual = connections.get(sf001, 2).sql(sql).to_arrow()
        elif mode == "sdk-remote":
            result = request.getfixturevalue("remote").sql(sql)
            assert result.stats["rows"] == expected.num_rows and result.stats["elapsed_s"] > 0
            actual = result.to_arrow()
        else:
            con = request.getfixturevalue("db_embedded" if mode == "dbapi-embedded" else "db_remote")
            cursor = con.cursor()
            cursor.execute(sql)
            assert [d[0] for d in cursor.description] == expected.column_names
            actual = _rows_to_table(cursor)
    except (squall.NotSupportedError, dbapi.NotSupportedError) as err:
        pytest.fail(
            f"Q{n} refused through {mode}: {err}"
        )  # every TPC-H query plans: a refusal is a regression
    assert_same_result(actual, expected, sql, reference=reference_sf001)


# --- SDK ------------------------------------------------------------------------------------------


def test_remote_connection_has_the_embedded_api(remote, connections, sf001):
    embedded = connections.get(sf001, 2)
    assert isinstance(remote, RemoteConnection)
    assert remote.tables() == embedded.tables()
    sql = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY 1 ORDER BY 1"
    result = remote.sql(sql)
    assert result.to_arrow().equals(embedded.sql(sql).to_arrow())
    assert result.columns == ["n_regionkey", "n"] and len(result) == 5 and result.fetchall()[0] == (0, 5)
    assert list(result.to_pandas()["n"]) == [5] * 5
    assert "Stage 1" in remote.explain(sql)
    assert isinstance(remote.plan(sql), Plan) and remote.plan(sql).world_size == 2
    assert remote.plan(sql, workers=1).world_size == 1
    with pytest.raises(squall.NotSupportedError):
        remote.register("t", "/tmp/x.parquet")


def test_remote_progress_callback_and_bar(remote):
    updates: list[Progress] = []
    result = remote.sql(
        "SELECT l_linestatus, sum(l_quantity) FROM lineitem GROUP BY 1", progress=updates.append
    )
    assert result.num_rows == 2
    assert updates and all(isinstance(u, Progress) for u in updates)
    assert updates[-1].fraction == 1.0 and updates[-1].world_size == 2
    assert remote.sql("SELECT 1 AS one", progress=True).fetchall() == [(1,)]


def test_remote_errors_are_typed_with_the_server_message(remote, server):
    with pytest.raises(squall.BindError, match='column "nope" not found'):
        remote.sql("SELECT nope FROM nation")
    with pytest.raises(squall.SqlSyntaxError) as info:
        remote.sql("SELEC 1")
    assert str(info.value).startswith("syntax error") and not str(info.value).startswith(
        "syntax error: syntax"
    )
    with pytest.raises(squall.UnsafeQueryError):
        remote.explain("DELETE FROM nation")
    with pytest.raises(squall.OptionError, match="workers must be between 1 and 2"):
        remote.sql("SELECT 1", workers=5)
    with pytest.raises(RemoteUserError, match="no query") as missing:
        remote.status("q" + "f" * 32)
    assert missing.value.status == 404 and isinstance(missing.value, squall.UserError)
    with pytest.raises(AuthenticationError):
        squall.connect(server.url, token="wrong").tables()
    with pytest.raises(AuthenticationError):
        squall.connect(server.url).tables()
    with pytest.raises(RemoteError, match="cannot reach"):
        RemoteConnection("http://127.0.0.1:9", retries=0).tables()
    with pytest.raises(squall.OptionError, match="http"):
        RemoteConnection("ftp://example.com")


def test_remote_submit_status_result(remote):
    query_id = remote.submit("SELECT count(*) AS n FROM region", idempotency_key="sdk-idem-1")
    assert remote.submit("SELECT count(*) AS n FROM region", idempotency_key="sdk-idem-1") == query_id
    status = remote.wait(query_id)
    assert status["status"] == "succeeded"
    assert remote.result(query_id).to_arrow().to_pydict() == {"n": [5]}
    assert remote.fetch(query_id, "csv").decode().splitlines() == ['"n"', "5"]


class _Capture(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        _Capture.seen.append(dict(self.headers.items()))
        body = json.dumps({"tables": [{"name": "t", "columns": [], "rows": 0}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_iam_auth_signs_with_sigv4(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        con = squall.connect(f"http://127.0.0.1:{httpd.server_port}/v1", auth="iam", region="eu-west-1")
        assert con.tables() == ["t"]
    finally:
        httpd.shutdown()
    headers = {k.lower(): v for k, v in _Capture.seen[-1].items()}
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in headers["authorization"]
    assert "x-amz-date" in headers


# --- DB-API remote specifics ------------------------------------------------------------------------


def test_dbapi_remote_parameters_and_errors(db_remote):
    cursor = db_remote.cursor()
    cursor.execute(
        "SELECT n_name FROM nation WHERE n_regionkey = ? AND n_name <> ? ORDER BY 1", (1, "BRAZIL")
    )
    assert cursor.fetchone() == ("ARGENTINA",)
    assert cursor.fetchmany(2) == [("CANADA",), ("PERU",)]
    assert cursor.fetchall() == [("UNITED STATES",)]
    assert (
        cursor.description[0][:2] == ("n_name", cursor.description[0][1])
        and cursor.description[0][1] == dbapi.STRING
    )
    cursor.execute("SELECT ? AS s, '?' AS q", ("x'; DROP TABLE nation; --",))
    assert cursor.fetchall() == [("x'; DROP TABLE nation; --", "?")]
    with pytest.raises(dbapi.ProgrammingError, match="not found"):
        cursor.execute("SELECT nope FROM nation")
    with pytest.raises(dbapi.ProgrammingError):
        cursor.execute("SELEC 1")
    assert isinstance(cursor.stats, dict)
