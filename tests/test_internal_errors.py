"""No internal error reaches a user: a bug while binding, translating or planning (here injected by
monkeypatching a planner rule or a translator step to raise) is one ``InternalError`` line — step,
the query's position where known, the exception — with the traceback in a log file, through the SDK,
the CLI (exit 2, one stderr line) and the REST API (a 500 with a JSON body)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall import cli
from squall.driver.logical.translate import Translator
from squall.driver.planner.rules import aggregates

GROUPED = "SELECT grp, count(*) AS n FROM t GROUP BY grp"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("internal")
    pq.write_table(pa.table({"grp": ["a", "b", "a", None], "x": [1, 2, 3, 4]}), folder / "t.parquet")
    return folder


@pytest.fixture
def log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_LOG_DIR", str(tmp_path))
    return tmp_path


def _planner_bug(monkeypatch):
    def broken(ctx, node):
        raise KeyError("injected planner bug")

    monkeypatch.setattr(aggregates, "plan", broken)


def test_planner_bug_is_one_line_and_logged(data, log_dir, monkeypatch):
    con = squall.connect(data=str(data), workers=2)
    try:
        _planner_bug(monkeypatch)
        with pytest.raises(squall.InternalError) as got:
            con.sql(GROUPED)
        message = str(got.value)
        assert "\n" not in message
        assert message.startswith("internal error while planning (bug): KeyError: 'injected planner bug'")
        log = log_dir / "internal-errors.log"
        assert message.endswith(f"traceback in {log}")
        text = log.read_text()
        assert "Traceback (most recent call last)" in text and "injected planner bug" in text
        assert GROUPED in text
        assert not isinstance(got.value, squall.UserError)  # the user did nothing wrong
        monkeypatch.undo()
        assert con.sql(GROUPED).to_arrow().num_rows == 3  # the connection still works
    finally:
        con.close()


def test_translator_bug_names_the_position(data, log_dir, monkeypatch):
    sql = "SELECT x FROM t\nWHERE x IN (\n  SELECT max(x) FROM t WHERE grp = 'a')"

    def broken(self, *args, **kwargs):
        raise ValueError("injected translator bug")

    monkeypatch.setattr(Translator, "_aggregate", broken)
    con = squall.connect(data=str(data), workers=2)
    try:
        with pytest.raises(squall.InternalError) as got:
            con.plan(sql)
    finally:
        con.close()
    message = str(got.value)
    assert message.startswith("internal error while translating (bug) at line 3, column ")
    assert "ValueError: injected translator bug" in message and "\n" not in message


def test_cli_prints_one_line_and_exits_2(data, log_dir, monkeypatch, capsys):
    _planner_bug(monkeypatch)
    monkeypatch.delenv("SQUALL_DEBUG", raising=False)
    code = cli.main(["query", GROUPED, "--data", str(data), "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: internal error while planning (bug): KeyError")
    assert "Traceback" not in capsys.readouterr().err


def test_cli_catches_a_bug_outside_planning(data, log_dir, monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("injected command bug")

    monkeypatch.setattr(cli, "_tables", broken)
    monkeypatch.delenv("SQUALL_DEBUG", raising=False)
    code = cli.main(["tables", "--data", str(data)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"error: internal error while running the command (bug): RuntimeError: injected command "
                   f"bug; traceback in {log_dir / 'internal-errors.log'}"]  # fmt: skip


def test_rest_api_answers_500_with_one_line(data, log_dir, monkeypatch, tmp_path):
    requests = pytest.importorskip("requests")
    pytest.importorskip("aws_lambda_powertools")
    from squall.service.api import make_handler
    from squall.service.backend import LocalBackend
    from squall.service.server import ApiServer, serialized
    from squall.service.service import Service
    from squall.service.state import state_store

    backend = LocalBackend(str(data), workers=2)
    service = Service(state_store(str(tmp_path / "state")), backend)
    server = ApiServer(("127.0.0.1", 0), serialized(make_handler(service)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _planner_bug(monkeypatch)
        for path in ("/v1/explain", "/v1/queries"):
            response = requests.post(url + path, json={"sql": GROUPED}, timeout=60)
            assert response.status_code == 500, (path, response.text)
            body = response.json()
            assert body["error"] == "InternalError"
            assert body["detail"].startswith("internal error while planning (bug): KeyError")
            assert "\n" not in body["detail"] and "Traceback" not in response.text
    finally:
        server.shutdown()
        server.server_close()
        backend.close()


def test_dbapi_maps_it_to_pep249_internal_error(data, log_dir, monkeypatch):
    from squall import dbapi

    _planner_bug(monkeypatch)
    con = dbapi.connect(data=str(data), workers=2)
    try:
        with pytest.raises(dbapi.InternalError) as got:
            con.cursor().execute(GROUPED)
        assert str(got.value).startswith("internal error while planning (bug): KeyError")
    finally:
        con.close()
