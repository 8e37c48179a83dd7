"""Issue 18's server items: query history, /healthz, result pages, content negotiation, expiry (410 and the
sweeper, on a folder and on S3), the warning for a server bound beyond loopback without a token, and the
console's static files. Over HTTP against ``squall serve`` where it matters, on a Service directly for the
sweeper's edge cases."""

from __future__ import annotations

import io
import time
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

import squall
from squall.errors import OptionError
from squall.service import records
from squall.service.backend import Backend
from squall.service.errors import NotAcceptable
from squall.service.service import DEFAULT_PAGE_ROWS, Service, negotiate, parse_ttl
from squall.service.state import StateStore, state_store

from .conftest import TOKEN, Server, _start
from .test_http_api import call, error_of, submit, wait

requests = pytest.importorskip("requests")
ROOT = Path(__file__).resolve().parents[2]
ORDERS = "SELECT o_orderkey, o_orderstatus, o_totalprice FROM orders ORDER BY o_orderkey LIMIT 2500"


def finished(server, sql: str, **fields) -> str:
    query_id = submit(server, sql, **fields)["query_id"]
    assert wait(server, query_id)[-1]["status"] == "succeeded"
    return query_id


# --- history --------------------------------------------------------------------------------------------


def test_history_is_newest_first_and_paginated(server):
    long_sql = "SELECT count(*) AS n FROM region -- " + "x" * 300
    ids = [finished(server, sql) for sql in ("SELECT 1 AS a", "SELECT count(*) AS n FROM nation", long_sql)]
    first = call(server, "GET", "/v1/queries", params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [q["query_id"] for q in page["queries"]] == [ids[2], ids[1]]  # newest first
    newest = page["queries"][0]
    assert newest["status"] == "succeeded" and newest["rows"] == 1 and newest["elapsed_s"] > 0
    assert (
        len(newest["sql"]) == 200 and newest["sql"].endswith("…") and long_sql.startswith(newest["sql"][:-1])
    )
    assert newest["created_at"] <= newest["started_at"] <= newest["finished_at"]
    assert set(newest) >= {"query_id", "status", "sql", "created_at", "finished_at", "rows", "elapsed_s",
                           "cost_usd", "error"}  # fmt: skip
    assert page["next_page_token"] == ids[1]
    assert page["next"] == f"/v1/queries?limit=2&page_token={ids[1]}"

    second = call(server, "GET", page["next"]).json()
    assert second["queries"][0]["query_id"] == ids[0]
    created = [q["created_at"] for q in page["queries"] + second["queries"]]
    assert created == sorted(created, reverse=True)

    everything, url = [], "/v1/queries?limit=100"
    while url:
        doc = call(server, "GET", url).json()
        everything += [q["query_id"] for q in doc["queries"]]
        url = doc["next"]
    assert everything.index(ids[2]) < everything.index(ids[1]) < everything.index(ids[0])
    assert len(everything) == len(set(everything))

    error_of(call(server, "GET", "/v1/queries", params={"page_token": "../etc"}), 422, "ValidationError")
    error_of(call(server, "GET", "/v1/queries", params={"limit": 0}), 422, "ValidationError")
    error_of(call(server, "GET", "/v1/queries", token=False), 401, "Unauthorized")
    typo = error_of(call(server, "GET", "/v1/queries", params={"limt": 5}), 422, "ValidationError")
    assert "limt" in typo


def test_failed_queries_show_their_error_in_the_history(server):
    query_id = submit(server, "SELECT CAST(n_name AS INTEGER) AS x FROM nation")["query_id"]  # fails running
    final = wait(server, query_id)[-1]
    assert final["status"] == "failed", final
    item = next(q for q in call(server, "GET", "/v1/queries").json()["queries"] if q["query_id"] == query_id)
    assert item["status"] == "failed" and item["error"] == final["error"] and item["rows"] is None


def test_query_ids_sort_newest_first():
    then = time.time() - 100
    older, newer = records.new_query_id(now=then), records.new_query_id(now=then + 0.5)
    assert newer < older and records.valid_query_id(newer)
    assert records.query_time(older) == pytest.approx(then, abs=0.001)
    assert records.query_time(records.new_query_id(now=time.time() + 10 * 86400)) is None  # not trusted
    now = records.new_query_id()
    assert records.query_time(now) == pytest.approx(time.time(), abs=5)
    assert records.query_time("q" + "0" * 32) is None  # not a time-ordered id


# --- health, console ----------------------------------------------------------------------------------


def test_healthz_needs_no_token(server):
    response = call(server, "GET", "/healthz", token=False)
    assert response.status_code == 200 and response.json() == {"status": "ok", "version": squall.__version__}
    spec = call(server, "GET", "/v1/openapi.json", token=False).json()
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert {"/v1/queries", "/healthz"} <= set(spec["paths"])
    assert "get" in spec["paths"]["/v1/queries"] and "post" in spec["paths"]["/v1/queries"]
    params = {p["name"] for p in spec["paths"]["/v1/queries/{query_id}/result"]["get"]["parameters"]}
    assert {"format", "offset", "limit"} <= params


def test_console_is_served_without_a_token(server):
    page = call(server, "GET", "/", token=False)
    assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "<title>Squall console</title>" in page.text
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert "http://" not in page.text and "https://" not in page.text  # no CDN, no external fonts
    for name, content_type in (("console.js", "text/javascript"), ("console.css", "text/css")):
        asset = call(server, "GET", f"/console/{name}", token=False)
        assert asset.status_code == 200 and asset.headers["Content-Type"] == f"{content_type}; charset=utf-8"
        assert "https://" not in asset.text and "@import" not in asset.text
        assert f'console/{name}"' in page.text  # relative: works behind an API Gateway stage too
    for bad in ("/console/nope.js", "/console/..%2Fapi.py", "/console/README.md"):
        error_of(call(server, "GET", bad, token=False), 404, "NotFound")
    error_of(call(server, "GET", "/v1/tables", token=False), 401, "Unauthorized")  # the API still needs it


def test_console_files_are_package_data():
    folder = ROOT / "squall" / "service" / "console"
    assert {p.name for p in folder.iterdir()} >= {"index.html", "console.js", "console.css"}
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    assert "squall.service.console" in setuptools["packages"]
    patterns = setuptools["package-data"]["squall.service.console"]
    assert {"*.html", "*.css", "*.js"} <= set(patterns)
    assert any("selenium" in dep for dep in config["project"]["optional-dependencies"]["test"])


# --- result pages and content negotiation ---------------------------------------------------------


def test_json_and_csv_results_come_in_pages(server, reference_sf001):
    query_id = finished(server, ORDERS)
    expected = reference_sf001.sql(ORDERS).fetchall()
    first = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "json"})
    assert first.status_code == 200
    assert first.headers["X-Total-Rows"] == "2500" and first.headers["X-Offset"] == "0"
    assert first.headers["X-Rows"] == str(DEFAULT_PAGE_ROWS) and len(first.json()) == DEFAULT_PAGE_ROWS
    assert first.links["next"]["url"] == (
        f"/v1/queries/{query_id}/result?format=json&offset={DEFAULT_PAGE_ROWS}&limit={DEFAULT_PAGE_ROWS}"
    )
    rows, url, pages = [], f"/v1/queries/{query_id}/result?format=json&limit=700", 0
    while url:
        page = call(server, "GET", url)
        assert page.status_code == 200, page.text
        rows += page.json()
        url = page.links.get("next", {}).get("url")
        pages += 1
    assert pages == 4 and [r["o_orderkey"] for r in rows] == [e[0] for e in expected]
    assert rows[-1]["o_totalprice"] == pytest.approx(float(expected[-1][2]))

    csv = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "csv", "offset": 2490})
    assert csv.headers["X-Rows"] == "10" and "next" not in csv.links  # the last page
    table = pcsv.read_csv(io.BytesIO(csv.content))  # every page is a CSV with its header
    assert table.column_names == ["o_orderkey", "o_orderstatus", "o_totalprice"]
    assert table.column("o_orderkey").to_pylist() == [e[0] for e in expected[2490:]]

    past = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "json", "offset": 9999})
    assert past.status_code == 200 and past.json() == [] and past.headers["X-Rows"] == "0"

    arrow = call(server, "GET", f"/v1/queries/{query_id}/result", params={"format": "arrow"})
    assert pa.ipc.open_stream(arrow.content).read_all().num_rows == 2500  # Arrow: whole by default
    assert "next" not in arrow.links and arrow.headers["X-Total-Rows"] == "2500"
    part = call(server, "GET", f"/v1/queries/{query_id}/result",
                params={"format": "arrow", "offset": 10, "limit": 5})  # fmt: skip
    keys = pa.ipc.open_stream(part.content).read_all().column("o_orderkey").to_pylist()
    assert keys == [e[0] for e in expected[10:15]] and "next" in part.links

    for bad in ({"offset": -1}, {"limit": 0}, {"limit": "x"}, {"page": 2}):
        error_of(call(server, "GET", f"/v1/queries/{query_id}/result", params=bad), 422, "ValidationError")


