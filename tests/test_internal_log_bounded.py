"""``internal-errors.log`` stays bounded: past ``LOG_MAX_BYTES`` it is rotated to ``internal-errors.log.1`` (one
old file kept) and one entry keeps at most ``ENTRY_MAX_BYTES`` (head and tail of a long traceback). A query nested
too deeply is the query's limit, not a bug: a one-line ``NotSupportedError`` (CLI exit 1), nothing logged."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall import cli
from squall.driver.frontend import boundary
from squall.driver.planner.rules import aggregates

GROUPED = "SELECT grp, count(*) AS n FROM t GROUP BY grp"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounded")
    pq.write_table(pa.table({"grp": ["a", "b", "a"], "x": [1, 2, 3]}), folder / "t.parquet")
    return folder


@pytest.fixture
def log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_LOG_DIR", str(tmp_path))
    return tmp_path


def test_the_log_is_rotated_and_entries_are_clipped(data, log_dir, monkeypatch):
    monkeypatch.setattr(boundary, "LOG_MAX_BYTES", 20_000)
    monkeypatch.setattr(boundary, "ENTRY_MAX_BYTES", 3_000)

    def broken(ctx, node):
        raise KeyError("injected " + "x" * 10_000)  # a long message: the entry must be clipped

    monkeypatch.setattr(aggregates, "plan", broken)
    con = squall.connect(data=str(data), workers=2)
    try:
        for i in range(30):
            with pytest.raises(squall.InternalError):
                con.plan(f"{GROUPED} -- {i}")
    finally:
        con.close()
    log, old = log_dir / "internal-errors.log", log_dir / "internal-errors.log.1"
    assert old.is_file() and log.is_file()
    assert log.stat().st_size <= 20_000 and old.stat().st_size <= 20_000
    entries = log.read_text().split("--- ")[1:]
    assert entries and all(len(e) <= 3_100 for e in entries)
    assert all("characters left out" in e for e in entries)
    assert "-- 29" in log.read_text()  # the newest entry is in the current file


def test_too_deep_nesting_is_one_line_and_not_logged(data, log_dir, capsys):
    sql = "SELECT " + "(" * 5000 + "1" + ")" * 5000 + " AS x"
    code = cli.main(["query", sql, "--data", str(data), "--workers", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith("error: not supported: the query nests too deeply to plan"), (
        err
    )
    assert not (log_dir / "internal-errors.log").exists()
