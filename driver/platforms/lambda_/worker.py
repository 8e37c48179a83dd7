"""One Lambda worker invocation: start the children of the invocation tree, run a rank, report to S3.

Lifecycle of :func:`run_worker_event` (the library behind ``squall.functions.worker.handler``):
write the ``start`` key → invoke the children of its rank range asynchronously → start the heartbeat
thread → load the plan (inline or from S3) → run the rank with the S3 exchange (``sent-<stage>`` and
``stage-<stage>`` keys as it goes; DuckDB's memory limit, threads and temp/home directory come from the
function's memory and ``/tmp``) → rank 0 writes the result (Arrow IPC) → write ``done`` (the
WorkerReport dict) or ``error`` (one line). A crash writes nothing: the driver notices the stale
heartbeat and re-invokes the rank. Keys: :mod:`squall.driver.platforms.lambda_.state`; children:
:mod:`squall.driver.platforms.lambda_.tree`.

The event (JSON)::

    {"query_id": "q…", "function": "<worker function>", "ranks": [lo, hi], "fanout": f, "attempt": n,
     "plan": {"inline": "<plan JSON>"} | {"key": "<exchange prefix>/_run/plan.json"},
     "exchange": {<S3 exchange config>},
     "settings": {"deadline": <epoch s>, "heartbeat_s": 2.0, "threads": null, "storage_options": {}}}
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from squall import aws
from squall.driver.platforms.lambda_ import state as keys
from squall.driver.platforms.lambda_ import tree
from squall.driver.platforms.memory import MIN_WORKER_BYTES, lambda_worker_budget_mb
from squall.errors import AccessDenied, UserError
from squall.exchange.base import Exchange, ExchangeAborted, ExchangeSpec, open_exchange
from squall.exchange.s3 import make_client
from squall.operators.faults import faults_from_env, install_s3_errors, s3_error_rate
from squall.operators.memory import sandbox_memory
from squall.operators.worker import Worker
from squall.plan import Plan

MB_PER_VCPU = 1769  # Lambda gives one vCPU per 1,769 MB of memory
_lambda_client: Any = None


def set_lambda_client(client: Any) -> None:
    """Use ``client`` (boto3 Lambda interface) to invoke children; the local emulator sets its own."""
    global _lambda_client
    _lambda_client = client


def lambda_client() -> Any:
    global _lambda_client
    if _lambda_client is None:
        _lambda_client = aws.client("lambda")
    return _lambda_client


def sandbox_settings(memory_mb: int, query_id: str, rank: int) -> tuple[int, int, dict[str, Any]]:
    """DuckDB threads, the worker's memory budget (bytes: the function's memory less the reserve, see
    driver/platforms/memory.py) and the Sandbox options that keep it (operators/memory.py): one thread per
    vCPU, temp and home directory under ``/tmp`` (the only writable place; removed after the query), spilling
    within half the free ephemeral storage."""
    threads = max(1, math.ceil(memory_mb / MB_PER_VCPU))
    temp = os.path.join(tempfile.gettempdir(), f"squall-duck-{query_id}-{rank}")
    os.makedirs(temp, exist_ok=True)
    budget = max(MIN_WORKER_BYTES, lambda_worker_budget_mb(memory_mb) << 20)
    return threads, budget, sandbox_memory(budget, temp)


class _Status:
    """Writes this attempt's status keys; counts its PUTs."""

    def __init__(self, client: Any, bucket: str, prefix: str, rank: int, attempt: int) -> None:
        self.client, self.bucket = client, bucket
        self.base = keys.attempt_prefix(prefix, rank, attempt)
        self.puts = 0
        self._lock = threading.Lock()

    def put(self, name: str, body: bytes = b"", client: Any = None) -> None:
        (client or self.client).put_object(Bucket=self.bucket, Key=self.base + name, Body=body)
        with self._lock:
            self.puts += 1


