"""What a query would cost on Lambda before deploying (issue 38): ``squall explain --platform lambda --estimate``
needs no bucket, no worker function and no AWS credentials — planning and the scale model read only the tables'
footers — and says the memory per worker it planned. Running the query still needs them, and says so in one line.
"""

from __future__ import annotations

import pytest

import squall
from squall.cli import main
from squall.driver.platforms.memory import LAMBDA_RESERVE_MB, lambda_worker_budget_mb

from .s3server import moto_available, moto_s3
from .tpch_data import dataset_files

SQL = "SELECT l_returnflag, COUNT(*) AS n, SUM(l_quantity) AS q FROM lineitem GROUP BY l_returnflag"
BUCKET = "squall-estimate-data"
#: what would give the lambda platform a bucket, a function or a memory size: none is set in these tests
SQUALL_ENV = ("SQUALL_BUCKET", "SQUALL_EXCHANGE_PREFIX", "SQUALL_WORKER_FUNCTION", "SQUALL_DRIVER_FUNCTION",
              "SQUALL_WORKER_MEMORY_MB", "SQUALL_WORKER_TIMEOUT_SECONDS", "SQUALL_MAX_WORKERS",
              "SQUALL_LAMBDA_CONCURRENCY", "SQUALL_PLATFORM", "SQUALL_DATA")  # fmt: skip
AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
           "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
           "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")  # fmt: skip
ESTIMATE_LINES = ("Estimate lambda at W=64 (model profile aws):", "  time   ", "  cost   $", "  S3     put ")


@pytest.fixture
def no_lambda_env(monkeypatch, tmp_path):
    """No bucket, no function, no memory setting; no AWS credentials (files, variables or instance metadata)."""
    for name in SQUALL_ENV + AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(tmp_path)  # no ./squall.toml with a platform or a bucket


def _one_line_error(err: str, message: str) -> None:
    assert err.startswith("error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err


def test_worker_budget_is_the_function_memory_less_the_reserve():
    assert LAMBDA_RESERVE_MB == 64
    assert lambda_worker_budget_mb(1769) == 1705
    assert lambda_worker_budget_mb(4096) == 4032
    assert lambda_worker_budget_mb(128) == 64  # Lambda's smallest function


def test_cli_explain_estimate_on_lambda_with_local_data(sf001, capsys, no_lambda_env):
    code = main(
        ["explain", SQL, "--data", str(sf001), "--platform", "lambda", "--workers", "64", "--estimate"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Stage 1" in out
    for line in ESTIMATE_LINES:
        assert line in out, out
    assert "  memory 4096 MB per worker (function), budget 4032 MB" in out  # the platform's default memory
    assert "  note   local tables: the estimate models Lambda over the same files as if in S3" in out


def test_cli_explain_estimate_plans_the_deployed_memory(sf001, capsys, no_lambda_env, monkeypatch):
    monkeypatch.setenv("SQUALL_WORKER_MEMORY_MB", "1769")  # the function's memory when deployed
    args = ["explain", SQL, "--data", str(sf001), "--platform", "lambda", "--workers", "auto", "--estimate"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "  memory 1769 MB per worker (function), budget 1705 MB" in out
    assert "chosen by workers='auto'" in out


def test_sdk_explain_and_estimate_on_lambda_need_no_bucket(sf001, no_lambda_env):
    with squall.connect(str(sf001), platform="lambda", workers=64) as con:
        text = con.explain(SQL, estimate=True)
        assert "Estimate lambda at W=64 (model profile aws):" in text and "budget 4032 MB" in text
        est = con.estimate(SQL)
        assert est.workers == 64 and est.profile == "aws" and est.cost_usd > 0
        with pytest.raises(squall.OptionError, match="workers read s3:// locations, not"):
            con.sql(SQL)  # running needs the tables in S3 (and then a bucket and a function)


def test_running_on_lambda_still_needs_bucket_and_function(sf001, capsys, no_lambda_env):
    run = ["query", SQL, "--data", str(sf001), "--platform", "lambda", "--workers", "64"]
    assert main(run) == 1
    _one_line_error(capsys.readouterr().err, "--platform lambda needs --exchange s3://bucket/prefix")
    assert main([*run, "--exchange", "s3://some-bucket/x", "--function", "squall-worker"]) == 1
    _one_line_error(capsys.readouterr().err, "the lambda platform's workers read s3:// locations, not")
    # the SDK, no tables: the platform's own checks, when a query runs
    no_bucket = squall.connect(platform="lambda", workers=64)
    with no_bucket, pytest.raises(squall.OptionError, match="needs an S3 bucket for exchange and state"):
        no_bucket.sql("SELECT count(*) FROM range(10)")
    no_function = squall.connect(platform="lambda", workers=64, exchange="s3://some-bucket/x")
    with (
        no_function,
        pytest.raises(squall.OptionError, match="needs --function NAME or SQUALL_WORKER_FUNCTION"),
    ):
        no_function.sql("SELECT 1")


@pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
def test_cli_explain_estimate_on_lambda_with_s3_data(sf001, capsys, no_lambda_env):
    with moto_s3(BUCKET) as s3:  # the footers are read from S3; still no bucket for exchange, no function
        client = s3.client()
        for files in dataset_files(sf001).values():
            for f in files:
                client.upload_file(str(f), BUCKET, f"sf001/{f.relative_to(sf001)}")
        data = f"s3://{BUCKET}/sf001/"
        code = main(["explain", SQL, "--data", data, "--platform", "lambda", "--workers", "64", "--estimate"])
        out, err = capsys.readouterr()
        assert code == 0, err
        for line in ESTIMATE_LINES:
            assert line in out, out
        assert "  memory 4096 MB per worker (function), budget 4032 MB" in out
        assert "local tables" not in out  # the tables are in S3: nothing modelled "as if"
        # the run: a bucket for exchange and state is there, the worker function is not
        run = ["query", SQL, "--data", data, "--platform", "lambda", "--workers", "64"]
        assert main([*run, "--exchange", f"s3://{BUCKET}/exchange"]) == 1
        _one_line_error(
            capsys.readouterr().err, "the lambda platform needs --function NAME or SQUALL_WORKER_FUNCTION"
        )
