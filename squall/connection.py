"""The embedded engine's public API: ``connect()`` → :class:`Connection` → :class:`Result`."""

from __future__ import annotations

import ctypes
import dataclasses
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from squall.driver.catalog.tables import Catalog
from squall.driver.compile import compile_sql
from squall.driver.frontend.bind import aggregate_function_names
from squall.driver.frontend.names import resolve_catalog_names
from squall.driver.frontend.pivot_values import resolve_pivots
from squall.driver.frontend.time_travel import pin_versions
from squall.driver.options import PlannerOptions
from squall.driver.platforms.base import Execution, Platform, Progress, platform_class
from squall.driver.report.explain import explain_plan
from squall.driver.report.stats import QueryFacts, assemble
from squall.driver.report.written import written_stats
from squall.driver.skipping.predicate_cache import PredicateCache
from squall.driver.write.locations import Writable, writable_list
from squall.driver.write.statements import WriteStatement, parse_write
from squall.errors import OptionError, QueryCancelled, QueryRuntimeError, QueryTimeout
from squall.operators.duck import Sandbox, interrupted
from squall.operators.memory import human_bytes
from squall.operators.worker import USER_RUNTIME, StageReport, WorkerReport
from squall.plan import Plan
from squall.result import Result
from squall.sizes import parse_size
from squall.warmup import start_driver_warmup

if TYPE_CHECKING:
    from squall.client import RemoteConnection
    from squall.driver.forecast.predict import AutoChoice, Estimator
    from squall.driver.forecast.scale import Estimate
    from squall.driver.write.jobs import WriteJob

#: compiled plans kept per connection (least recently used dropped first)
PLAN_CACHE_SIZE = 128
#: explain --estimate of local tables on a platform whose workers read S3 only (lambda)
LOCAL_TABLES_NOTE = "local tables: the estimate models Lambda over the same files as if in S3"


#: of a worker's memory budget, the most a broadcast join side may be (see Connection._planner_options_at)
BROADCAST_BUDGET_SHARE = 0.25


def planning_sandbox() -> Sandbox:
    """A session on the process's kept DuckDB instance the driver plans with (binds, type checks)."""
    return Sandbox(threads=1, reuse=True)


def _warm_planner() -> None:
    planning_sandbox().close()
    aggregate_function_names()


