"""A worker that cannot start fails the query within seconds with the worker's own message.

- the emulator reports a handler it cannot load as Lambda does: a FunctionError payload
  (``Runtime.ImportModuleError`` / ``Runtime.HandlerNotFound``) and, for asynchronous invocations, an init
  error the lambda-local platform raises at once;
- with ``aws_lambda_powertools`` failing to import (a ``PYTHONPATH`` shim, as with the ``[aws]`` extra
  missing), the real handler still loads and writes an ``error`` key of kind "start": on lambda-local the
  query fails at once, and the handler does so on a captured event too;
- neither is re-invoked (no "did not start in 3 attempts");
- on AWS (the ``lambda`` platform, here :class:`LambdaPlatform` driving the emulator), where an
  asynchronous init error never reaches the driver: when no rank started after ``probe_after_s``, one
  synchronous probe; Lambda's init-error payload (``FunctionError: Unhandled``, ``{"errorMessage",
  "errorType": "Runtime.ImportModuleError", "requestId", "stackTrace"}``) becomes the one-line error —
  for a missing handler module, and for the real handler module whose import fails (a bad Powertools
  setting in the function's environment).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import squall
from squall.driver.platforms.lambda_ import state as keys
from squall.driver.platforms.lambda_.emulator import LocalLambda
from squall.driver.platforms.lambda_.init_errors import function_error, init_error_message, probe_error
from squall.driver.platforms.lambda_.platform import LambdaPlatform, LocalLambdaPlatform
from squall.errors import WorkerError

from ..s3server import moto_available, moto_s3
from ..tpch_data import tpch_dataset

pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
BUCKET = "squall-start-test"
EVENTS = Path(__file__).parent / "events"


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        yield server


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> str:
    """A PYTHONPATH entry on which ``import aws_lambda_powertools`` fails like a missing package."""
    root = tmp_path_factory.mktemp("shim")
    (root / "aws_lambda_powertools").mkdir()
    (root / "aws_lambda_powertools" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'aws_lambda_powertools'\", name='aws_lambda_powertools')\n"
    )
    return os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def test_emulator_reports_init_errors_as_function_errors():
    emu = LocalLambda(handler="squall.no_such_module.handler", concurrency=1)
    try:
        resp = emu.invoke(FunctionName="squall-worker", Payload=b"{}")
        assert resp["FunctionError"] == "Unhandled"
        assert resp["ResponseMetadata"]["HTTPHeaders"]["x-amz-function-error"] == "Unhandled"
        error = json.loads(resp["Payload"].read())
        assert error["errorType"] == "Runtime.ImportModuleError"
        assert error["errorMessage"] == (
            "Unable to import module 'squall.no_such_module': No module named 'squall.no_such_module'"
        )
        emu.invoke(FunctionName="squall-worker", Payload=b'{"query_id": "q1", "ranks": [0, 1]}',
                   InvocationType="Event")  # fmt: skip
        assert emu.wait_idle(60)
        assert [(e["event"]["query_id"], e["errorType"]) for e in emu.init_errors] == [
            ("q1", "Runtime.ImportModuleError")
        ]
    finally:
        emu.close()
    emu = LocalLambda(handler="squall.functions.worker.no_such_handler", concurrency=1)
    try:
        error = json.loads(emu.invoke(FunctionName="squall-worker", Payload=b"{}")["Payload"].read())
        assert set(error) == {"errorMessage", "errorType", "requestId", "stackTrace"}  # Lambda's shape
        assert (error["errorType"], error["errorMessage"], error["stackTrace"]) == (
            "Runtime.HandlerNotFound",
            "Handler 'no_such_handler' missing on module 'squall.functions.worker'",
            [],
        )
    finally:
        emu.close()


def _query_fails_fast(s3, tmp_path_factory, client: LocalLambda, match: str) -> None:
    data = tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)
    platform = LocalLambdaPlatform(
        2, client=client, exchange_options={"bucket_url": f"s3://{BUCKET}/exchange"}
    )
    con = squall.connect(data=str(data), platform=platform)
    try:
        with pytest.raises(WorkerError, match=match) as info:
            con.sql("SELECT count(*) FROM nation").to_arrow()
    finally:
        con.close()
    # fast is the event, not a duration: the init error itself failed the query, with no start timeout
    # (60 s) run out and no retry (which would show as attempts and more invocations)
    assert "attempts" not in str(info.value)
    assert platform.client.stats["invocations"] <= 2  # the first-level invocation (+ its child), no retries


def test_lambda_local_missing_handler_module_fails_fast(s3, tmp_path_factory):
    client = LocalLambda(handler="squall.no_such_module.handler", concurrency=3, timeout_s=300)
    _query_fails_fast(s3, tmp_path_factory, client,
                      r"rank 0 failed: cannot start: Runtime.ImportModuleError: Unable to import module "
                      r"'squall.no_such_module'")  # fmt: skip


def test_lambda_local_missing_powertools_fails_fast(s3, tmp_path_factory, shim):
    client = LocalLambda(concurrency=3, timeout_s=300, env={"PYTHONPATH": shim})
    _query_fails_fast(s3, tmp_path_factory, client,
                      r"rank \d failed: cannot start: ModuleNotFoundError: No module named 'aws_lambda_powertools' "
                      r"\(part of the squall\[aws\] extra\)")  # fmt: skip


def test_real_handler_without_powertools_writes_a_start_error(s3, shim):
    """The captured worker event through ``squall.functions.worker.handler`` in an interpreter where
    ``aws_lambda_powertools`` cannot be imported: an error key the driver reads, not a silent retry."""
    event = json.loads((EVENTS / "worker.json").read_text())
    event["exchange"].update(bucket=BUCKET, endpoint_url=s3.endpoint_url)
    code = (
        "import json, sys\n"
        "from squall.functions.worker import handler\n"
        "print(json.dumps(handler(json.loads(sys.stdin.read()), None)))\n"
    )
    env = (
        dict(os.environ, PYTHONPATH=shim, **s3.env)
        if hasattr(s3, "env")
        else dict(os.environ, PYTHONPATH=shim)
    )
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(event), capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    message = "cannot start: ModuleNotFoundError: No module named 'aws_lambda_powertools' (part of the squall[aws] extra)"
    assert json.loads(out.stdout) == {"rank": 0, "attempt": 0, "status": "error", "message": message}
    key = keys.attempt_prefix(event["exchange"]["prefix"], 0, 0) + "error"
    client = s3.client()
    try:
        doc = json.loads(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        assert doc["kind"] == "start" and doc["message"] == message
    finally:
        client.delete_object(Bucket=BUCKET, Key=key)


# --- the lambda platform (AWS): the probe ------------------------------------------------------------


def test_aws_init_error_payload_becomes_one_line():
    """The exact response boto3 gives for a synchronous invoke of a function whose module cannot load."""
    import io

    body = {"errorMessage": "Unable to import module 'squall.functions.worker': No module named 'squall'",
            "errorType": "Runtime.ImportModuleError", "requestId": "0f0e6c1b-8a3e-4a59-b1f2-3c4d5e6f7a8b",
            "stackTrace": []}  # fmt: skip
    response = {"StatusCode": 200, "FunctionError": "Unhandled", "ExecutedVersion": "$LATEST",
                "Payload": io.BytesIO(json.dumps(body).encode())}  # fmt: skip
    error = function_error(response)
    assert error == body
    assert init_error_message(error, 3) == (
        "rank 3 failed: cannot start: Runtime.ImportModuleError: Unable to import module "
        "'squall.functions.worker': No module named 'squall'"
    )
    assert init_error_message({"errorType": "ValueError", "errorMessage": "x"}) is None  # a rank's own error
    assert function_error({"StatusCode": 200, "Payload": io.BytesIO(b'{"status": "probe"}')}) is None


def test_probe_of_a_healthy_real_handler_says_nothing():
    emu = LocalLambda(concurrency=1)
    try:
        assert probe_error(emu, "squall-worker") is None
    finally:
        emu.close()


class _AwsOnThisMachine(LambdaPlatform):
    """The ``lambda`` platform's own code path (no emulator shortcut: it never reads the emulator's
    ``init_errors``); only the storage check knows that these workers can read local files."""

    storages = ("file", "s3")


def _aws_query_fails_fast(s3, tmp_path_factory, client: LocalLambda, match: str) -> None:
    data = tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)
    platform = _AwsOnThisMachine(2, client=client, function="squall-worker",
                              exchange_options={"bucket_url": f"s3://{BUCKET}/exchange"},
                              settings={"probe_after_s": 1.0, "memory_mb": 1024})  # fmt: skip
    con = squall.connect(data=str(data), platform=platform)
    try:
        with pytest.raises(WorkerError) as info:
            con.sql("SELECT count(*) FROM nation").to_arrow()
    finally:
        con.close()
        client.close()
    # the message alone (pytest's ``match`` also sees the traceback kept in the error's __notes__)
    assert re.search(match, str(info.value)), str(info.value)
    # fast is the event: no start timeout run out, no retry (see _query_fails_fast)
    assert "\n" not in str(info.value) and "attempts" not in str(info.value)
    assert client.stats["invocations"] <= 3  # first-level invocation (+ its child) and the probe, no retries


def test_aws_platform_missing_handler_module_fails_fast(s3, tmp_path_factory):
    client = LocalLambda(handler="squall.no_such_module.handler", concurrency=3, timeout_s=300)
    _aws_query_fails_fast(s3, tmp_path_factory, client,
                          r"^rank 0 failed: cannot start: Runtime.ImportModuleError: Unable to import module "
                          r"'squall.no_such_module': No module named 'squall.no_such_module'$")  # fmt: skip


def test_aws_platform_real_handler_module_init_failure_fails_fast(s3, tmp_path_factory):
    """The real handler module raises while Lambda imports it (Powertools rejects the function's
    POWERTOOLS_LOGGER_SAMPLE_RATE): Lambda reports the exception's own type; the probe passes it on."""
    client = LocalLambda(concurrency=3, timeout_s=300, env={"POWERTOOLS_LOGGER_SAMPLE_RATE": "abc"})
    _aws_query_fails_fast(s3, tmp_path_factory, client,
                          r"^rank 0 failed: cannot start: InvalidLoggerSamplingRateError: Expected a float value "
                          r"ranging 0 to 1, but received abc")  # fmt: skip