def test_format_follows_accept(server):
    query_id = finished(server, "SELECT n_nationkey, n_name FROM nation ORDER BY 1 LIMIT 3")
    path = f"/v1/queries/{query_id}/result"
    as_curl = call(server, "GET", path, headers={"Accept": "*/*"})
    assert as_curl.headers["Content-Type"] == "application/json" and as_curl.json()[0]["n_name"] == "ALGERIA"
    assert call(server, "GET", path).headers["Content-Type"] == "application/json"  # requests sends */*
    as_csv = call(server, "GET", path, headers={"Accept": "text/csv"})
    assert as_csv.headers["Content-Type"].startswith("text/csv") and as_csv.text.startswith('"n_nationkey",')
    as_arrow = call(server, "GET", path, headers={"Accept": "application/vnd.apache.arrow.stream"})
    assert pa.ipc.open_stream(as_arrow.content).read_all().num_rows == 3
    browser = call(server, "GET", path, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser.headers["Content-Type"] == "application/json"
    ranked = call(server, "GET", path, headers={"Accept": "application/json;q=0.5, text/csv"})
    assert ranked.headers["Content-Type"].startswith("text/csv")
    explicit = call(server, "GET", path, params={"format": "parquet"}, headers={"Accept": "text/csv"})
    assert explicit.content.startswith(b"PAR1")  # ?format= wins
    assert call(server, "GET", path).headers["Vary"] == "Accept"
    error_of(call(server, "GET", path, headers={"Accept": "text/html"}), 406, "NotAcceptable")


def test_sdk_gets_arrow():
    from squall.client import RemoteConnection

    seen: dict[str, Any] = {}

    class Probe(RemoteConnection):
        def _request(self, method, path, body=None, headers=None):
            seen.update(path=path, headers=headers)
            return 200, {}, b""

    Probe("http://127.0.0.1:9").fetch("q" + "0" * 32)
    assert "format=arrow" in seen["path"]  # the SDK names the format, whatever it sends as Accept


def test_negotiate_and_parse_ttl():
    assert negotiate(None, None) == "json" and negotiate("*/*", None) == "json"
    assert negotiate("*/*", "parquet") == "parquet" and negotiate("", "csv") == "csv"
    assert negotiate("application/vnd.apache.arrow.stream", "csv") == "arrow"
    assert negotiate("text/*", None) == "csv" and negotiate("application/*", "csv") == "json"
    assert negotiate("text/csv;q=0, application/json", None) == "json"
    with pytest.raises(NotAcceptable):
        negotiate("image/png, text/csv;q=0", None)
    assert parse_ttl("90") == 90 and parse_ttl("30m") == 1800 and parse_ttl("24h") == 86400
    assert parse_ttl("7d") == 7 * 86400 and parse_ttl("1.5h") == 5400
    assert parse_ttl("off") is None and parse_ttl("0") is None
    with pytest.raises(OptionError):
        parse_ttl("soon")


# --- expiry -------------------------------------------------------------------------------------------


@pytest.fixture
def short_ttl_server(sf001, tmp_path_factory):
    state = tmp_path_factory.mktemp("state-ttl")
    srv = _start(tmp_path_factory, "serve-ttl", ["--data", str(sf001), "--workers", "1", "--token", TOKEN,
                                                 "--state", str(state), "--result-ttl", "5s"])  # fmt: skip
    srv.state = state  # type: ignore[attr-defined]
    yield srv
    assert srv.stop() == 0 and "Traceback" not in srv.output(), srv.output()


def test_results_expire_with_410_and_are_swept(short_ttl_server):
    srv = short_ttl_server
    key = {"Idempotency-Key": "ttl-1"}
    query_id = submit(srv, "SELECT n_name FROM nation ORDER BY 1", headers=key)["query_id"]
    assert wait(srv, query_id)[-1]["status"] == "succeeded"
    assert call(srv, "GET", f"/v1/queries/{query_id}/result").status_code == 200
    assert (srv.state / query_id / "result.arrow").exists()

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (srv.state / query_id).exists():
        time.sleep(0.2)
    assert not (srv.state / query_id).exists(), "the sweeper did not delete the expired query"
    assert not any((srv.state / "_idempotency").iterdir())  # its Idempotency-Key went too
    response = call(srv, "GET", f"/v1/queries/{query_id}/result")
    detail = error_of(response, 410, "Expired")
    assert "\n" not in detail and query_id in detail and "expired" in detail
    error_of(call(srv, "GET", f"/v1/queries/{query_id}"), 410, "Expired")
    assert all(q["query_id"] != query_id for q in call(srv, "GET", "/v1/queries").json()["queries"])
    error_of(call(srv, "GET", f"/v1/queries/{records.new_query_id()}"), 404, "NotFound")  # never existed


class _NoBackend(Backend):
    max_workers = 1

    def check(self, sql: str, workers: int | None) -> None:
        pass

    def submit(self, query_id: str, store: StateStore) -> None:
        pass

    def tables(self) -> list[dict[str, Any]]:
        return []

    def explain(self, sql: str, workers: int | None) -> dict[str, Any]:
        return {}


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path):
    if request.param == "local":
        yield state_store(str(tmp_path / "state"))
        return
    from ..s3server import moto_available, moto_s3

    if moto_available() is not None:
        pytest.skip(str(moto_available()))
    with moto_s3("squall-sweep-test"):
        yield state_store("s3://squall-sweep-test/queries")