class Connection:
    """A catalog of tables plus a platform to run queries on.

    ``Connection(data="data/sf1", workers=4)`` registers every table found in
    the folder and runs queries on a warm pool of 4 local worker processes.
    Use it as a context manager or call :meth:`close` to stop the workers.
    """

    def __init__(
        self,
        data: str | None = None,
        *,
        workers: int | str | None = None,
        platform: str | Platform = "local",
        exchange: str | None = None,
        exchange_options: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        planner_options: PlannerOptions | Mapping[str, Any] | None = None,
        scan: str = "parquet",
        platform_options: dict[str, Any] | None = None,
        timeout: float | None = None,
        predicate_cache: PredicateCache | None = None,
        catalogs: Mapping[str, Mapping[str, Any]] | None = None,
        writable: str | Sequence[str] | None = None,
        worker_memory: int | str | None = None,
        memory: int | str | None = None,
    ) -> None:
        self.timeout = _check_timeout(timeout)
        planner = _check_planner_options(planner_options)
        #: where COPY, CREATE TABLE AS and INSERT may write (nothing when empty: every write is refused)
        self.writable = Writable(writable_list(writable))
        self.storage_options = dict(storage_options or {})
        self._auto_cap: int | None = None  # workers="auto" with W per query: the largest W to consider
        self._auto_note = ""  # workers="auto" with a fixed W: why that W
        self._fanout_given = bool((platform_options or {}).get("fanout"))
        self._estimator: Estimator | None = None
        self.catalog = Catalog(storage_options, scan=scan)
        #: row groups known to match no row of a scan predicate (shared when given, e.g. by `squall serve`)
        self.predicate_cache = predicate_cache if predicate_cache is not None else PredicateCache()
        self.catalog.predicate_cache = self.predicate_cache
        # named Iceberg catalogs: their tables are lake.<namespace>.<table> in SQL, opened on first use
        if catalogs:
            from squall.driver.catalog.catalogs import NamedCatalogs

            self.catalog.catalogs = NamedCatalogs(catalogs)
        if data is not None:
            self.catalog.register_folder(str(data))
        #: why the platform's workers cannot read a registered table (local files on lambda): planning and
        #: estimates need only the tables' metadata, so this is raised when a query runs (check_ready)
        self._unreadable: str | None = None
        if isinstance(platform, Platform):
            if data is not None:
                self._check_storage(platform, str(data))
            self.writable.check_platform(platform)
            self.platform = platform
        else:
            cls = platform_class(platform)
            self.writable.check_platform(cls)
            if data is not None:
                self._check_storage(cls, str(data))
            if workers == "auto":
                workers = self._auto_workers(cls.name)
            elif isinstance(workers, str):
                raise OptionError(f"workers must be a number or 'auto', got {workers!r}")
            kwargs: dict[str, Any] = {"workers": workers, "storage_options": storage_options}
            if exchange is not None:
                kwargs["exchange"] = _exchange_name(exchange, exchange_options)
                kwargs["exchange_options"] = _exchange_options(exchange, exchange_options)
            elif exchange_options:
                kwargs["exchange_options"] = dict(exchange_options)
            kwargs.update(_memory_options(cls, worker_memory, memory))
            kwargs.update(platform_options or {})  # e.g. fanout, function for the lambda platforms
            self.platform = cls(**kwargs)
        self.planner_options = planner
        self._db: Sandbox | None = None
        self._plan_lock = threading.Lock()
        self._plans: OrderedDict[tuple[str, int, int, PlannerOptions | None], Plan] = OrderedDict()
        self._closed = False
        self._queries: dict[str, _Query] = {}  # running sql() calls by query id (cancel() stops them)
        #: guards _queries only: a cancel never waits for a plan (planning holds _plan_lock for seconds)
        self._queries_lock = threading.Lock()
        #: the sql() call of this thread (a PIVOT's first query is part of it)
        self._current = threading.local()
        #: platforms that run one query at a time get one at a time (a local platform runs several at once)
        self._execute_lock = threading.Lock()
        # the first query's imports, planning DuckDB instance and DuckDB's aggregates, made while its SQL is
        # written (squall/warmup.py)
        start_driver_warmup(_warm_planner)

    @property
    def workers(self) -> int:
        return self.platform.world_size

    def _check_storage(self, platform: Platform | type[Platform], location: str) -> None:
        """Note (the first) location the platform's workers cannot read, for :meth:`check_ready`."""
        try:
            platform.check_storage(location)
        except OptionError as exc:
            self._unreadable = self._unreadable or str(exc)

    def check_ready(self) -> None:
        """OptionError (one line) when queries cannot run here: a table the platform's workers cannot read
        (local files on lambda), or what the platform lacks (lambda: an S3 bucket, a worker function).
        :meth:`plan`, :meth:`explain` and :meth:`estimate` need none of it; :meth:`sql` checks first."""
        if self._unreadable is not None:
            raise OptionError(self._unreadable)
        self.platform.check_ready()

    def register(
        self,
        name: str,
        location: str,
        *,
        format: str = "parquet",
        scan: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Make the file, folder or glob at ``location`` queryable as ``name``.

        ``location`` may be ``s3://bucket/prefix/`` (a prefix of objects), one object, or a
        glob. ``format="csv"|"json"`` (JSON lines) tables are read by DuckDB in the workers,
        types as DuckDB's sniffer gives them; ``options`` are DuckDB ``read_csv`` options that
        override the sniffer (``delim``, ``quote``, ``escape``, ``header``, ``skip``, ``nullstr``,
        ``dateformat``, ``timestampformat``). ``scan="s3select"`` scans CSV/JSON-lines objects
        with S3 Select instead (opt-in).
        """
        self._check_storage(self.platform, str(location))
        self.catalog.register(name, str(location), format=format, scan=scan, options=options)

    def tables(self) -> list[str]:
        """The names of the registered tables (a named catalog's tables are ``catalog.namespace.table`` in SQL and
        listed by ``squall tables``, not here)."""
        return [name for name in self.catalog.names() if not self.catalog.is_internal(name)]

    def plan(self, sql: str) -> Plan:
        """The distributed plan of ``sql`` (nothing runs); with ``workers="auto"`` on a lambda platform, at
        the W the scale model chose for it."""
        if (statement := parse_write(sql)) is not None:
            job, planned = self._write_job(statement)
            if planned is None:
                raise OptionError(f"{job.summary} runs no query: there is no plan to show")
            return planned
        if self._auto_cap is not None:
            return self._plan_with_choice(sql)[0]
        return self._compile(sql, self.platform.world_size)[0]

    def _write_job(self, statement: WriteStatement) -> tuple[WriteJob, Plan | None]:
        """The job of a write statement and its write plan (None when the job plans no query); UserError
        when it may not run (nothing is written)."""
        from squall.driver.write.jobs import prepare
        from squall.driver.write.planning import write_plan

        job = prepare(statement, self.catalog, self.writable, self.storage_options, self._describe)
        if not job.query or job.spec is None:
            return job, None
        if self._auto_cap is not None:
            plan = self._plan_with_choice(job.query)[0]
        else:
            plan = self._compile(job.query, self.platform.world_size)[0]
        return job, write_plan(plan, job.spec)

    def _describe(self, sql: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The result column names and DuckDB types of ``sql`` (bound, not planned)."""
        from squall.driver.frontend.bind import Binder

        with self._plan_lock:
            if self._db is None:
                self._db = Sandbox(threads=1)
            bound = Binder(self.catalog, self._db).bind(resolve_catalog_names(sql, self.catalog))
        return bound.names, bound.types

    def _compile(self, sql: str, world_size: int) -> tuple[Plan, dict[str, Any]]:
        """The plan of ``sql`` at ``world_size``, from this connection's plan cache when the same text was
        planned at the same W, with the same planner options, against the same catalog version (no table
        registered, no local file changed since). Also: ``{"plan_cache": "hit"|"miss", "planning_breakdown":
        {...}}`` for the stats (the breakdown in seconds: version check, bind, translate, plan)."""
        start = time.perf_counter()
        # a dynamic PIVOT's values: read by a first query on every run (never cached), said in the notes
        pivots = resolve_pivots(sql, self.catalog, lambda first: self._first_query(first, world_size))
        sql, pivot_s = pivots.sql, time.perf_counter() - start
        start = time.perf_counter()
        version = self.catalog.version()
        sql = resolve_catalog_names(
            sql, self.catalog
        )  # lake.ns.t: registered, and named as the plan names it
        sql = pin_versions(sql, self.catalog)  # the plan is cached under the versions the text travels to
        options = self._planner_options_at(world_size)
        key = (sql, version, world_size, options)
        checked = time.perf_counter()
        with self._plan_lock:  # held for the cache only: queries are planned side by side
            cached = self._plans.get(key)
            if cached is not None:
                self._plans.move_to_end(key)
        if cached is None:
            timings: dict[str, float] = {"cache_s": checked - start}
            with planning_sandbox() as db:  # a session of its own on a kept DuckDB instance
                cached = compile_sql(self.catalog, sql, world_size, options, db, timings)
            if budget_note := self._budget_note(options):
                cached = dataclasses.replace(cached, notes=(*cached.notes, budget_note))
            with self._plan_lock:
                self._plans[key] = cached
                while len(self._plans) > PLAN_CACHE_SIZE:
                    self._plans.popitem(last=False)
            compiled: dict[str, Any] = {"plan_cache": "miss", "planning_breakdown": timings}
        else:
            compiled = {"plan_cache": "hit", "planning_breakdown": {"cache_s": checked - start}}
        if pivots.notes:
            cached = dataclasses.replace(cached, notes=(*pivots.notes, *cached.notes))
            compiled["planning_breakdown"]["pivot_values_s"] = pivot_s
        return cached, compiled

    def _learn(self, plan: Plan, reports: list[dict[str, Any]]) -> int:
        """Keep what the run of ``plan`` found out about its predicates (the predicate cache) and, when that was
        anything, update ``plan`` in the plan cache: when a probed row group matched no row, drop it (its next
        run is planned again and skips what was learned); else cache it without the probes now answered
        (:meth:`~squall.driver.skipping.predicate_cache.PredicateCache.settled`: the plan planning it again
        would make, without the planning). Other cached plans stay (still right, as the cache only ever adds
        row groups to skip) and pick the outcomes up when they are next planned — learning never re-plans
        every query."""
        learned = self.predicate_cache.learn(plan, reports)
        if learned:
            settled = self.predicate_cache.settled(plan)
            with self._plan_lock:
                for key in [k for k, cached in self._plans.items() if cached is plan]:
                    if settled is None:
                        del self._plans[key]
                    else:
                        self._plans[key] = settled
        return learned

    def _planner_options_at(self, world_size: int) -> PlannerOptions | None:
        """The planner options of a plan at ``world_size`` on this connection's platform: where its ranks
        share cores (more local workers than cores), with ``ranks_per_core`` set, which scales the
        skew-aware joins' threshold (see :attr:`PlannerOptions.skew_threshold`); where a worker's memory
        budget is small, with ``broadcast_limit`` at most :data:`BROADCAST_BUDGET_SHARE` of it (a broadcast side
        is held whole by every rank, in Arrow and in DuckDB's hash table: larger ones are hash-partitioned)."""
        options = self.planner_options
        given = options or PlannerOptions()
        share = self.platform.ranks_per_core(world_size)
        if share > 1.0 and not given.ranks_per_core:  # ranks share cores, and the caller did not say
            options = given = dataclasses.replace(given, ranks_per_core=share)
        cap = self._broadcast_cap()
        if cap is not None and given.broadcast_limit > cap:
            options = given = dataclasses.replace(given, broadcast_limit=cap)
        return options

    def _broadcast_cap(self) -> float | None:
        budget = getattr(self.platform, "memory_budget", None)
        return budget * BROADCAST_BUDGET_SHARE if budget else None

    def _budget_note(self, options: PlannerOptions | None) -> str | None:
        """The plan's note when the memory budget lowered ``broadcast_limit`` (see :meth:`_planner_options_at`)."""
        cap, given = self._broadcast_cap(), (self.planner_options or PlannerOptions()).broadcast_limit
        if cap is None or options is None or options.broadcast_limit >= given:
            return None
        return (
            f"join sides over {human_bytes(cap)} are hash-partitioned, not broadcast: a quarter of each worker's "
            f"memory budget of {human_bytes(cap / BROADCAST_BUDGET_SHARE)} (broadcast limit {human_bytes(given)})"
        )

    def _first_query(self, sql: str, world_size: int) -> pa.Table:
        """Run a query the driver needs before it can plan another (a dynamic PIVOT's values)."""
        plan = self._compile(sql, world_size)[0]
        query: _Query | None = getattr(self._current, "query", None)
        with query.suspended() if query is not None else nullcontext():  # never stop the platform mid-message
            if _reads_nothing(plan):
                execution = self._run_on_driver(plan, query)
            else:
                self._fit_platform(plan)
                execution = self._execute(plan, query.new_id() if query is not None else _new_id(), None)
        return execution.table.rename_columns(list(plan.result_names))

    def explain(self, sql: str, *, estimate: bool = False) -> str:
        """The distributed plan as text: stages, exchanges and each stage's DuckDB SQL.

        ``estimate=True`` adds the scale model's predicted time, cost and S3 requests (see :meth:`estimate`) and
        the memory per worker it plans. Neither needs what only a run needs (on lambda: a bucket, a worker
        function, the tables in S3): the plan and the estimate come from the tables' metadata.
        """
        if (statement := parse_write(sql)) is not None:
            job, planned = self._write_job(statement)
            if planned is None:
                return f"{job.summary}: runs no query (nothing to plan)\n"
            plan, choice = planned, None
        else:
            plan, choice = self._plan_with_choice(sql)
        from squall.driver.forecast.predict import (  # the scale model: imported when first used
            format_estimate,
            plan_need,
        )

        text = explain_plan(plan).rstrip()
        need = plan_need(plan)
        reason = choice.reason if choice is not None else (self._auto_note or None)
        if not estimate:
            text += f"\n\nmemory per worker: {need.line(self._worker_budget())}"
            return f"{text}\n\n{reason}" if choice is not None else text
        # local files on lambda: planned from their footers all the same, and modelled as if in S3
        notes = [] if self._unreadable is None else [LOCAL_TABLES_NOTE]
        est = self.estimator.estimate(plan)
        return f"{text}\n\n{format_estimate(est, self.estimator, reason, notes, need)}"

    def _worker_budget(self) -> int | None:
        """The memory budget of one worker: the platform's (local, fabric), or on lambda the function's memory
        less the runtime's reserve; None when no budget is set."""
        budget = getattr(self.platform, "memory_budget", None)
        if budget is None and self.platform.name in ("lambda", "lambda-local"):
            from squall.driver.forecast.predict import memory_plan

            return memory_plan(self.estimator)[1] << 20
        return int(budget) if budget else None

    @property
    def estimator(self) -> Estimator:
        """The scale model for this connection's platform (cached per plan; see :mod:`squall.driver.forecast.predict`)."""
        if self._estimator is None:
            from squall.driver.forecast.predict import Estimator, platform_config  # imported when first used

            self._estimator = Estimator(self.platform.name, platform_config(self.platform))
        return self._estimator

    def estimate(self, sql: str) -> Estimate:
        """The scale model's predicted time, cost and requests of ``sql`` (nothing runs).

        On ``lambda`` with the ``aws`` profile, on ``lambda-local`` with ``emulator-here``; on the other
        platforms: what the plan would cost as Lambda workers at the same W (``aws``).
        """
        return self.estimator.estimate(self.plan(sql))

    def _auto_workers(self, platform: str) -> int:
        """``workers="auto"`` at connect: the W the platform starts with (see :mod:`squall.driver.forecast.predict`)."""
        import os

        from squall.driver.forecast.predict import PER_QUERY_W, fixed_auto_workers
        from squall.driver.platforms.local.platform import max_local_workers

        if platform == "lambda":
            cap = min(int(os.environ.get("SQUALL_MAX_WORKERS", 1024)),
                      int(os.environ.get("SQUALL_LAMBDA_CONCURRENCY", 1000)))  # fmt: skip
        else:
            cap = min(max_local_workers(), int(os.environ.get("SQUALL_MAX_WORKERS", 1024)))
        if platform in PER_QUERY_W:
            self._auto_cap = cap
            return cap
        w = fixed_auto_workers(cap)
        self._auto_note = (
            f"W={w} from workers='auto': the {platform} platform keeps a warm pool of fixed size, so 'auto' is "
            f"this machine's cores, chosen once at connect"
        )
        return w

    def _plan_with_choice(self, sql: str) -> tuple[Plan, AutoChoice | None]:
        """The plan, at the W ``workers="auto"`` chose for it on the lambda platforms."""
        if self._auto_cap is None:
            return self.plan(sql), None
        template = self._compile(sql, min(4, self._auto_cap))[0]
        choice = self.estimator.auto_workers(template, self._auto_cap)
        if choice.workers == template.world_size:
            return template, choice
        return self._compile(sql, choice.workers)[0], choice

    def _fit_platform(self, plan: Plan) -> None:
        """``workers="auto"`` on a lambda platform: run this query with the plan's W."""
        if self._auto_cap is None or plan.world_size == self.platform.world_size:
            return
        from squall.driver.platforms.lambda_.tree import default_fanout

        self.platform.world_size = plan.world_size
        if not self._fanout_given and hasattr(self.platform, "fanout"):
            self.platform.fanout = default_fanout(plan.world_size)

    def _stats_estimate(self, plan: Plan) -> Callable[[], dict[str, Any] | None]:
        """Start the model for ``stats["estimate"]`` beside the run (lambda platforms, or W ≤ 64)."""
        from squall.driver.forecast.predict import STATS_MAX_W, summary

        if not (self.estimator.on_lambda or plan.world_size <= 64) or plan.world_size > STATS_MAX_W:
            return lambda: None
        wait = self.estimator.start(plan)

        def done() -> dict[str, Any] | None:
            est = wait(None)
            return summary(est, self.estimator) if est is not None else None

        return done

    def sql(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        progress: Callable[[Progress], None] | None = None,
        timeout: float | None = None,
        query_id: str | None = None,
    ) -> Result:
        """Run one read-only query and return its result.

        ``params`` binds ``?``/``$1`` (a list) or ``$name`` (a dict) as SQL literals.

        ``timeout`` (seconds; default: the connection's ``timeout``, else none): cancel the query when it
        runs longer and raise :class:`~squall.errors.QueryTimeout`. :meth:`cancel` from another thread
        raises :class:`~squall.errors.QueryCancelled` here. Either way, and after a Ctrl-C, the connection
        stays usable.

        ``query_id``: the id the query runs under (``stats["query_id"]``; default: a new one), which
        :meth:`cancel` takes. Several threads may call ``sql()`` at once: on the local platform their queries
        run at the same time (on workers of their own), on the others one after another.
        """
        if self._closed:
            raise OptionError("connection is closed")
        self.check_ready()
        if params is not None:
            from squall.params import bind

            sql = bind(sql, params)
        limit = _check_timeout(timeout) if timeout is not None else self.timeout
        query = _Query(self.platform, limit, query_id or _new_id())
        with self._queries_lock:
            if query.id in self._queries:
                raise OptionError(f"query {query.id} is already running")
            self._queries[query.id] = query
        self._current.query = query
        try:
            return self._run(sql, query, progress)
        except QueryCancelled:
            if query.reason is None:
                raise
            raise query.error() from None
        except Exception as exc:
            if query.reason is None:
                raise
            raise query.error() from exc  # the platform failed its own way after being cancelled
        finally:
            query.finish()
            self._current.query = None
            with self._queries_lock:
                self._queries.pop(query.id, None)

    def _run(self, sql: str, query: _Query, progress: Callable[[Progress], None] | None) -> Result:
        start = time.perf_counter()
        if (statement := parse_write(sql)) is not None:
            return self._run_write(statement, query, progress, start)
        prestart = getattr(self.platform, "prestart", None)
        if prestart is not None and self._auto_cap is None and _mentions_table(sql, self.catalog.names()):
            prestart()  # the worker pool starts while the query is planned
        driver_before = self.catalog.requests()
        compiled: dict[str, Any]  # plan_cache, planning_breakdown
        with query.planning():  # a cancel interrupts the planning thread
            if self._auto_cap is not None:
                plan, compiled = (
                    self._plan_with_choice(sql)[0],
                    {"plan_cache": "n/a", "planning_breakdown": {}},
                )
            else:
                plan, compiled = self._compile(sql, self.platform.world_size)
        planned = time.perf_counter()
        driver_requests = _delta(self.catalog.requests(), driver_before)
        query_id = query.id
        query.check()
        on_driver = _reads_nothing(plan)
        if on_driver:  # no table read, one stage: the driver's own sandbox answers, no worker starts
            predicted: Callable[[], dict[str, Any] | None] = lambda: None  # noqa: E731
            execution = self._run_on_driver(plan, query)
        else:
            self._fit_platform(plan)
            predicted = self._stats_estimate(plan)
            execution = self._execute(plan, query_id, progress)
        done = time.perf_counter()
        table = execution.table.rename_columns(list(plan.result_names))
        facts = QueryFacts(
            query_id=query_id,
            platform=self.platform.name,
            elapsed_s=done - start,
            planning_s=planned - start,
            execution_s=done - planned,
            ran_on="driver" if on_driver else "workers",
            plan_cache=compiled["plan_cache"],
            planning_breakdown=compiled["planning_breakdown"],
            driver_storage_requests=driver_requests,
            cache_learned=self._learn(plan, execution.reports),
            details=execution.details,
            estimate=predicted(),
        )
        return Result(table, assemble(plan, execution.reports, table, facts), plan)

    def _run_write(
        self,
        statement: WriteStatement,
        query: _Query,
        progress: Callable[[Progress], None] | None,
        start: float,
    ) -> Result:
        """Run a write statement: plan its query as a write plan, run it, commit once every rank succeeded
        (see :mod:`squall.driver.write`); a failure leaves nothing at the target."""
        driver_before = self.catalog.requests()
        with query.planning():
            job, plan = self._write_job(statement)
        planned = time.perf_counter()
        query_id = query.id
        reports: list[dict[str, Any]] = []
        details: dict[str, Any] = {}
        manifest: pa.Table | None = None
        rows = 0
        try:
            if plan is not None:
                query.check()
                self._fit_platform(plan)
                execution = self._execute(plan, query_id, progress)
                reports, details, manifest = execution.reports, execution.details, execution.table
                rows = sum(int((r.get("written") or {}).get("rows", 0)) for r in reports)
                query.check()
            committed = job.commit(manifest, rows, query_id)
        except BaseException:
            _quietly(job.abort, query_id)
            raise
        done = time.perf_counter()
        table = pa.table({
            "status": [job.summary], "rows": pa.array([committed.rows], pa.int64()),
            "files": pa.array([len(committed.files)], pa.int64()),
            "bytes": pa.array([committed.bytes], pa.int64()), "target": [committed.target],
        })  # fmt: skip
        if plan is None:
            return Result(table, {"query_id": query_id, "elapsed_s": done - start, "written": committed.to_dict(),
                                  "notes": [], "rows": 1})  # fmt: skip
        facts = QueryFacts(
            query_id=query_id, platform=self.platform.name, elapsed_s=done - start, planning_s=planned - start,
            execution_s=done - planned, ran_on="workers", plan_cache="n/a", planning_breakdown={},
            driver_storage_requests=_delta(self.catalog.requests(), driver_before),
            cache_learned=self._learn(plan, reports), details=details, estimate=None,
        )  # fmt: skip
        stats = assemble(plan, reports, table, facts)
        stats["written"] = written_stats(committed.to_dict(), reports)
        return Result(table, stats, plan)

    def _execute(self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None) -> Execution:
        """``platform.execute``; one query at a time on a platform that cannot run several."""
        self.check_ready()  # explain of a dynamic PIVOT runs its first query here, not through sql()
        if getattr(self.platform, "concurrent", False):
            return self.platform.execute(plan, query_id, progress)
        with self._execute_lock:
            return self.platform.execute(plan, query_id, progress)

    def _run_on_driver(self, plan: Plan, query: _Query | None) -> Execution:
        """Run a plan that reads no table (one stage, no input) in a sandboxed DuckDB of the driver's own
        (external access off, configuration locked, as on a worker), reported as rank 0. Cancelling the query
        interrupts DuckDB."""
        stage = plan.stages[0]
        report = WorkerReport(0)
        sr = StageReport(stage.id)
        start = time.perf_counter()
        with planning_sandbox() as db:  # a connection of its own to a kept DuckDB instance
            if query is not None:
                query.on_cancel(db.con.interrupt)
            try:
                table = db.query(stage.sql)
            except USER_RUNTIME as err:
                raise QueryRuntimeError(str(err).splitlines()[0]) from None
            except (RuntimeError, duckdb.InterruptException) as err:
                if query is not None and query.reason is not None and interrupted(err):
                    raise query.error() from None
                raise
            finally:
                if query is not None:
                    query.on_cancel(None)
        sr.compute_s = time.perf_counter() - start
        sr.rows_out, sr.bytes_out = table.num_rows, table.nbytes
        report.stages.append(sr)
        report.elapsed_s = sr.compute_s
        return Execution(table, [report.to_dict()])

    def cancel(self, query_id: str | None = None) -> None:
        """Cancel the query ``query_id`` (default: every query running on this connection) from another thread;
        its ``sql()`` raises :class:`~squall.errors.QueryCancelled`. Nothing happens when no such query runs."""
        with self._queries_lock:
            queries = [q for q in self._queries.values() if query_id is None or q.id == query_id]
        for query in queries:
            query.cancel("query cancelled")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.platform.close()
            if self._db is not None:
                self._db.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class _PlanningCancelled(QueryCancelled):
    """Raised inside the planning thread of a cancelled query (see :meth:`_Query.planning`)."""


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``thread_id`` at its next bytecode boundary (a C call there, DuckDB's or a lock's,
    finishes first); None takes back one not raised yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None
    )


