"""A worker function that cannot even load its handler: Lambda's init error, turned into the query's error.

When the handler *module* cannot be imported (the layer with Squall missing or broken, a syntax error, a
wrong handler name), Lambda never runs our code: an asynchronous invocation fails silently (after
Lambda's own retries), a synchronous one returns ``FunctionError: "Unhandled"`` and the payload::

    {"errorMessage": "Unable to import module 'squall.functions.worker': No module named 'squall'",
     "errorType": "Runtime.ImportModuleError", "requestId": "…", "stackTrace": []}

(``Runtime.HandlerNotFound`` and ``Runtime.UserCodeSyntaxError`` alike). Failures *inside* the library's
imports are reported by the handler itself (:mod:`~squall.driver.platforms.lambda_.startup`, an ``error``
key of kind "start").

So when no rank of a query has started ``probe_after_s`` after the first invocation, the driver makes
one synchronous *probe* invocation (event ``{"probe": true}``; the handler answers at once without
touching S3, see ``squall.functions.worker``): an init error in its response, or the handler's own
start error, fails the query at once with the worker's message (:func:`probe_error`), instead of
waiting ``start_timeout_s`` per attempt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: error types of a function whose handler cannot be loaded: retrying cannot help
INIT_ERRORS = ("Runtime.ImportModuleError", "Runtime.HandlerNotFound", "Runtime.UserCodeSyntaxError")
#: the probe event (the handler answers ``{"status": "probe", "start_error": None | message}``)
PROBE_EVENT = {"probe": True}


def function_error(response: Mapping[str, Any]) -> dict[str, Any] | None:
    """The error payload of a synchronous boto3 ``invoke`` response with ``FunctionError`` set, else None."""
    if not response.get("FunctionError"):
        return None
    raw = response["Payload"].read() if hasattr(response.get("Payload"), "read") else response.get("Payload")
    try:
        payload = json.loads(raw or b"{}")
    except ValueError:
        payload = {"errorType": "Unknown", "errorMessage": str(raw)[:500]}
    return payload if isinstance(payload, dict) else {"errorType": "Unknown", "errorMessage": str(payload)}


def init_error_message(error: Mapping[str, Any], rank: int = 0, any_type: bool = False) -> str | None:
    """``rank 0 failed: cannot start: Runtime.ImportModuleError: Unable to import module …`` (one line)
    for an init error payload; None for other error types unless ``any_type`` (the probe: a loaded
    handler answers it without failing, so any FunctionError means the module's init failed)."""
    kind = str(error.get("errorType", "")) or "Unknown"
    if kind not in INIT_ERRORS and not any_type:
        return None
    message = (str(error.get("errorMessage", "")).splitlines() or [""])[0]
    return f"rank {rank} failed: cannot start: {kind}: {message}"


def probe_error(client: Any, function: str, rank: int = 0) -> str | None:
    """One synchronous probe of ``function``: the one-line error when its workers cannot start, else None."""
    response = client.invoke(
        FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(PROBE_EVENT).encode()
    )
    error = function_error(response)
    if error is not None:
        return init_error_message(error, rank, any_type=True)
    try:
        body = json.loads(response["Payload"].read() or b"{}")
    except ValueError:
        return None
    start_error = body.get("start_error") if isinstance(body, dict) else None
    return f"rank {rank} failed: {start_error}" if start_error else None
