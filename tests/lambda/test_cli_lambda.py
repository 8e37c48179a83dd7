"""``squall query … --platform lambda-local --workers 16 --stats-json F`` on moto's S3 server."""

from __future__ import annotations

import json

import pytest

from squall.cli import main

from ..s3server import moto_available, moto_s3
from ..tpch_data import tpch_dataset

pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
BUCKET = "squall-lambda-test"


def test_cli_lambda_local_stats(tmp_path, tmp_path_factory, capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    data = tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)
    stats = tmp_path / "stats.json"
    sql = "SELECT o_orderpriority, count(*) AS n FROM orders GROUP BY 1 ORDER BY 1"
    with moto_s3(BUCKET):
        code = main(["query", sql, "--data", str(data), "--platform", "lambda-local", "--workers", "16",
                     "--exchange", f"s3://{BUCKET}/exchange", "--format", "json", "--stats-json", str(stats)])  # fmt: skip
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and sum(r["n"] for r in rows) == 15000
    doc = json.loads(stats.read_text())
    lam = doc["lambda"]
    assert lam["tree_depth"] == 2 and lam["fanout"] == 4  # default ⌈√16⌉
    assert lam["startup_s"]["all"] > 0 and "retries" in lam and "duplicates" in lam
    assert doc["cost_usd"] > 0 and doc["cost"]["gb_seconds"] > 0 and doc["cost"]["s3_put_requests"] > 0


def test_cli_lambda_needs_bucket(capsys, monkeypatch):
    monkeypatch.delenv("SQUALL_BUCKET", raising=False)
    assert main(["query", "SELECT 1", "--data", ".", "--platform", "lambda-local"]) == 1
    assert "needs --exchange s3://" in capsys.readouterr().err
    assert main(["query", "SELECT 1", "--data", ".", "--fanout", "3"]) == 1
    assert "--fanout and --function need --platform" in capsys.readouterr().err