class _Query:
    """One ``sql()`` call's cancellation: by :meth:`Connection.cancel` or its timeout.

    Once cancelled, a thread cancels the query's runs on the platform (``cancel_query`` of each id it ran under,
    or ``Platform.cancel()`` on a platform without it) until the query returns: a cancel that arrives before
    the platform started the query is otherwise lost. A query running in the driver's sandbox is interrupted —
    again on every round, as an interrupt that comes before DuckDB started the statement is lost too. While the
    query is planned (:meth:`planning`: pure Python, nothing else would stop it before planning ends) the
    cancel raises :class:`_PlanningCancelled` in the planning thread.
    """

    def __init__(self, platform: Platform, timeout: float | None, query_id: str) -> None:
        self.platform = platform
        self.timeout = timeout
        self.id = query_id
        self.ids = [query_id]  # the platform runs: the query, and a PIVOT's first query
        self.reason: str | None = None
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._interrupt: Callable[[], None] | None = None
        self._planner: int | None = None  # the thread planning the query, while it does
        self._raised = False
        if timeout is not None:
            self._timer: threading.Timer | None = threading.Timer(timeout, self.cancel, ("timeout",))
            self._timer.daemon = True
            self._timer.start()
        else:
            self._timer = None

    def new_id(self) -> str:
        """An id for another platform run of this query (a PIVOT's first query), cancelled with it."""
        with self._lock:
            self.ids.append(f"{self.id}-{len(self.ids)}")
            return self.ids[-1]

    def on_cancel(self, interrupt: Callable[[], None] | None) -> None:
        """Call ``interrupt`` when the query is cancelled (at once if it already is); None: no more."""
        with self._lock:
            self._interrupt = interrupt
            cancelled = self.reason is not None
        if interrupt is not None and cancelled:
            _quietly(lambda _arg: interrupt(), "")

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None or self._finished.is_set():
                return
            self.reason = reason
            interrupt = self._interrupt
            self._thread = threading.Thread(target=self._keep_cancelling, name="squall-cancel", daemon=True)
            self._thread.start()
        if interrupt is not None:
            _quietly(lambda _arg: interrupt(), "")

    def _keep_cancelling(self) -> None:
        cancel_query = getattr(self.platform, "cancel_query", None)
        while True:
            with self._lock:
                if self._finished.is_set():
                    return
                try:
                    if cancel_query is not None:
                        for query_id in self.ids:
                            cancel_query(query_id)
                    else:
                        self.platform.cancel()
                except Exception:
                    pass
                if self._interrupt is not None:
                    _quietly(lambda _arg: self._interrupt() if self._interrupt else None, "")
                if self._planner is not None:
                    self._raised = True
                    _raise_in(self._planner, _PlanningCancelled)
            if self._finished.wait(0.2):
                return

    @contextmanager
    def planning(self) -> Iterator[None]:
        """The calling thread plans the query inside this block: a cancel raises :class:`_PlanningCancelled` in
        it. On the way out (under the lock, so no new one comes) one not raised yet is taken back."""
        self.check()
        with self._lock:
            self._planner = threading.get_ident()
        try:
            yield
        finally:
            with self._lock:
                self._planner = None
                if self._raised:
                    _raise_in(threading.get_ident(), None)
        self.check()

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Inside :meth:`planning`, a block that must not be interrupted (a PIVOT's first query on the platform)."""
        me = threading.get_ident()
        with self._lock:
            saved = self._planner
            if saved == me:
                self._planner = None
                if self._raised:
                    _raise_in(me, None)
        try:
            self.check()
            yield
        finally:
            with self._lock:
                self._planner = saved

    def check(self) -> None:
        """Raise now when cancelled (e.g. the timeout passed while planning)."""
        if self.reason is not None:
            raise self.error()

    def error(self) -> QueryCancelled:
        if self.reason == "timeout":
            return QueryTimeout(f"query timed out after {self.timeout:g} s and was cancelled")
        return QueryCancelled(self.reason or "query cancelled")

    def finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:  # no platform cancel runs after this: the next query is safe
            self._finished.set()


def _new_id() -> str:
    return f"q{uuid.uuid4().hex[:16]}"


def _quietly(call: Callable[[str], None], arg: str) -> None:
    """Clean-up after a failure: its own errors must not hide the failure."""
    try:
        call(arg)
    except Exception:
        pass


def _mentions_table(sql: str, tables: Sequence[str]) -> bool:
    """``sql`` names one of ``tables`` as a word (a cheap guess, before planning, that workers will run it)."""
    text = sql.lower()
    return any(re.search(rf"\b{re.escape(t.lower())}\b", text) for t in tables)


def _reads_nothing(plan: Plan) -> bool:
    """One stage without inputs (no scan, no exchange): nothing for a worker to do that the driver cannot."""
    return len(plan.stages) == 1 and not plan.stages[0].inputs and plan.stages[0].output.kind == "result"


def _check_planner_options(given: PlannerOptions | Mapping[str, Any] | None) -> PlannerOptions | None:
    """``planner_options`` as given: a :class:`PlannerOptions`, or a dict of its fields' values."""
    if given is None or isinstance(given, PlannerOptions):
        return given
    if not isinstance(given, Mapping):
        raise OptionError(f"planner_options must be a PlannerOptions or a dict, got {type(given).__name__}")
    known = {f.name for f in dataclasses.fields(PlannerOptions)}
    unknown = sorted(str(k) for k in given if k not in known)
    if unknown:
        raise OptionError(f"planner_options: unknown option(s) {', '.join(unknown)}")
    return PlannerOptions(**given)


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise OptionError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return float(timeout)


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def _exchange_name(exchange: str, options: dict[str, Any] | None) -> str:
    return exchange.split("://", 1)[0] if "://" in exchange else exchange


def _exchange_options(exchange: str, options: dict[str, Any] | None) -> dict[str, Any]:
    opts = dict(options or {})
    if exchange.startswith("s3://"):
        opts.setdefault("bucket_url", exchange)
    return opts


def _memory_options(
    cls: type[Platform], worker_memory: int | str | None, memory: int | str | None
) -> dict[str, int]:
    """The platform's ``worker_memory``/``memory`` keyword arguments (bytes) from sizes such as ``"512MB"``."""
    given = {
        k: parse_size(v, k)
        for k, v in (("worker_memory", worker_memory), ("memory", memory))
        if v is not None
    }
    if given and not cls.memory_options:
        raise OptionError(
            f"{' and '.join(given)} is for platforms whose workers run on this machine (local, fabric); the "
            f"{cls.name} platform's workers get the function's memory"
        )
    return given


def connect(
    data: str | None = None, *, workers: int | str | None = None, **options: Any
) -> Connection | RemoteConnection:
    """Open an embedded Squall connection, or a remote one when ``data`` is an ``http(s)://`` endpoint.

    ``data`` is a folder whose Parquet files (``<table>.parquet``) and
    sub-folders (``<table>/*.parquet``) become tables. ``workers`` defaults to
    the number of cores; ``workers="auto"``: on the lambda platforms the scale model picks W per query (the
    cheapest W within 10 % of the fastest, up to the account's concurrency), on the local and fabric
    platforms (a warm pool of fixed size) it is the machine's cores, chosen once. Further options: ``platform``, ``exchange`` (name or
    ``s3://bucket/prefix``; ``exchange_options={"levels": 1|2|"auto"}`` for S3),
    ``exchange_options``, ``storage_options``, ``planner_options`` (a :class:`PlannerOptions` or a dict of its
    fields), ``scan``
    (``"s3select"``: scan S3 tables with S3 Select), ``timeout`` (seconds, every query's default;
    ``sql(..., timeout=S)`` overrides it; raises :class:`~squall.errors.QueryTimeout`). ``catalogs``: named Iceberg
    catalogs, ``{"lake": {"type": "sql", "uri": "sqlite:///…", "warehouse": "file:///…"}}`` (pyiceberg's catalog
    properties as they are: sql, rest, glue, hive, …), their tables named ``lake.<namespace>.<table>`` in SQL
    and opened on first use. ``platform_options``: extra
    keyword arguments of the platform (``{"fanout": 4, "function": NAME}`` for the lambda platforms). ``worker_memory``
    (local and fabric platforms; bytes or a size such as ``"512MB"``): the memory budget of each worker — DuckDB
    spills past its share of it and a stage that cannot fit fails with a clear error; default: the machine's
    memory shared by the workers and the driver, or that of ``memory`` (the total Squall may use). ``data`` may be
    ``s3://bucket/prefix`` (endpoint and credentials from the standard AWS settings).

    Remote (``squall.connect("http://127.0.0.1:8080", token=…)`` or
    ``connect(endpoint, auth="iam")``): a :class:`squall.client.RemoteConnection`
    with the same ``sql()``, ``explain()``, ``tables()``, ``close()``; options
    ``token``, ``auth``, ``region``, ``timeout_s``.
    """
    # --- remote endpoints (squall.client) ---
    if isinstance(data, str) and data.lower().startswith(("http://", "https://")):
        if isinstance(workers, str):
            raise OptionError(f"workers={workers!r} is for embedded connections; give the service a number")
        from squall.client import RemoteConnection  # urllib and the HTTP client: only for remote endpoints

        return RemoteConnection(data, workers=workers, **options)
    return Connection(data, workers=workers, **options)
