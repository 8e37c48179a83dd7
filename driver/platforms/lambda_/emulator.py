"""A local AWS Lambda emulator: boto3's ``invoke`` interface, the real handler in warm local processes.

``LocalLambda(handler="squall.functions.worker.handler", concurrency=16)`` has ``invoke(FunctionName=…,
InvocationType="Event"|"RequestResponse", Payload=bytes)`` like ``boto3.client("lambda")``. Every
invocation goes through a JSON round trip, is checked against Lambda's payload limits (256 KB async,
6 MB sync), and runs in one of at most ``concurrency`` worker processes (``python -m
squall.driver.platforms.lambda_.emulator_process ADDRESS``, a fresh interpreter, not a fork of the
caller). A process is
started on first need (a cold start) and then reused (warm), like an execution environment; asynchronous
invocations beyond the concurrency limit wait in a queue. The handler gets a Lambda-like context
(``function_name``, ``memory_limit_in_mb``, ``aws_request_id``, ``get_remaining_time_in_millis()``…);
a handler that cannot be loaded is an init error (``Runtime.ImportModuleError``…: a FunctionError
payload, and for asynchronous invocations an entry in ``init_errors``, Lambda's on-failure destination);
a handler running past ``timeout_s`` is killed; a process that dies is replaced on the next
invocation. Invocations the handler makes itself (the invocation tree) travel back to this emulator
over the process's connection. Logs go to ``<squall temp>/logs/lambda-<pid>-<slot>.log``.

Each emulated function has its own environment: ``env`` overrides this process's (and the emulator's
defaults ``SQUALL_PLATFORM=lambda``, ``SQUALL_ROLE=worker``), so a function can hold its own credentials
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), as each deployed function holds its role's.
With ``SQUALL_LOCAL_LAMBDA_AUTHORIZE=1`` in the caller's environment, every invocation is first sent to the
Lambda API (``AWS_ENDPOINT_URL``, e.g. moto's server with IAM enforcement) as a ``DryRun`` signed with the
caller's credentials, so ``lambda:InvokeFunction`` outside the caller's policy fails as on AWS
(:func:`authorize_invoke`; invocations from inside an emulated function are checked there, with its
credentials).
"""

from __future__ import annotations

import io
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from typing import Any

from squall.driver.platforms.lambda_.init_errors import INIT_ERRORS
from squall.exchange.local import default_root

ASYNC_LIMIT = 256 * 1024
SYNC_LIMIT = 6 * 1024 * 1024


def too_large(size: int, limit: int) -> Exception:
    from botocore.exceptions import ClientError

    message = f"{size} byte payload exceeds the {limit} byte limit"
    return ClientError({"Error": {"Code": "RequestEntityTooLargeException", "Message": message}}, "Invoke")


#: set to "1": check each invocation with a DryRun against the Lambda API first (:func:`authorize_invoke`)
AUTHORIZE_ENV = "SQUALL_LOCAL_LAMBDA_AUTHORIZE"


def authorize_invoke(function_name: str) -> None:
    """With ``SQUALL_LOCAL_LAMBDA_AUTHORIZE=1``: a ``DryRun`` invocation of ``function_name`` on the Lambda API
    with this process's credentials; its ClientError (AccessDenied…) propagates as the real invoke's would."""
    if os.environ.get(AUTHORIZE_ENV) != "1":
        return
    from squall import aws

    aws.client("lambda", max_retries=0).invoke(
        FunctionName=function_name, InvocationType="DryRun", Payload=b"{}"
    )


@dataclass
class _Job:
    payload: str
    future: Future[dict[str, Any]] | None  # None: asynchronous


