"""A worker that cannot start says why, at once: the error path of ``squall.functions.worker``.

When the handler module cannot import what it needs (a missing dependency such as the ``[aws]`` extra's
``aws_lambda_powertools``, a broken layer, an import error anywhere in the library), the handler still
loads and :func:`report_start_failure` writes the attempt's ``error`` status key (kind ``"start"``, the
import error as one line) with nothing but boto3. The driver's next poll raises it as the query's error:
no re-invocation, no waiting for ``start_timeout_s`` (a crash mid-run writes nothing and is retried as
before). Imports only the standard library, boto3 (part of every Lambda Python runtime) and
:mod:`~squall.driver.platforms.lambda_.state`.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Mapping
from typing import Any

from squall.driver.platforms.lambda_ import state as keys

#: top-level modules the worker imports from an optional extra of the package, and that extra
EXTRA_OF_MODULE = {"aws_lambda_powertools": "aws", "pydantic": "aws", "cffi": "fabric"}


def start_message(exc: BaseException) -> str:
    """``cannot start: ModuleNotFoundError: No module named 'x'`` (one line), naming the package extra that
    provides a missing module (``… (part of the squall[aws] extra)``)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    missing = (getattr(exc, "name", None) or "").split(".")[0] if isinstance(exc, ImportError) else ""
    hint = f" (part of the squall[{EXTRA_OF_MODULE[missing]}] extra)" if missing in EXTRA_OF_MODULE else ""
    return f"cannot start: {type(exc).__name__}" + (f": {text}" if text else "") + hint


def report_start_failure(event: Mapping[str, Any], exc: BaseException, s3: Any = None) -> dict[str, Any]:
    """Write the ``error`` key of this invocation's attempt; returns the handler's summary (an error)."""
    started = time.time()
    rank, attempt = int(event["ranks"][0]), int(event.get("attempt", 0))
    message = start_message(exc)
    config = event["exchange"]
    if s3 is None:
        import boto3  # in every Lambda Python runtime

        s3 = boto3.client("s3", endpoint_url=config.get("endpoint_url"), region_name=config.get("region"))
    doc = {"kind": "start", "message": message,
           "traceback": "".join(traceback.format_exception(exc))[-4000:], "invocations": 0,
           "status_puts": 1, "memory_mb": int(event.get("settings", {}).get("memory_mb") or 0),
           "billed_ms": max(1, int((time.time() - started) * 1000))}  # fmt: skip
    key = keys.attempt_prefix(config["prefix"], rank, attempt) + "error"
    s3.put_object(Bucket=config["bucket"], Key=key, Body=json.dumps(doc).encode())
    return {"rank": rank, "attempt": attempt, "status": "error", "message": message}
