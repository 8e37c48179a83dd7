"""One execution environment of the local Lambda emulator: ``python -m squall.driver.platforms.lambda_.emulator_process ADDRESS``.

Started by :class:`squall.driver.platforms.lambda_.emulator.LocalLambda`; connects back to the
emulator's Unix socket (authenticated with ``SQUALL_LAMBDA_AUTHKEY``), then runs one invocation after
another: resolves the handler (``"module.function"``; when that fails, an init error as Lambda reports it:
``Runtime.ImportModuleError`` / ``Runtime.HandlerNotFound`` / ``Runtime.UserCodeSyntaxError``), calls it with the event and a Lambda-like
:class:`LambdaContext`, and sends back its JSON result or error. Invocations the handler makes (the
worker's children in the invocation tree) travel back to the emulator over the same connection.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from typing import Any

from squall.driver.platforms.lambda_.emulator import ASYNC_LIMIT, authorize_invoke, too_large
from squall.driver.platforms.lambda_.worker import set_lambda_client


class LambdaContext:
    """The parts of Lambda's context object handlers (and Powertools) use."""

    def __init__(self, function_name: str, memory_limit_in_mb: int, aws_request_id: str, deadline: float):
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_limit_in_mb
        self.aws_request_id = aws_request_id
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


class _ParentInvoker:
    """The Lambda client inside a worker process: invocations go back to the emulator."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def invoke(
        self, FunctionName: str, Payload: bytes | str = b"{}", InvocationType: str = "Event", **_: Any
    ) -> dict[str, Any]:
        if InvocationType != "Event":
            raise RuntimeError("only asynchronous invocations are supported from inside the emulator")
        data = Payload.decode() if isinstance(Payload, bytes) else Payload
        if len(data.encode()) > ASYNC_LIMIT:
            raise too_large(len(data.encode()), ASYNC_LIMIT)
        authorize_invoke(FunctionName)  # with this function's own credentials
        self.conn.send(("invoke", FunctionName, InvocationType, data))
        return {"StatusCode": 202}


def _resolve(target: str) -> Callable[[dict[str, Any], Any], Any]:
    module, _sep, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def init_error(target: str, exc: BaseException, request_id: str = "") -> dict[str, Any]:
    """The FunctionError payload Lambda's Python runtime returns when the handler cannot be loaded (an
    init error): ``errorMessage``, ``errorType``, ``requestId`` and an empty ``stackTrace`` for import,
    syntax and handler-name errors; any other exception of the module's import keeps its own type."""
    module, _sep, name = target.rpartition(".")
    if not isinstance(exc, (ImportError, SyntaxError, AttributeError)):  # the module's own init failed
        trace = traceback.format_exception(exc)
        return {"errorMessage": str(exc), "errorType": type(exc).__name__, "requestId": request_id,
                "stackTrace": trace[-10:]}  # fmt: skip
    if isinstance(exc, AttributeError):
        kind, message = "Runtime.HandlerNotFound", f"Handler '{name}' missing on module '{module}'"
    elif isinstance(exc, SyntaxError):
        kind, message = "Runtime.UserCodeSyntaxError", f"Syntax error in module '{module}': {exc}"
    else:
        kind, message = "Runtime.ImportModuleError", f"Unable to import module '{module}': {exc}"
    return {"errorMessage": message, "errorType": kind, "requestId": request_id, "stackTrace": []}


def serve(conn: Connection) -> None:
    """Run one invocation after another until told to stop."""
    set_lambda_client(_ParentInvoker(conn))
    while True:
        try:
            job = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if job is None:
            return
        context = LambdaContext(**job["context"])
        try:
            handler = _resolve(job["handler"])
        except Exception as exc:  # Lambda's init error: the handler cannot be loaded
            conn.send(("init_error", json.dumps(init_error(job["handler"], exc, context.aws_request_id))))
            continue
        try:
            result = handler(json.loads(job["payload"]), context)
            conn.send(("ok", json.dumps(result)))
        except Exception as exc:  # an unhandled error, as Lambda reports it
            conn.send(("error", json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})))


def main(argv: list[str]) -> int:
    conn = Client(argv[0], family="AF_UNIX", authkey=bytes.fromhex(os.environ["SQUALL_LAMBDA_AUTHKEY"]))
    serve(conn)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
