"""The Lambda platform: W ranks as AWS Lambda invocations, exchanging through S3.

Lifecycle of one query (:meth:`LambdaPlatform.execute`): prepare the S3 exchange (its prefix also
holds the run's state, see :mod:`squall.driver.lambda_state`) → put the plan on S3 if the event would
exceed the async payload limit → invoke ⌈W/f⌉ first-level workers (each starts its block, see the
invocation tree) → poll the status keys (one LIST per 1,000 keys per round, backoff 50 ms … 1 s,
reset when something changes), report progress, and

- fail fast with the first real error a rank writes (the exchange's ABORT marker stops the others);
- re-invoke a rank that did not start within ``start_timeout_s`` or whose heartbeat went stale for
  ``dead_after_s`` (a crash, a timeout): the new attempt is harmless thanks to the exchange's
  deterministic keys and ``If-None-Match`` writes;
- launch one duplicate of a straggler: a rank that has not sent its output of a stage
  max(``straggler_s``, 3 x the time the first half of the senders took) after half of that
  stage's senders did (the first attempt to finish wins);
- stop at the query's deadline (``timeout_s``) or on :meth:`cancel`;

→ read rank 0's result → delete every object of the query (exchange and state). Attempts still
running after that (the losing copy of a duplicate) stop at the ABORT marker written after the
clean-up or at their deadline; what they write expires with the bucket's ``exchange/`` lifecycle rule.

``LambdaPlatform(function=NAME)`` uses boto3's Lambda client; ``LocalLambdaPlatform`` ("lambda-local")
runs the same code path against :class:`squall.driver.lambda_local.LocalLambda`, which runs the real
handler in local processes.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from squall.driver import lambda_state as keys
from squall.driver.cost import query_cost
from squall.driver.platform import Execution, Platform, Progress
from squall.errors import OptionError, QueryCancelled, QueryRuntimeError, SquallError, WorkerError
from squall.exchange.s3 import S3ExchangeFactory
from squall.plan import Plan, ScanInput

DEFAULT_SETTINGS: dict[str, Any] = {
    "memory_mb": 4096,  # the worker function's memory (SQUALL_WORKER_MEMORY_MB when deployed)
    "function_timeout_s": 300.0,  # the worker function's timeout (SQUALL_WORKER_TIMEOUT_SECONDS)
    "timeout_s": None,  # query deadline; default: the function timeout
    "heartbeat_s": 2.0,
    "dead_after_s": 10.0,
    "start_timeout_s": 60.0,
    "straggler_s": 5.0,
    "max_attempts": 3,
    "drain_s": 30.0,  # after a failure, how long to wait for the other ranks to stop before clean-up
    "poll_min_s": 0.05,
    "poll_max_s": 1.0,
    "scan_mb_per_s": 60.0,  # pessimistic per-function S3 scan rate for the deadline estimate
    "region": None,
    "architecture": "arm64",
    "threads": None,
}


@dataclass
class _Attempt:
    rank: int
    attempt: int
    invoked_at: float  # driver clock
    reason: str = "first"
    started_ms: int | None = None
    hb_etag: str | None = None
    hb_seen_at: float = 0.0
    finished: bool = False


@dataclass
class _Run:
    """What the driver knows about a running query (from the status keys)."""

    world_size: int
    attempts: dict[int, list[_Attempt]] = field(default_factory=dict)
    sent: dict[int, set[int]] = field(default_factory=dict)  # stage -> ranks
    first_sent_at: dict[int, float] = field(default_factory=dict)
    half_sent_at: dict[int, float] = field(default_factory=dict)
    stages_done: dict[int, set[int]] = field(default_factory=dict)  # stage -> ranks
    done: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> done doc (first wins)
    closed_docs: list[dict[str, Any]] = field(default_factory=list)  # every done/error doc read
    seen: set[str] = field(default_factory=set)  # done/error keys already read
    retries: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    invocations: int = 0
    requests: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, n: int = 1) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + n

    def attempt(self, rank: int, number: int) -> _Attempt | None:
        return next((a for a in self.attempts.get(rank, []) if a.attempt == number), None)


def _env_settings() -> dict[str, Any]:
    out: dict[str, Any] = {}
    if os.environ.get("SQUALL_WORKER_MEMORY_MB"):
        out["memory_mb"] = int(os.environ["SQUALL_WORKER_MEMORY_MB"])
    if os.environ.get("SQUALL_WORKER_TIMEOUT_SECONDS"):
        out["function_timeout_s"] = float(os.environ["SQUALL_WORKER_TIMEOUT_SECONDS"])
    return out


def _default_exchange_url() -> str | None:
    bucket = os.environ.get("SQUALL_BUCKET")
    if not bucket:
        return None
    return f"s3://{bucket}/{os.environ.get('SQUALL_EXCHANGE_PREFIX', 'exchange/').strip('/')}"


class LambdaPlatform(Platform):
    """Ranks as Lambda invocations of ``function`` (see module doc)."""

    name = "lambda"

    def __init__(
        self,
        workers: int | None = None,
        exchange: str = "s3",
        exchange_options: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        *,
        function: str | None = None,
        fanout: int | None = None,
        client: Any = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.world_size = int(workers or 4)
        max_workers = int(os.environ.get("SQUALL_MAX_WORKERS", 1024))
        if not 1 <= self.world_size <= max_workers:
            raise OptionError(f"workers must be between 1 and {max_workers}, got {workers}")
        if fanout is not None and fanout < 2:
            raise OptionError(f"--fanout must be at least 2, got {fanout}")
        self.fanout = int(fanout or keys.default_fanout(self.world_size))
        options = dict(exchange_options or {})
        if exchange not in ("s3",):
            raise OptionError(f"the {self.name} platform exchanges through S3, not {exchange!r}")
        options.setdefault("bucket_url", _default_exchange_url())
        if not options["bucket_url"]:
            raise OptionError(
                f"the {self.name} platform needs an S3 bucket for exchange and state: "
                "pass --exchange s3://bucket/prefix or set SQUALL_BUCKET"
            )
        self.factory = S3ExchangeFactory(**options)
        self.storage_options = dict(storage_options or {})
        self.function = function or os.environ.get("SQUALL_WORKER_FUNCTION") or ""
        if not self.function:
            raise OptionError(f"the {self.name} platform needs --function NAME or SQUALL_WORKER_FUNCTION")
        self.settings = {**DEFAULT_SETTINGS, **_env_settings(), **(settings or {})}
        unknown = set(self.settings) - set(DEFAULT_SETTINGS)
        if unknown:
            raise OptionError(f"unknown lambda platform setting(s): {', '.join(sorted(unknown))}")
        self._client = client
        self._cancel = threading.Event()

    # --- clients --------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "lambda", config=Config(retries={"max_attempts": 5, "mode": "standard"})
            )
        return self._client

    @property
    def s3(self) -> Any:
        return self.factory.client

    def cancel(self) -> None:
        self._cancel.set()

    # --- limits ---------------------------------------------------------------------------------

    def _deadline_s(self, plan: Plan) -> float:
        """The query's time budget; refuses plans whose slowest rank cannot scan its data in time."""
        limit = float(self.settings["function_timeout_s"])
        if limit > 900:
            raise OptionError(f"Lambda functions run at most 900 s, not {limit:g} s")
        budget = float(self.settings["timeout_s"] or limit)
        per_rank = [0] * plan.world_size
        for stage in plan.stages:
            for inp in stage.inputs:
                if isinstance(inp, ScanInput):
                    for rank in stage.ranks:
                        per_rank[rank] += sum(s.nbytes for s in inp.splits_for(rank))
        estimate = max(per_rank, default=0) / (float(self.settings["scan_mb_per_s"]) * 1e6)
        if estimate > min(budget, limit):
            raise OptionError(
                f"the slowest worker would scan for about {estimate:.0f} s, over the {min(budget, limit):g} s "
                f"limit of a Lambda worker: use more workers (now {plan.world_size})"
            )
        return min(budget, limit)

    # --- invocations ----------------------------------------------------------------------------

    def _invoke(self, run: _Run, event: dict[str, Any], lo: int, hi: int, attempt: int, reason: str) -> None:
        payload = json.dumps(dict(event, ranks=[lo, hi], attempt=attempt)).encode()
        if len(payload) > keys.ASYNC_PAYLOAD_LIMIT:
            raise OptionError(f"worker event of {len(payload)} bytes exceeds the async payload limit")
        now = time.monotonic()
        for rank in range(lo, hi):
            run.attempts.setdefault(rank, []).append(_Attempt(rank, attempt, now, reason))
        self.client.invoke(FunctionName=self.function, InvocationType="Event", Payload=payload)
        run.invocations += 1

    def _base_event(self, plan: Plan, query_id: str, config: dict[str, Any], run: _Run) -> dict[str, Any]:
        deadline = time.time() + self._deadline_s(plan)
        settings = {
            "deadline": deadline,
            "heartbeat_s": self.settings["heartbeat_s"],
            "threads": self.settings["threads"],
            "memory_mb": self.settings["memory_mb"],
            "storage_options": self.storage_options,
        }
        event = {"query_id": query_id, "function": self.function, "fanout": self.fanout,
                 "exchange": config, "settings": settings, "plan": {"inline": plan.to_json()}}  # fmt: skip
        if len(json.dumps(event)) > keys.INLINE_PLAN_LIMIT:
            key = keys.plan_key(config["prefix"])
            self.s3.put_object(Bucket=config["bucket"], Key=key, Body=plan.to_json().encode())
            run.count("put")
            event["plan"] = {"key": key}
        return event

    # --- the query ------------------------------------------------------------------------------

    def execute(
        self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None = None
    ) -> Execution:
        if plan.world_size != self.world_size:
            raise OptionError(f"plan is for {plan.world_size} workers, platform has {self.world_size}")
        self._cancel.clear()
        run = _Run(self.world_size)
        config = self.factory.prepare(query_id, self.world_size)
        t0 = time.monotonic()
        epoch0 = time.time()
        finished = False
        try:
            event = self._base_event(plan, query_id, config, run)
            deadline = t0 + (event["settings"]["deadline"] - epoch0)
            for lo, hi in keys.first_level(self.world_size, self.fanout):
                self._invoke(run, event, lo, hi, 0, "first")
            self._track(plan, run, config, event, deadline, progress)
            table = self._result(run, config)
            finished = True
            details = self._details(run, epoch0, time.monotonic() - t0)
            return Execution(table, [run.done[r]["report"] for r in range(self.world_size)], details)
        except BaseException as exc:
            if not finished:
                self.factory.abort(config, _abort_reason(exc))
                self._drain(run, config)
            raise
        finally:
            self.factory.cleanup(config)
            if any(not a.finished for atts in run.attempts.values() for a in atts):
                self.factory.abort(config, "query finished")  # late copies stop at the marker
                self._after_late_copies(config)

    def _track(
        self,
        plan: Plan,
        run: _Run,
        config: dict[str, Any],
        event: dict[str, Any],
        deadline: float,
        progress: Callable[[Progress], None] | None,
    ) -> None:
        state = Progress(len(plan.stages), self.world_size)
        delay = float(self.settings["poll_min_s"])
        while len(run.done) < self.world_size:
            if self._cancel.is_set():
                raise QueryCancelled("query cancelled")
            if time.monotonic() > deadline:
                raise QueryRuntimeError(
                    f"query did not finish within its deadline of {self._deadline_s(plan):g} s"
                )
            changed = self._poll(run, config)
            if changed and progress is not None:
                state.done = {sid: len(r) for sid, r in run.stages_done.items()}
                progress(state)
            self._relaunch(plan, run, event)
            delay = float(self.settings["poll_min_s"]) if changed else delay * 2
            delay = min(delay, float(self.settings["poll_max_s"]))
            time.sleep(delay)

    def _after_late_copies(self, config: dict[str, Any]) -> None:
        """Copies of ranks may still run after clean-up; on AWS the bucket's lifecycle rule removes what
        they write. (The local emulator knows when they end and cleans up after them.)"""

    def _drain(self, run: _Run, config: dict[str, Any]) -> None:
        """After an abort: wait up to ``drain_s`` for the attempts to stop, so clean-up is complete."""
        until = time.monotonic() + float(self.settings["drain_s"])
        while time.monotonic() < until:
            running = [a for atts in run.attempts.values() for a in atts if not a.finished]
            if not running:
                return
            try:
                self._poll(run, config)
            except SquallError:
                pass  # the errors of the other ranks (aborted) are expected now
            time.sleep(0.2)

    def _poll(self, run: _Run, config: dict[str, Any]) -> bool:
        """One LIST round over the status keys; GETs new done/error objects. True when something changed."""
        bucket, prefix = config["bucket"], config["prefix"]
        changed = False
        now = time.monotonic()
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=keys.status_prefix(prefix)
        )
        for page in pages:
            run.count("list")
            for obj in page.get("Contents", []):
                sk = keys.parse_status_key(obj["Key"], prefix)
                if sk is None:
                    continue
                att = run.attempt(sk.rank, sk.attempt)
                if att is None:  # a child's attempt 0 seen before we recorded it (cannot happen) or stray
                    continue
                if sk.what == "start" and att.started_ms is None:
                    att.started_ms, att.hb_seen_at, changed = sk.number, now, True
                elif sk.what == "hb" and obj.get("ETag") != att.hb_etag:
                    att.hb_etag, att.hb_seen_at = obj.get("ETag"), now
                elif sk.what == "sent" and sk.rank not in run.sent.setdefault(sk.number, set()):
                    run.sent[sk.number].add(sk.rank)
                    changed = True
                elif sk.what == "stage" and sk.rank not in run.stages_done.setdefault(sk.number, set()):
                    run.stages_done[sk.number].add(sk.rank)
                    changed = True
                elif sk.what in ("done", "error") and obj["Key"] not in run.seen:
                    run.seen.add(obj["Key"])
                    changed = True
                    self._closed(run, att, sk.what, bucket, obj["Key"])
        return changed

    def _closed(self, run: _Run, att: _Attempt, what: str, bucket: str, key: str) -> None:
        run.count("get")
        doc = json.loads(self.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        doc.update(rank=att.rank, attempt=att.attempt, outcome=what)
        att.finished = True
        run.closed_docs.append(doc)
        if what == "done":
            run.done.setdefault(att.rank, doc)
            return
        if doc["kind"] == "aborted":
            return
        if doc["kind"] == "user":
            raise QueryRuntimeError(doc["message"])
        err = WorkerError(f"rank {att.rank} failed: {doc['message']}")
        err.__notes__ = [doc.get("traceback", "")]
        raise err

    def _relaunch(self, plan: Plan, run: _Run, event: dict[str, Any]) -> None:
        """Re-invoke dead ranks and duplicate stragglers (see module doc)."""
        now = time.monotonic()
        s = self.settings
        for stage in plan.stages:  # half of a stage's senders have sent: remember when
            senders = stage.output.senders if stage.output.kind != "result" else ()
            sent = len(run.sent.get(stage.id, ()))
            if sent and stage.id not in run.first_sent_at:
                run.first_sent_at[stage.id] = now
            if senders and stage.id not in run.half_sent_at and sent >= math.ceil(len(senders) / 2):
                run.half_sent_at[stage.id] = now
        for rank in range(self.world_size):
            if rank in run.done:
                continue
            atts = run.attempts[rank]
            live = [a for a in atts if not a.finished and not _dead(a, now, s)]
            if live:
                if len(atts) == 1 and self._straggling(plan, run, rank, now):
                    run.duplicates.append({"rank": rank, "attempt": len(atts), "after_s": round(now, 3)})
                    self._invoke(run, event, rank, rank + 1, len(atts), "straggler")
                continue
            last = atts[-1]
            reason = "did not start" if last.started_ms is None else "heartbeat lost"
            if len(atts) >= int(s["max_attempts"]):
                raise WorkerError(f"rank {rank} failed: {reason} in {len(atts)} attempts")
            for a in atts:
                a.finished = True  # given up on
            run.retries.append({"rank": rank, "attempt": len(atts), "reason": reason})
            self._invoke(run, event, rank, rank + 1, len(atts), reason)

    def _straggling(self, plan: Plan, run: _Run, rank: int, now: float) -> bool:
        for stage in plan.stages:
            if stage.output.kind == "result" or rank not in stage.output.senders:
                continue
            if rank in run.sent.get(stage.id, ()):
                continue
            since = run.half_sent_at.get(stage.id)
            if since is None:
                return False
            spread = since - run.first_sent_at.get(stage.id, since)  # how long the faster half took
            return now - since > max(float(self.settings["straggler_s"]), 3 * spread)
        return False

    def _result(self, run: _Run, config: dict[str, Any]) -> pa.Table:
        key = run.done[0]["result_key"]
        run.count("get")
        body = self.s3.get_object(Bucket=config["bucket"], Key=key)["Body"].read()
        return pa.ipc.open_file(pa.py_buffer(body)).read_all()

    def _details(self, run: _Run, epoch0: float, elapsed: float) -> dict[str, Any]:
        starts = sorted(
            a.started_ms / 1000 - epoch0 for atts in run.attempts.values() for a in atts[:1] if a.started_ms
        )
        billed: list[tuple[int, int]] = []
        requests: dict[str, int] = {}
        invocations = run.invocations
        for doc in run.closed_docs:
            billed.append((int(doc["billed_ms"]), int(doc["memory_mb"])))
            invocations += int(doc.get("invocations", 0))
            _add(requests, {"put": int(doc.get("status_puts", 0))})
            report = doc.get("report")
            if report:
                _add(requests, report["storage_requests"])
                _add(requests, report["exchange"].get("requests", {}))
        open_attempts = [a for atts in run.attempts.values() for a in atts if not a.finished and a.started_ms]
        for a in open_attempts:  # still running (a losing duplicate): billed until now, at least
            billed.append((int((time.time() - a.started_ms / 1000) * 1000), int(self.settings["memory_mb"])))
        _add(requests, run.requests)
        _add(requests, self.factory.requests)
        region = self.settings["region"] or os.environ.get("AWS_REGION") or "us-east-1"
        lam = {
            "function": self.function,
            "fanout": self.fanout,
            "tree_depth": keys.tree_depth(self.world_size, self.fanout),
            "invocations": invocations,
            "startup_s": {
                "first": round(starts[0], 3) if starts else None,
                "median": round(statistics.median(starts), 3) if starts else None,
                "all": round(starts[-1], 3) if starts else None,
            },
            "retries": len(run.retries),
            "duplicates": len(run.duplicates),
            "relaunched": run.retries + run.duplicates,
            "driver_requests": dict(run.requests),
            "memory_mb": self.settings["memory_mb"],
        }
        cost = query_cost(billed, invocations, requests, region=region,
                          architecture=str(self.settings["architecture"]))  # fmt: skip
        return {"lambda": lam, **cost}


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + int(v)


def _dead(a: _Attempt, now: float, s: dict[str, Any]) -> bool:
    if a.started_ms is None:
        return now - a.invoked_at > float(s["start_timeout_s"])
    return now - a.hb_seen_at > float(s["dead_after_s"])


def _abort_reason(exc: BaseException) -> str:
    if isinstance(exc, SquallError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return "driver stopped"


class LocalLambdaPlatform(LambdaPlatform):
    """The Lambda platform against the local emulator (real handler in local processes)."""

    name = "lambda-local"

    def __init__(self, workers: int | None = None, *, concurrency: int | None = None, **kwargs: Any) -> None:
        from squall.driver.lambda_local import LocalLambda

        kwargs.setdefault("function", "squall-worker")
        settings = {"memory_mb": 1024, "heartbeat_s": 1.0, "dead_after_s": 8.0, "straggler_s": 6.0,
                    **(kwargs.pop("settings", None) or {})}  # fmt: skip
        super().__init__(workers, settings=settings, **kwargs)
        if self._client is None:
            self._client = LocalLambda(
                function_name=self.function,
                concurrency=concurrency or self.world_size + 2,
                memory_mb=int(self.settings["memory_mb"]),
                timeout_s=float(self.settings["function_timeout_s"]),
            )

    def _after_late_copies(self, config: dict[str, Any]) -> None:
        if self._client.wait_idle(float(self.settings["drain_s"]) * 2):
            self.factory.cleanup(config)

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


_connections: dict[int, Any] = {}


def connection_for(workers: int | None) -> Any:
    """The driver function's Connection for ``workers`` (kept while the environment is warm).

    Data: ``SQUALL_DATA`` or ``s3://$SQUALL_BUCKET/$SQUALL_DATA_PREFIX``; platform: ``SQUALL_PLATFORM``
    (``lambda`` when deployed; ``lambda-local`` runs the emulator, for tests).
    """
    from squall.connection import Connection

    count = int(workers or os.environ.get("SQUALL_DEFAULT_WORKERS", 4))
    if count not in _connections:
        data = os.environ.get("SQUALL_DATA")
        if not data and os.environ.get("SQUALL_BUCKET"):
            data = f"s3://{os.environ['SQUALL_BUCKET']}/{os.environ.get('SQUALL_DATA_PREFIX', 'data/')}"
        platform = os.environ.get("SQUALL_PLATFORM", "lambda")
        _connections[count] = Connection(data, workers=count, platform=platform)
    return _connections[count]