def test_sweep_deletes_only_finished_queries_older_than_the_ttl(any_store):
    now = time.time()
    service = Service(any_store, _NoBackend(), result_ttl_s=3600)

    def query(age_s: float, status: str, finished_ago: float | None) -> str:
        query_id = records.new_query_id(now=now - age_s)
        any_store.put_json(records.request_key(query_id), {"sql": "SELECT 1"})
        doc = {"query_id": query_id, "status": status, "sql": "SELECT 1", "created_at": now - age_s}
        if finished_ago is not None:
            doc["finished_at"] = now - finished_ago
        any_store.put_json(records.status_key(query_id), doc)
        any_store.put(records.result_key(query_id, "arrow"), b"x")
        return query_id

    old_done = query(7200, "succeeded", 7000)
    old_failed = query(7200, "failed", 3700)
    old_but_recent_end = query(7200, "succeeded", 60)  # ran long: counts from its end
    still_running = query(7200, "running", None)
    young = query(60, "succeeded", 30)
    any_store.put_json(records.idempotency_key("old"), {"query_id": old_done, "created_at": now - 7200})
    any_store.put_json(records.idempotency_key("new"), {"query_id": young, "created_at": now - 60})

    assert service.sweep(now) == 2
    left = set(any_store.children())
    assert old_done not in left and old_failed not in left
    assert {old_but_recent_end, still_running, young} <= left
    assert any_store.children("_idempotency") == [records.idempotency_key("new").split("/")[1]]
    assert service.sweep(now) == 0
    with pytest.raises(Exception) as gone:
        service.status(old_done)
    assert getattr(gone.value, "status", None) == 410
    assert Service(any_store, _NoBackend()).sweep(now + 10**6) == 0  # no TTL: nothing expires