def heartbeat_client(config: Mapping[str, Any], interval: float) -> Any:
    """The heartbeat's own S3 client: one try per beat (no retries), timeouts of two intervals."""
    wait = max(1.0, 2 * interval)
    return aws.client(
        "s3", endpoint_url=config.get("endpoint_url"), region=config.get("region"),
        max_pool_connections=1, max_retries=0, read_timeout_s=wait, connect_timeout_s=wait,
    )  # fmt: skip


class _Heartbeat(threading.Thread):
    """Rewrites the ``hb`` key every ``interval`` seconds (a new body each time, so its ETag changes).

    Each beat is one try on a client of its own (:func:`heartbeat_client`, made on the heartbeat's thread,
    off the worker's start-up path, unless given): a failed beat is skipped, the next one comes on time.
    (Through the exchange's client a throttled beat backed off for up to a minute, and the driver took the
    live rank for dead after ``dead_after_s``.)
    """

    def __init__(
        self, status: _Status, interval: float, config: Mapping[str, Any], client: Any = None
    ) -> None:
        super().__init__(name="squall-heartbeat", daemon=True)
        self.status, self.interval, self.config, self.client = status, interval, config, client
        self.stop = threading.Event()

    def halt(self) -> None:
        """Stop beating (idempotent); returns once no beat is in flight, so none lands after ``done``."""
        self.stop.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=10)

    def run(self) -> None:
        if self.client is None:
            self.client = heartbeat_client(self.config, self.interval)
        beat = 0
        while not self.stop.is_set():
            beat += 1
            try:
                self.status.put("hb", str(beat).encode(), client=self.client)
            except Exception:  # a missed beat is not fatal; the driver tolerates a few
                pass
            self.stop.wait(self.interval)


class _ReportingExchange(Exchange):
    """Delegates to the real endpoint and writes a ``sent-<stage>`` key after each send."""

    name = "reporting"

    def __init__(self, inner: Exchange, status: _Status) -> None:
        super().__init__(inner.config, inner.rank, inner.world_size)
        self.inner, self.status = inner, status

    def send(self, spec: ExchangeSpec, parts: Mapping[int, pa.Table]) -> None:
        self.inner.send(spec, parts)
        self.status.put(f"sent-{spec.exchange_id}")

    def receive(self, spec: ExchangeSpec) -> pa.Table:
        return self.inner.receive(spec)

    def aborted(self) -> bool:
        return bool(getattr(self.inner, "aborted", lambda: False)())

    @property
    def supports_claims(self) -> bool:  # type: ignore[override]
        return self.inner.supports_claims

    def claim(self, query_id: str, item: str) -> bool:
        return self.inner.claim(query_id, item)

    def claims(self, query_id: str, prefix: str = "") -> dict[str, int]:
        return self.inner.claims(query_id, prefix)

    def stats(self) -> Any:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()


def _load_plan(event: Mapping[str, Any], client: Any, bucket: str) -> Plan:
    ref = event["plan"]
    if "inline" in ref:
        return Plan.from_json(ref["inline"])
    return Plan.from_json(client.get_object(Bucket=bucket, Key=ref["key"])["Body"].read().decode())


def _invoke_children(event: Mapping[str, Any]) -> int:
    lo, hi = event["ranks"]
    kids = tree.children(lo, hi, int(event["fanout"]))
    if not kids:
        return 0
    client = lambda_client()
    for a, b in kids:
        payload = json.dumps(dict(event, ranks=[a, b])).encode()
        invoke_function(client, event["function"], payload)
    return len(kids)


def invoke_function(client: Any, function: str, payload: bytes) -> None:
    """An asynchronous invocation of ``function``; refused by IAM: a one-line :class:`AccessDenied`."""
    try:
        client.invoke(FunctionName=function, InvocationType="Event", Payload=payload)
    except Exception as exc:
        message = aws.denied_message(exc, f"function {function}")
        if message:
            raise AccessDenied(message) from None
        raise


def _classify(exc: BaseException) -> tuple[str, str]:
    kind = (
        "user" if isinstance(exc, UserError) else "aborted" if isinstance(exc, ExchangeAborted) else "error"
    )
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return kind, message if kind != "error" else f"{type(exc).__name__}: {message}"


