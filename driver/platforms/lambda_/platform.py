"""The Lambda platform: W ranks as AWS Lambda invocations, exchanging through S3.

Lifecycle of one query (:meth:`LambdaPlatform.execute`): prepare the S3 exchange (its prefix also
holds the run's state, see :mod:`~squall.driver.platforms.lambda_.state`) → put the plan on S3 if the
event would exceed the async payload limit → invoke ⌈W/f⌉ first-level workers (each starts its block,
see :mod:`~squall.driver.platforms.lambda_.tree`) → poll the status keys
(:mod:`~squall.driver.platforms.lambda_.run`: one LIST per 1,000 keys per round, backoff 50 ms … 1 s,
reset when something changes), report progress, and

- fail fast with the first real error a rank writes (the exchange's ABORT marker stops the others);
- re-invoke a rank that did not start within ``start_timeout_s`` or whose heartbeat went stale for
  ``dead_after_s``, and launch one duplicate of a straggler
  (:mod:`~squall.driver.platforms.lambda_.retries`);
- stop at the query's deadline (``timeout_s``) or on :meth:`cancel`;

→ read rank 0's result, sum up the ``lambda`` stats and the cost
(:mod:`~squall.driver.platforms.lambda_.summary`) → delete every object of the query (exchange and
state). Attempts still running after that (the losing copy of a duplicate) stop at the ABORT marker
written after the clean-up or at their deadline; what they write expires with the bucket's
``exchange/`` lifecycle rule.

A bucket (``--exchange s3://…`` or ``SQUALL_BUCKET``) and the worker function are what a run needs, not
planning or ``explain --estimate``: the platform is created without them and
:meth:`LambdaPlatform.check_ready` says, in one line, which is missing when a query runs.

``LambdaPlatform(function=NAME)`` uses boto3's Lambda client (:func:`squall.aws.client`);
``LocalLambdaPlatform`` ("lambda-local") runs the same code path against
:class:`~squall.driver.platforms.lambda_.emulator.LocalLambda`, which runs the real handler in local
processes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa

from squall import aws
from squall.driver.platforms.base import Execution, Platform, Progress
from squall.driver.platforms.lambda_ import state as keys
from squall.driver.platforms.lambda_ import tree
from squall.driver.platforms.lambda_.emulator import LocalLambda
from squall.driver.platforms.lambda_.init_errors import probe_error
from squall.driver.platforms.lambda_.retries import relaunches
from squall.driver.platforms.lambda_.run import Attempt, Run, poll
from squall.driver.platforms.lambda_.summary import details
from squall.driver.platforms.lambda_.worker import invoke_function
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
    "probe_after_s": 10.0,  # no rank started by then: one synchronous probe for an init error (None: never)
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
    exchanges: ClassVar[tuple[str, ...]] = ("s3",)
    storages: ClassVar[tuple[str, ...]] = ("s3",)  # the functions cannot see this machine's files
    needs_s3_location: ClassVar[bool] = True
    options: ClassVar[tuple[str, ...]] = ("fanout", "function")

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
        self.fanout = int(fanout or tree.default_fanout(self.world_size))
        options = dict(exchange_options or {})
        self.check_exchange(exchange)
        options.setdefault("bucket_url", _default_exchange_url())
        #: the S3 exchange's levels option (the scale model reads it; no bucket is needed to plan or estimate)
        self.exchange_levels: int | str = options.get("levels", "auto")
        # a bucket and a function are needed to run a query, not to plan one or estimate it: check_ready()
        self._factory = S3ExchangeFactory(**options) if options["bucket_url"] else None
        self.storage_options = dict(storage_options or {})
        self.function = function or os.environ.get("SQUALL_WORKER_FUNCTION") or ""
        self.settings = {**DEFAULT_SETTINGS, **_env_settings(), **(settings or {})}
        unknown = set(self.settings) - set(DEFAULT_SETTINGS)
        if unknown:
            raise OptionError(f"unknown lambda platform setting(s): {', '.join(sorted(unknown))}")
        self._client = client
        self._cancel = threading.Event()

    # --- what a run needs -----------------------------------------------------------------------

    def check_ready(self) -> None:
        """OptionError (one line) when a query cannot run: no S3 bucket for exchange and state, or no
        worker function. Planning and ``explain --estimate`` need neither (checked when a query runs)."""
        if self._factory is None:
            raise OptionError(_no_bucket(self.name))
        if not self.function:
            raise OptionError(f"the {self.name} platform needs --function NAME or SQUALL_WORKER_FUNCTION")

    @property
    def factory(self) -> S3ExchangeFactory:
        """The S3 exchange of every query (it holds the run's state too); OptionError without a bucket."""
        if self._factory is None:
            raise OptionError(_no_bucket(self.name))
        return self._factory

    # --- clients --------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client("lambda")
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

    def _invoke(self, run: Run, event: dict[str, Any], lo: int, hi: int, attempt: int, reason: str) -> None:
        payload = json.dumps(dict(event, ranks=[lo, hi], attempt=attempt)).encode()
        if len(payload) > keys.ASYNC_PAYLOAD_LIMIT:
            raise OptionError(f"worker event of {len(payload)} bytes exceeds the async payload limit")
        now = time.monotonic()
        for rank in range(lo, hi):
            run.attempts.setdefault(rank, []).append(Attempt(rank, attempt, now, reason))
        invoke_function(self.client, self.function, payload)
        run.invocations += 1

    def _base_event(self, plan: Plan, query_id: str, config: dict[str, Any], run: Run) -> dict[str, Any]:
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
        self.check_ready()
        self._cancel.clear()
        run = Run(self.world_size)
        config = self.factory.prepare(query_id, self.world_size)
        t0 = time.monotonic()
        epoch0 = time.time()
        finished = False
        try:
            event = self._base_event(plan, query_id, config, run)
            deadline = t0 + (event["settings"]["deadline"] - epoch0)
            for lo, hi in tree.first_level(self.world_size, self.fanout):
                self._invoke(run, event, lo, hi, 0, "first")
            self._track(plan, run, config, event, deadline, progress)
            table = self._result(run, config, plan.result_stage.ranks)
            finished = True
            summary = details(run, epoch0, function=self.function, fanout=self.fanout, settings=self.settings,
                              factory_requests=self.factory.requests)  # fmt: skip
            return Execution(table, [run.done[r]["report"] for r in range(self.world_size)], summary)
        except BaseException as exc:
            if not finished:
                self.factory.abort(config, _abort_reason(exc))
                self._drain(run, config)
            raise
        finally:
            self.factory.cleanup(config)
            if run.unfinished():
                self.factory.abort(config, "query finished")  # late copies stop at the marker
                self._after_late_copies(config)

    def _track(
        self,
        plan: Plan,
        run: Run,
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
            self._start_errors(config)
            changed = poll(run, self.s3, config, time.monotonic())
            self._probe_if_silent(run)
            if changed and progress is not None:
                state.done = {sid: len(r) for sid, r in run.stages_done.items()}
                progress(state)
            for rank, attempt, reason in relaunches(plan, run, self.settings, time.monotonic()):
                self._invoke(run, event, rank, rank + 1, attempt, reason)
            delay = float(self.settings["poll_min_s"]) if changed else delay * 2
            delay = min(delay, float(self.settings["poll_max_s"]))
            time.sleep(delay)

    def _probe_if_silent(self, run: Run) -> None:
        """No rank started ``probe_after_s`` after the first invocation: one synchronous probe; an init
        error (the handler module cannot load) fails the query with Lambda's message
        (:mod:`~squall.driver.platforms.lambda_.init_errors`)."""
        if run.probed or not run.attempts or self.settings["probe_after_s"] is None:
            return
        first = min(a.invoked_at for atts in run.attempts.values() for a in atts)
        if time.monotonic() - first < float(self.settings["probe_after_s"]):
            return
        if any(a.started_ms is not None for atts in run.attempts.values() for a in atts):
            run.probed = True
            return
        run.probed = True
        run.invocations += 1
        message = probe_error(self.client, self.function)
        if message:
            raise WorkerError(message)

    def _start_errors(self, config: dict[str, Any]) -> None:
        """Raise WorkerError when a worker of this query cannot start. On AWS the handler reports that itself
        (an ``error`` key of kind "start", :mod:`~squall.driver.platforms.lambda_.startup`); the emulator
        also reports init errors of the handler module (Lambda's on-failure destination)."""

    def _after_late_copies(self, config: dict[str, Any]) -> None:
        """Copies of ranks may still run after clean-up; on AWS the bucket's lifecycle rule removes what
        they write. (The local emulator knows when they end and cleans up after them.)"""

    def _drain(self, run: Run, config: dict[str, Any]) -> None:
        """After an abort: wait up to ``drain_s`` for the attempts that started to stop, so clean-up is
        complete. An attempt not started yet finds the abort marker when it starts and writes nothing (a
        worker that cannot start never does: no wait for it)."""
        until = time.monotonic() + float(self.settings["drain_s"])
        while True:
            try:
                poll(run, self.s3, config, time.monotonic())
            except SquallError:
                pass  # the errors of the other ranks (aborted) are expected now
            if not any(a.started_ms is not None for a in run.unfinished()) or time.monotonic() >= until:
                return
            time.sleep(0.2)

    def _result(self, run: Run, config: dict[str, Any], ranks: tuple[int, ...] = (0,)) -> pa.Table:
        """Rank 0's result, or the parts of ``ranks`` concatenated in rank order (sorted ranges)."""
        tables = []
        for rank in ranks:
            key = run.done[rank]["result_key"]
            run.count("get")
            body = self.s3.get_object(Bucket=config["bucket"], Key=key)["Body"].read()
            tables.append(pa.ipc.open_file(pa.py_buffer(body)).read_all())
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _no_bucket(platform: str) -> str:
    return (
        f"the {platform} platform needs an S3 bucket for exchange and state: "
        "pass --exchange s3://bucket/prefix or set SQUALL_BUCKET"
    )


def _abort_reason(exc: BaseException) -> str:
    if isinstance(exc, SquallError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return "driver stopped"


#: the worker function's own environment on lambda-local, a JSON object (its credentials, as a deployed worker
#: holds its role's; the driver's process keeps its own)
WORKER_ENV = "SQUALL_WORKER_ENV"


def _worker_env(env: dict[str, str] | None) -> dict[str, str]:
    if env is not None:
        return dict(env)
    raw = os.environ.get(WORKER_ENV)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise OptionError(f"{WORKER_ENV} must be a JSON object of strings")
    return parsed


class LocalLambdaPlatform(LambdaPlatform):
    """The Lambda platform against the local emulator (real handler in local processes).

    ``worker_env`` (default: the JSON object in ``SQUALL_WORKER_ENV``) is the worker function's own
    environment, over this process's: e.g. the worker role's credentials while the driver holds the driver's.
    """

    name = "lambda-local"
    storages: ClassVar[tuple[str, ...]] = ("file", "s3")  # the emulated functions run on this machine

    def __init__(
        self,
        workers: int | None = None,
        *,
        concurrency: int | None = None,
        worker_env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("function", "squall-worker")
        # no probe: the emulator reports init errors of asynchronous invocations itself (_start_errors)
        settings = {"memory_mb": 1024, "heartbeat_s": 1.0, "dead_after_s": 8.0, "straggler_s": 6.0,
                    "probe_after_s": None,
                    **(kwargs.pop("settings", None) or {})}  # fmt: skip
        super().__init__(workers, settings=settings, **kwargs)
        if self._client is None:
            self._client = LocalLambda(
                function_name=self.function,
                concurrency=concurrency or self.world_size + 2,
                memory_mb=int(self.settings["memory_mb"]),
                timeout_s=float(self.settings["function_timeout_s"]),
                env=_worker_env(worker_env),
            )

    def _start_errors(self, config: dict[str, Any]) -> None:
        for error in list(getattr(self._client, "init_errors", ())):
            event = error["event"]
            if event.get("query_id") == config["query_id"]:
                message = str(error.get("errorMessage", "")).splitlines()[0]
                raise WorkerError(
                    f"rank {event['ranks'][0]} failed: cannot start: {error['errorType']}: {message}"
                )

    def _after_late_copies(self, config: dict[str, Any]) -> None:
        if self._client.wait_idle(float(self.settings["drain_s"]) * 2):
            self.factory.cleanup(config)

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()