class LocalLambda:
    """The emulator (see module doc). ``stats`` counts invocations, cold starts, crashes, timeouts."""

    def __init__(
        self,
        handler: str = "squall.functions.worker.handler",
        *,
        function_name: str = "squall-worker",
        concurrency: int = 16,
        memory_mb: int = 1024,
        timeout_s: float = 300.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.handler, self.function_name = handler, function_name
        self.memory_mb, self.timeout_s = memory_mb, timeout_s
        self.env = dict(env or {})
        self.stats = {"invocations": 0, "cold_starts": 0, "crashes": 0, "timeouts": 0}
        #: asynchronous invocations that failed with an init error: ``{"event", "errorType", "errorMessage"}``
        #: (what Lambda would send to the function's on-failure destination)
        self.init_errors: list[dict[str, Any]] = []
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._authkey = secrets.token_bytes(16)
        self._lock = threading.Lock()
        self._in_flight = 0  # queued or running invocations
        self._idle = threading.Condition()
        self._slots = [_Slot(self, i) for i in range(concurrency)]
        self._closed = False

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def invoke(
        self,
        FunctionName: str,
        Payload: bytes | str = b"{}",
        InvocationType: str = "RequestResponse",
        **_: Any,
    ) -> dict[str, Any]:
        """boto3's ``Lambda.Client.invoke`` (the parts Squall uses)."""
        authorize_invoke(FunctionName)
        return self._submit(FunctionName, Payload, InvocationType)

    def _submit(self, FunctionName: str, Payload: bytes | str, InvocationType: str) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("the local Lambda emulator is closed")
        if FunctionName != self.function_name:
            from botocore.exceptions import ClientError

            error = {"Code": "ResourceNotFoundException", "Message": f"Function not found: {FunctionName}"}
            raise ClientError({"Error": error}, "Invoke")
        data = Payload.encode() if isinstance(Payload, str) else bytes(Payload)
        asynchronous = InvocationType == "Event"
        limit = ASYNC_LIMIT if asynchronous else SYNC_LIMIT
        if len(data) > limit:
            raise too_large(len(data), limit)
        payload = json.dumps(json.loads(data or b"{}"))  # the JSON round trip Lambda does
        self._count("invocations")
        with self._idle:
            self._in_flight += 1
        if asynchronous:
            self._queue.put(_Job(payload, None))
            return {"StatusCode": 202, "Payload": io.BytesIO(b"")}
        future: Future[dict[str, Any]] = Future()
        self._queue.put(_Job(payload, future))
        out = future.result()
        response: dict[str, Any] = {"StatusCode": 200, "Payload": io.BytesIO(out["payload"].encode())}
        if out.get("error"):  # the X-Amz-Function-Error header, as boto3 exposes it
            response["FunctionError"] = "Unhandled"
            response["ResponseMetadata"] = {"HTTPHeaders": {"x-amz-function-error": "Unhandled"}}
        return response

    def _failed_async(self, payload: str, out: dict[str, Any]) -> None:
        try:
            error = json.loads(out["payload"])
        except ValueError:
            return
        if out.get("init") or error.get("errorType") in INIT_ERRORS:
            with self._lock:
                self.init_errors.append({"event": json.loads(payload), **error})

    def _finished_one(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no invocation is queued or running; False when ``timeout_s`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight <= 0, timeout=timeout_s)

    def close(self) -> None:
        """Stop the worker processes (running invocations are killed)."""
        if self._closed:
            return
        self._closed = True
        for _ in self._slots:
            self._queue.put(None)
        for slot in self._slots:
            slot.stop()


class _Slot:
    """One concurrent execution environment: a thread feeding a warm worker process."""

    def __init__(self, emulator: LocalLambda, index: int) -> None:
        self.emu, self.index = emulator, index
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.listener: Listener | None = None
        self.thread = threading.Thread(target=self._loop, name=f"lambda-slot-{index}", daemon=True)
        self.thread.start()

    def _spawn(self) -> None:
        if self.listener is None:
            self.listener = Listener(family="AF_UNIX", authkey=self.emu._authkey)
        logs = default_root() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {"POWERTOOLS_SERVICE_NAME": "squall", "POWERTOOLS_METRICS_NAMESPACE": "Squall", **os.environ,
               "SQUALL_PLATFORM": "lambda", "SQUALL_ROLE": "worker", "POWERTOOLS_TRACE_DISABLED": "1"}  # fmt: skip
        env.update(self.emu.env)  # the function's own environment (its credentials, …)
        env.update(SQUALL_LAMBDA_AUTHKEY=self.emu._authkey.hex(), AWS_LAMBDA_FUNCTION_NAME=self.emu.function_name,
                   AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(self.emu.memory_mb))  # fmt: skip
        with open(logs / f"lambda-{os.getpid()}-{self.index}.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "squall.driver.platforms.lambda_.emulator_process", str(self.listener.address)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            )  # fmt: skip
        self.conn = self.listener.accept()
        self.emu._count("cold_starts")

    def _loop(self) -> None:
        while True:
            job = self.emu._queue.get()
            if job is None:
                return
            try:
                out = self._run(job)
            finally:
                self.emu._finished_one()
            if job.future is not None:
                job.future.set_result(out)
            elif out.get("error"):
                self.emu._failed_async(job.payload, out)

    def _run(self, job: _Job) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._spawn()
        assert self.conn is not None and self.proc is not None
        deadline = time.monotonic() + self.emu.timeout_s
        request_id = str(uuid.uuid4())
        context = {"function_name": self.emu.function_name, "memory_limit_in_mb": self.emu.memory_mb,
                   "aws_request_id": request_id, "deadline": time.time() + self.emu.timeout_s}  # fmt: skip
        try:
            self.conn.send({"payload": job.payload, "context": context, "handler": self.emu.handler})
            while True:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    self.emu._count("timeouts")
                    self._kill()
                    return _error(
                        "Sandbox.Timedout", f"Task timed out after {self.emu.timeout_s:.2f} seconds"
                    )
                msg = self.conn.recv()
                if msg[0] == "invoke":
                    _tag, name, kind, payload = msg
                    try:
                        self.emu._submit(name, payload, kind)  # authorized in the child
                    except Exception:  # the child is lost, as with a failed async invoke
                        pass
                else:
                    return {"payload": msg[1], "error": msg[0] != "ok", "init": msg[0] == "init_error"}
        except (EOFError, OSError, BrokenPipeError):
            self.emu._count("crashes")
            self._kill()
            return _error("Runtime.ExitError", "Runtime exited without providing a reason")

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn = None, None

    def stop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.listener is not None:
            self.listener.close()


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"payload": json.dumps({"errorType": kind, "errorMessage": message}), "error": True}