def _aborted(client: Any, config: Mapping[str, Any]) -> bool:
    """Whether the query's ABORT marker exists (the S3 exchange factory writes it on failure/cancel)."""
    from botocore.exceptions import ClientError

    try:
        client.head_object(Bucket=config["bucket"], Key=f"{config['prefix']}/ABORT")
    except ClientError:
        return False
    return True


def run_worker_event(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Run one worker invocation (see module doc); returns a small summary (ignored when async)."""
    started = time.time()
    query_id, attempt = event["query_id"], int(event.get("attempt", 0))
    rank = int(event["ranks"][0])
    settings = event.get("settings", {})
    faults = faults_from_env() if attempt == 0 else ()
    install_s3_errors(s3_error_rate(faults_from_env()))
    config = dict(event["exchange"])
    client = make_client(config)
    if _aborted(client, config):
        # a late copy (retry or straggler duplicate) of a query that already ended: write nothing
        return {"rank": rank, "attempt": attempt, "status": "aborted"}
    status = _Status(client, config["bucket"], config["prefix"], rank, attempt)
    status.put(f"start-{int(started * 1000)}")
    invoked = _invoke_children(event)
    heartbeat = _Heartbeat(status, float(settings.get("heartbeat_s", 2.0)), config)
    heartbeat.start()
    memory_mb = int(getattr(context, "memory_limit_in_mb", 0) or settings.get("memory_mb") or 1024)
    threads, budget, sandbox = sandbox_settings(memory_mb, query_id, rank)
    threads = int(settings.get("threads") or threads)
    remaining = (context.get_remaining_time_in_millis() / 1000 - 2) if context is not None else 1e9
    deadline = min(float(settings.get("deadline", 1e18)), time.time() + remaining)
    config["timeout_s"] = max(1.0, min(float(config.get("timeout_s", 600)), deadline - time.time()))
    try:
        plan = _load_plan(event, client, config["bucket"])
        pa.set_cpu_count(threads)
        exchange = _ReportingExchange(open_exchange(config, rank, plan.world_size), status)
        try:
            worker = Worker(plan, rank, exchange, query_id, threads=threads,
                            storage_options=settings.get("storage_options"),
                            on_stage=lambda sid: status.put(f"stage-{sid}"), sandbox_options=sandbox,
                            attempt=attempt, memory_budget=budget)  # fmt: skip
            worker.faults = faults
            result, report = worker.run()
        finally:
            exchange.close()
        result_key = None
        if result is not None:
            result_key = keys.result_key(config["prefix"], attempt, rank)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, result.schema) as writer:
                writer.write_table(result)
            client.put_object(Bucket=config["bucket"], Key=result_key, Body=sink.getvalue().to_pybytes())
            status.puts += 1
        heartbeat.halt()
        doc = {"report": report.to_dict(), "result_key": result_key, "invocations": invoked,
               "status_puts": status.puts + 1, "memory_mb": memory_mb,
               "billed_ms": math.ceil((time.time() - started) * 1000)}  # fmt: skip
        status.put("done", json.dumps(doc).encode())
        return {"rank": rank, "attempt": attempt, "status": "done"}
    except BaseException as exc:
        kind, message = _classify(exc)
        heartbeat.halt()
        doc = {"kind": kind, "error": type(exc).__name__, "message": message, "traceback": traceback.format_exc()[-4000:],
               "invocations": invoked, "status_puts": status.puts + 1, "memory_mb": memory_mb,
               "billed_ms": math.ceil((time.time() - started) * 1000)}  # fmt: skip
        try:
            status.put("error", json.dumps(doc).encode())
        except Exception:
            pass  # the driver's heartbeat check re-invokes the rank
        return {"rank": rank, "attempt": attempt, "status": "error", "message": message}
    finally:
        heartbeat.halt()
        shutil.rmtree(sandbox["temp_directory"], ignore_errors=True)