# --- the real handler module, loaded by the emulator: a bad handler name, a dependency that cannot import


def test_lambda_local_real_module_missing_handler_fails_fast(s3, tmp_path_factory):
    """The emulator imports the real ``squall.functions.worker`` and finds no such function: Lambda's
    ``Runtime.HandlerNotFound`` with the runtime's own message, at once (no re-invocation)."""
    client = LocalLambda(handler="squall.functions.worker.no_such_handler", concurrency=3, timeout_s=300)
    _query_fails_fast(s3, tmp_path_factory, client,
                      r"^rank 0 failed: cannot start: Runtime.HandlerNotFound: Handler 'no_such_handler' missing "
                      r"on module 'squall.functions.worker'$")  # fmt: skip


def test_aws_platform_real_handler_without_powertools_fails_fast(s3, tmp_path_factory, shim):
    """The real handler module in an environment where ``aws_lambda_powertools`` cannot be imported (the
    ``[aws]`` extra missing from the layer), on the ``lambda`` platform's code path: the asynchronous
    invocations' start errors and the driver's synchronous probe both come from the real handler's error
    path (``report_start_failure`` / the probe answer), carrying the import's own message."""
    client = LocalLambda(concurrency=3, timeout_s=300, env={"PYTHONPATH": shim})
    _aws_query_fails_fast(s3, tmp_path_factory, client,
                          r"^rank \d failed: cannot start: ModuleNotFoundError: No module named "
                          r"'aws_lambda_powertools' \(part of the squall\[aws\] extra\)$")  # fmt: skip