# --- binding beyond loopback ----------------------------------------------------------------------


def test_serve_warns_when_bound_beyond_loopback_without_a_token(sf001, tmp_path):
    def first_lines(args: list[str]) -> list[str]:
        srv = Server(["--data", str(sf001), "--workers", "1", *args], tmp_path / f"{len(args)}.log")
        try:
            return [line for line in srv.output().splitlines() if line.strip()]
        finally:
            srv.stop()

    open_lines = first_lines(["--host", "0.0.0.0"])
    warnings = [line for line in open_lines if line.startswith("warning:")]
    assert len(warnings) == 1 and "--token" in warnings[0] and "0.0.0.0" in warnings[0]
    assert not any(line.startswith("warning:") for line in first_lines(["--host", "0.0.0.0", "--token", "t"]))
    assert not any(line.startswith("warning:") for line in first_lines(["--host", "127.0.0.1"]))


def test_result_ttl_option_is_checked(sf001):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "squall.cli", "serve", "--data", str(sf001), "--result-ttl", "soon"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and done.stderr.strip().startswith("error:") and "soon" in done.stderr
    assert "Traceback" not in done.stderr


def test_concurrent_requests_each_get_their_own_answer(server):
    """A Powertools resolver holds the request it resolves; squall serve must not share one between threads
    (it did: the browser's parallel loads of the console's files got 500s, and Accept could leak)."""
    import concurrent.futures

    query_id = finished(server, "SELECT n_nationkey, n_name FROM nation ORDER BY 1")
    path = f"/v1/queries/{query_id}/result"
    kinds = [
        ("GET", path, {"Accept": "text/csv"}, "text/csv"),
        ("GET", path, {"Accept": "application/json"}, "application/json"),
        ("GET", path, {"Accept": "application/vnd.apache.arrow.stream"}, "application/vnd.apache.arrow"),
        ("GET", "/console/console.js", {}, "text/javascript"),
        ("GET", "/healthz", {}, "application/json"),
        ("GET", "/v1/queries?limit=3", {}, "application/json"),
    ]

    def one(i: int) -> tuple[int, str, str]:
        method, url, headers, expected = kinds[i % len(kinds)]
        response = call(server, method, url, headers=headers)
        return response.status_code, response.headers.get("Content-Type", ""), expected

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(240)))
    wrong = [a for a in answers if a[0] != 200 or not a[1].startswith(a[2])]
    assert not wrong, wrong[:5]
