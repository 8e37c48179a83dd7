"""The local platform: queries run on warm worker processes on this machine (the embedded default).

The workers are a :class:`~squall.driver.platforms.local.pool.WorkerPool`: each query leases W idle workers for
its run (rank r on the r-th), sends each the plan (JSON) and the exchange config, listens for stage-done
messages (progress), reports and errors, aborts the exchange as soon as one rank fails so the others stop
waiting, always cleans the query's exchange data and result file up, and gives the workers back.

:meth:`LocalPlatform.execute` may run on several threads at once: each query waits only on the connections
and process descriptors of its own workers, so their messages reach their own query.
``LocalPlatform(workers=W)`` has a pool of its own of W processes (a Connection's platform);
``platform.sharing(W2)`` is a platform for plans of W2 ranks that borrows the pool of ``platform``, so queries
of different W reuse the same processes (``squall serve``: one pool of ``pool_size`` processes for every W).

Lifecycle of a query, also when it does not finish:

- cancelled (:meth:`LocalPlatform.cancel_query`, a timeout) or interrupted (Ctrl-C, an exception in a
  progress callback): the exchange is aborted, so ranks stop at their next stage or exchange wait;
  the driver waits up to ``drain_s`` for every rank to report, kills the ranks that did not (a second
  Ctrl-C kills them at once), removes the query's folders and result file, then raises
  (:class:`QueryCancelled`, or the KeyboardInterrupt itself). A killed worker is replaced when the pool
  next needs one;
- a worker that dies (crash, SIGKILL, out of memory) is seen at once (its pidfd is readable): the query
  fails with the worker's exit code or signal and its log named, after the other ranks had ``drain_s`` to
  stop. A query that writes nothing is then run once more on other workers (``retry_lost_workers``;
  ``stats["retried"]`` says why), a second loss fails it;
- workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group; only the driver
  decides), run in their own process group and die with the driver (``PR_SET_PDEATHSIG``);
- on SIGTERM/SIGHUP or at exit the workers are stopped and every file is removed
  (:mod:`~squall.driver.platforms.local.lifecycle`).

Limits: at most ``8 * cores`` workers and never more than 256 (:func:`max_local_workers`); more
processes than that only thrash the machine. Worker logs (``<root>/logs/worker-*.log``) are removed
when a worker stops, unless it failed; the error then says where the log is.
"""

from __future__ import annotations

import copy
import fcntl
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Listener, wait
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from squall.driver.platforms.base import Execution, Platform, Progress
from squall.driver.platforms.local.lifecycle import (
    deferred_sigint,
    process_root,
    remove_process_root,
    sweep_orphans,
    track,
    untrack,
)
from squall.driver.platforms.local.pool import PoolWorker, WorkerPool, log_hint
from squall.driver.platforms.local.worker_process import result_part_path
from squall.driver.platforms.memory import check_budget, local_worker_budget
from squall.errors import OptionError, QueryCancelled, QueryRuntimeError, SquallError, WorkerError
from squall.exchange.base import ExchangeFactory, exchange_factory
from squall.exchange.local import default_root
from squall.operators.memory import spill_limit
from squall.plan import Plan, ScanInput

log = logging.getLogger("squall.platform.local")

#: workers per core and in all that a machine takes before processes only thrash it
WORKERS_PER_CORE = 8
MAX_WORKERS = 256
#: seconds the other ranks of a cancelled, interrupted or failed query get to stop before they are killed
DRAIN_S = 0.5


def max_local_workers(cores: int | None = None) -> int:
    """The most worker processes the local platform starts on this machine: 8 per core, at most 256."""
    return min(WORKERS_PER_CORE * (cores or os.cpu_count() or 1), MAX_WORKERS)


@dataclass(eq=False)
class _Run:
    """One query on this platform: ``run_id`` names its current attempt (exchange folder, worker messages)."""

    query_id: str
    run_id: str = ""
    config: dict[str, Any] | None = None
    result_path: Path | None = None
    workers: list[PoolWorker] = field(default_factory=list)  # rank r runs on workers[r]
    cancelled: str | None = None
    #: cancel_query() writes a byte here: the query's wait wakes at once
    waker: tuple[int, int] = field(default_factory=lambda: _pipe())

    def wake(self) -> None:
        try:
            os.write(self.waker[1], b"x")
        except OSError:  # full (already woken) or closed (finished)
            pass

    def close(self) -> None:
        for fd in self.waker:
            try:
                os.close(fd)
            except OSError:
                pass


class _Lost(Exception):
    """An attempt lost a worker process (it died): the query may run again on other workers."""

    def __init__(self, error: WorkerError) -> None:
        super().__init__(str(error))
        self.error = error


class LocalPlatform(Platform):
    """Warm worker processes; exchange through a shared folder unless told otherwise (see module doc).

    ``pool_size``: processes of its pool (default: ``workers``), for platforms that share it (:meth:`sharing`);
    ``spare_workers``: idle ones the pool keeps started beside the busy ones."""

    name = "local"
    exchanges: ClassVar[tuple[str, ...]] = ("local", "s3", "fabric")
    storages: ClassVar[tuple[str, ...]] = ("file", "s3")
    #: execute() may run on several threads at once (each query on workers of its own)
    concurrent: ClassVar[bool] = True
    drain_s: float = DRAIN_S
    #: run a query that writes nothing once more when one of its workers died
    retry_lost_workers: bool = True
    memory_options: ClassVar[bool] = True

    def __init__(
        self,
        workers: int | None = None,
        exchange: str | ExchangeFactory = "local",
        exchange_options: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        threads_per_worker: int | None = None,
        worker_env: dict[str, str] | None = None,
        pool_size: int | None = None,
        spare_workers: int = 0,
        worker_memory: int | None = None,
        memory: int | None = None,
    ) -> None:
        cores = os.cpu_count() or 1
        self.world_size = int(workers or cores)
        if self.world_size < 1 or self.world_size > 1024:
            raise OptionError(f"workers must be between 1 and 1024, got {workers}")
        self.pool_size = max(int(pool_size or self.world_size), self.world_size)
        #: names this platform's queries to its workers: a worker's kept DuckDB instance allows the files of all
        #: its earlier queries here (operators/sandbox_group.py); a platform per connection (see sharing())
        self.sandbox_group = uuid.uuid4().hex
        #: idle workers the pool keeps started beside the busy ones (see WorkerPool's ``spare``)
        self.spare_workers = min(int(spare_workers), self.pool_size)
        self._check_local_limit(max(self.world_size, self.pool_size), cores)
        options = dict(exchange_options or {})
        if exchange == "local" and "root" not in options:  # this driver's folder: swept if it dies by SIGKILL
            options["root"] = str(process_root())
        self.factory = (
            exchange
            if isinstance(exchange, ExchangeFactory)
            else exchange_factory(self.check_exchange(exchange), **options)
        )
        self.storage_options = dict(storage_options or {})
        #: bytes each worker may use at its peak (driver/platforms/memory.py): given, or the machine's (or
        #: ``memory``'s) share of each of the pool's processes and the driver
        self.memory_budget = (
            check_budget(int(worker_memory), "worker_memory")
            if worker_memory
            else local_worker_budget(self.pool_size, memory)
        )
        self._spill_root: str | None = None
        self._spill_bytes: int | None = None  # what each worker may spill (spill_root() sets it)
        self._threads_given = threads_per_worker
        self.threads = threads_per_worker or max(1, cores // self.world_size)
        self.worker_env = dict(worker_env or {})
        self._authkey = secrets.token_bytes(16)
        self._listener: Listener | None = None
        self._listener_dir: str | None = None
        self._spawn_logs: dict[int, Path] = {}
        self._owner: LocalPlatform = self  # the platform whose pool this one uses (see sharing())
        self._pool: WorkerPool | None = None
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._starting: threading.Thread | None = None  # prestart(): the pool starting beside planning
        self._start_error: BaseException | None = None

    def _check_local_limit(self, processes: int, cores: int) -> None:
        limit = max_local_workers(cores)
        if self._spawns_locally() and processes > limit:
            raise OptionError(
                f"workers must be at most {limit} on this machine, got {processes}: local workers are "
                f"processes on its {cores} core(s), at most {WORKERS_PER_CORE} per core and {MAX_WORKERS} in all; "
                "more only thrash it (use the lambda platform for more workers)"
            )

    def _spawns_locally(self) -> bool:
        """The platform starts its workers on this machine (subject to :func:`max_local_workers`)."""
        return True

    def shared_cores(self) -> int | None:
        """The cores a query's ranks share, which a stage on fewer ranks may take while the others wait
        (operators/stage_sandboxes.py): this machine's, when the platform starts its workers here and the threads
        per worker were not given; None otherwise (each rank keeps its threads)."""
        if self._threads_given or not self._spawns_locally():
            return None
        return os.cpu_count() or None

    def ranks_per_core(self, world_size: int) -> float:
        """More ranks than this machine has cores share them (W / cores; 1.0 up to one rank per core)."""
        cores = os.cpu_count() or 1
        return max(1.0, world_size / cores) if self._spawns_locally() else 1.0

    # --- the pool ---------------------------------------------------------------------------------

    @property
    def pool(self) -> WorkerPool:
        """The worker processes this platform's queries lease (its own, or its owner's: see :meth:`sharing`)."""
        owner = self._owner
        with owner._lock:
            if owner._pool is None:
                sweep_orphans()  # once per process: what drivers killed with SIGKILL left
                owner._pool = WorkerPool(owner.pool_size, owner, spare=owner.spare_workers)
            return owner._pool

    def sharing(self, workers: int) -> LocalPlatform:
        """A platform for plans of ``workers`` ranks that leases its workers from this platform's pool (at most
        ``pool_size``): queries of any W on the same processes. Closing it leaves the pool to this platform."""
        if not 1 <= int(workers) <= self.pool_size:
            raise OptionError(f"workers must be between 1 and {self.pool_size}, got {workers}")
        view = copy.copy(self)
        view.world_size = int(workers)
        view.threads = self._threads_given or max(1, (os.cpu_count() or 1) // view.world_size)
        view._owner, view._pool = self._owner, None
        view.sandbox_group = uuid.uuid4().hex
        view._runs, view._lock = {}, threading.Lock()
        view._starting, view._start_error = None, None
        return view

    # the pool's Launcher: how it starts workers (the fabric platform overrides _spawn and _get_listener)

    def pool_listener(self) -> Listener:
        return self._get_listener()

    def launch(self, slot: int) -> tuple[subprocess.Popen[bytes] | None, Path | None]:
        proc = self._spawn(slot)
        return proc, self._spawn_logs.pop(slot, None)

    def close_pool_listener(self) -> None:
        self._close_listener()

    def _get_listener(self) -> Listener:
        if self._listener is None:
            # our own private folder, not multiprocessing's /tmp/pymp-*: removed on close, SIGTERM, exit
            self._listener_dir = tempfile.mkdtemp(prefix=f"squall-{os.getpid()}-")
            address = os.path.join(self._listener_dir, "workers.sock")
            self._listener = Listener(address, family="AF_UNIX", authkey=self._authkey)
        return self._listener

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._listener_dir is not None:
            shutil.rmtree(self._listener_dir, ignore_errors=True)
            self._listener_dir = None

    def _spawn(self, rank: int) -> subprocess.Popen[bytes] | None:
        """Start the worker process of pool slot ``rank``; it connects back to the listener and says it."""
        logs = default_root() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SQUALL_WORKER_AUTHKEY": self._authkey.hex(), "SQUALL_DRIVER_PID": str(os.getpid()),
               **self.worker_env}  # fmt: skip
        address = str(self._get_listener().address)
        path = logs / f"worker-{os.getpid()}-{rank}-{uuid.uuid4().hex[:6]}.log"
        self._spawn_logs[rank] = path
        with open(path, "ab") as log_file:
            return subprocess.Popen(
                [sys.executable, "-m", "squall.driver.platforms.local.worker_process", address, str(rank), str(self.threads)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=env, process_group=0,
            )  # fmt: skip

    # what tests and tools look at: the pool's processes and logs by slot, the latest query
    @property
    def _procs(self) -> list[subprocess.Popen[bytes] | None]:
        return self.pool.processes()

    @property
    def _logs(self) -> list[Path | None]:
        return [w.log for w in self.pool.workers()]

    @property
    def _running(self) -> _Run | None:
        with self._lock:
            return next(reversed(self._runs.values()), None)

    def prestart(self, workers: int | None = None) -> None:
        """Start missing workers (``workers``, default this platform's W, at most the pool's size) in a background
        thread, e.g. while the driver plans the query; :meth:`execute` waits for it (and raises what it raised)."""
        with self._lock:
            if self._starting is not None:
                return
        size = min(workers or self.world_size, self.pool.capacity)
        if self.pool.ready(size):
            return
        self._track()  # on the calling (main) thread: the signal handlers can only be installed there
        pool = self.pool

        def start() -> None:
            try:
                pool.warm(size)
            except BaseException as exc:
                self._start_error = exc

        with self._lock:
            if self._starting is not None:
                return
            self._starting = threading.Thread(target=start, name="squall-pool-start", daemon=True)
            self._starting.start()

    def _track(self) -> None:
        """Stop this platform and its pool's owner at exit and on SIGTERM (see lifecycle)."""
        track(self)
        if self._owner is not self:
            track(self._owner)

    def _await_start(self) -> None:
        with self._lock:
            thread, self._starting = self._starting, None
        if thread is not None:
            thread.join()
            error, self._start_error = self._start_error, None
            if error is not None:
                raise error

    def spill_root(self) -> str:
        """The folder under which each worker process spills (``<tmp>/squall-<pid>-spill…``: swept with the
        driver's other folders if it dies by SIGKILL; removed on close)."""
        with self._lock:
            if self._spill_root is None:
                self._spill_root = tempfile.mkdtemp(prefix=f"squall-{os.getpid()}-spill")
                # fixed for the pool: the pool's workers split the disk, and a kept DuckDB instance stays valid
                self._spill_bytes = spill_limit(self._spill_root, self.pool_size)
            return self._spill_root

    def close(self) -> None:
        try:
            self._await_start()
        except Exception:
            pass  # closing anyway: what started is stopped below
        untrack(self)
        if self._owner is self:
            with self._lock:
                pool, self._pool = self._pool, None
            if pool is not None:
                pool.close()
            self._close_listener()
            if self._spill_root is not None:
                shutil.rmtree(self._spill_root, ignore_errors=True)
                self._spill_root, self._spill_bytes = None, None
        remove_process_root()

    def kill(self) -> None:
        """Stop everything now (SIGTERM): kill the running queries' workers, remove their files; the owner of
        the pool also kills the idle workers and removes the logs and the listener."""
        untrack(self)
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            for worker in run.workers:
                if worker.proc is not None and worker.proc.poll() is None:
                    worker.proc.kill()
            if run.config is not None:
                self._remove(run)
        if self._owner is self:
            with self._lock:
                pool, self._pool = self._pool, None
            if pool is not None:
                pool.kill()
            self._close_listener()
        remove_process_root()

    # --- queries ------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Cancel every query running on this platform (:meth:`cancel_query` cancels one)."""
        with self._lock:
            ids = list(self._runs)
        for query_id in ids:
            self.cancel_query(query_id)

    def cancel_query(self, query_id: str, reason: str = "query cancelled") -> None:
        """Cancel the query ``query_id`` if it runs here (a no-op otherwise): it raises QueryCancelled within
        about ``drain_s``."""
        with self._lock:
            run = self._runs.get(query_id)
        if run is not None and run.cancelled is None:
            run.cancelled = reason
            run.wake()

    def execute(
        self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None = None
    ) -> Execution:
        if plan.world_size != self.world_size:
            raise OptionError(f"plan is for {plan.world_size} workers, platform has {self.world_size}")
        self._await_start()
        self._track()
        run = _Run(query_id)
        with self._lock:
            if query_id in self._runs:
                raise OptionError(f"query {query_id} already runs on this platform")
            self._runs[query_id] = run
        try:
            return self._execute(plan, run, progress)
        finally:
            with self._lock:
                self._runs.pop(query_id, None)
            run.close()

    def _execute(self, plan: Plan, run: _Run, progress: Callable[[Progress], None] | None) -> Execution:
        """Run the attempts of ``run``: a second one on other workers when the first lost a worker process and
        the query writes nothing."""
        retried: str | None = None
        while True:
            run.run_id = run.query_id if retried is None else f"{run.query_id}-retry"
            try:
                execution = self._attempt(plan, run, progress)
            except _Lost as lost:
                if retried is not None:
                    lost.error.args = (f"{lost.error}; it was the second attempt: {retried}",)
                    raise lost.error from None
                if not self.retry_lost_workers or plan.write is not None or run.cancelled is not None:
                    raise lost.error from None
                retried = f"the first attempt failed ({lost.error}) and the query ran again"
                log.warning("query %s: %s", run.query_id, retried)
                continue
            if retried is not None:
                execution.details["retried"] = retried
            return execution

    def _attempt(self, plan: Plan, run: _Run, progress: Callable[[Progress], None] | None) -> Execution:
        """One run of ``plan`` on workers leased for it; they go back to the pool afterwards (the killed and the
        dead ones are stopped; the pool starts new ones when needed)."""
        results = process_root() / "results"
        results.mkdir(parents=True, exist_ok=True)
        run.result_path = results / f"{run.run_id}-{uuid.uuid4().hex[:6]}.arrow"
        run.config, run.workers = None, []
        broken: dict[PoolWorker, bool] = {}  # worker -> keep its log
        pending: dict[int, PoolWorker] = {}
        try:
            run.workers = self.pool.lease(self.world_size, lambda: run.cancelled is not None, _affinity(plan))
            run.config = self.factory.prepare(run.run_id, self.world_size)
            pending = self._send(plan, run)
            state = Progress(len(plan.stages), self.world_size)
            reports = _Collector(self, run, pending, broken, state, progress).collect()
            return Execution(_read_result(run.result_path, plan.result_stage.ranks), reports)
        except BaseException:
            # interrupted (Ctrl-C, a progress callback) with ranks running
            if pending and run.config is not None:
                with deferred_sigint() as again:  # a second Ctrl-C, however soon, kills instead of escaping
                    self.factory.abort(run.config, "query interrupted")
                    self._drain(run, pending, again, broken)
            raise
        finally:
            with deferred_sigint():
                if run.config is not None:
                    self._remove(run)
                self.pool.release(run.workers, broken)
                run.workers = []

    def _send(self, plan: Plan, run: _Run) -> dict[int, PoolWorker]:
        """Send every rank its message; returns the ranks now running (rank -> worker)."""
        assert run.config is not None and run.result_path is not None
        pending: dict[int, PoolWorker] = {}
        plan_json = plan.to_json()
        for rank, worker in enumerate(run.workers):
            message = {
                "rank": rank,
                "plan": plan_json,
                "query_id": run.run_id,
                "exchange": run.config,
                "result_path": str(run.result_path),
                "storage_options": self.storage_options,
                "threads": self.threads,
                "cores": self.shared_cores(),
                "memory_budget": self.memory_budget,
                "spill_root": self._owner.spill_root(),
                "sandbox_group": self.sandbox_group,
                "spill_bytes": self._owner._spill_bytes,
            }
            with deferred_sigint():  # a message is sent whole or not at all
                pending[rank] = worker
                try:
                    worker.conn.send(message)
                except OSError:
                    pass  # the worker died: the wait sees it
        return pending

    def _remove(self, run: _Run) -> None:
        """Remove the query's exchange folders and result file."""
        if run.config is not None:
            self.factory.cleanup(run.config)
        if run.result_path is None:
            return
        run.result_path.unlink(missing_ok=True)
        run.result_path.with_name(run.result_path.name + ".tmp").unlink(missing_ok=True)
        for part in run.result_path.parent.glob(run.result_path.name + ".rank*"):  # result parts
            part.unlink(missing_ok=True)

    def _drain(
        self, run: _Run, pending: dict[int, PoolWorker], again: list[int], broken: dict[PoolWorker, bool]
    ) -> None:
        """Wait up to ``drain_s`` for the ranks still running to report, then kill the others (at once when
        ``again``, the SIGINTs held back, fills: a second Ctrl-C): afterwards no rank works on ``run`` any more."""
        deadline = time.monotonic() + self.drain_s
        while pending and not again and time.monotonic() < deadline:
            by_conn = {id(w.conn): r for r, w in pending.items()}
            for ready in wait([w.conn for w in pending.values()], timeout=0.05):
                rank = by_conn[id(ready)]
                try:
                    msg = pending[rank].conn.recv()
                except (EOFError, OSError):
                    broken[pending.pop(rank)] = True
                    continue
                if _is_current(msg, run) and msg[0] in ("done", "error"):
                    del pending[rank]
        for rank in list(pending):
            broken[pending.pop(rank)] = False


class _Collector:
    """Reads the messages of one attempt's ranks until each reported, died or was killed (``pending`` shrinks as
    they do). A cancel or the first failure starts the drain: the other ranks get ``drain_s`` to stop."""

    def __init__(
        self,
        platform: LocalPlatform,
        run: _Run,
        pending: dict[int, PoolWorker],
        broken: dict[PoolWorker, bool],
        state: Progress,
        progress: Callable[[Progress], None] | None,
    ) -> None:
        self.platform, self.run, self.pending, self.broken = platform, run, pending, broken
        self.state, self.progress = state, progress
        self.reports: dict[int, dict[str, Any]] = {}
        self.failures: list[tuple[int, str, str, str]] = []  # rank, kind, message, traceback
        self.deadline: float | None = None

    def collect(self) -> list[dict[str, Any]]:
        run = self.run
        while self.pending:
            if run.cancelled is not None and self.deadline is None:
                self._abort(run.cancelled)
            if self.deadline is not None and time.monotonic() >= self.deadline:
                for rank in list(self.pending):
                    self.broken[self.pending.pop(rank)] = False
                break
            self._wait_once()
        if run.cancelled is not None:
            raise QueryCancelled(run.cancelled)
        if self.failures:
            raise _first_failure(self.failures)
        return [self.reports[r] for r in sorted(self.reports)]

    def _abort(self, reason: str) -> None:
        """Abort the exchange (ranks stop at their next wait) and start the drain."""
        assert self.run.config is not None
        self.platform.factory.abort(self.run.config, reason)
        if self.deadline is None:
            self.deadline = time.monotonic() + self.platform.drain_s

    def _wait_once(self) -> None:
        waitables: list[Any] = [self.run.waker[0]]
        owner: dict[int, int] = {}  # id of a connection or pidfd -> rank
        for rank, worker in self.pending.items():
            waitables.append(worker.conn)
            owner[id(worker.conn)] = rank
            if worker.pidfd is not None:
                waitables.append(worker.pidfd)
                owner[worker.pidfd] = rank
        timeout = 1.0 if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        for ready in wait(waitables, timeout=timeout):
            if ready == self.run.waker[0]:
                _drain_pipe(self.run.waker[0])
                continue
            rank = owner[ready] if isinstance(ready, int) else owner[id(ready)]
            if rank in self.pending:
                self._read(rank, exited=isinstance(ready, int))

    def _read(self, rank: int, exited: bool) -> None:
        """Read what rank's worker sent; a worker whose process ended (``exited``) or whose connection closed
        is lost once nothing is left to read."""
        conn = self.pending[rank].conn
        try:
            while not exited or conn.poll():
                with deferred_sigint():  # a message is read whole or not at all
                    msg = conn.recv()
                if self._handle(rank, msg):
                    return
                if not exited:
                    return
        except (EOFError, OSError):
            pass
        self._lost(rank)

    def _handle(self, rank: int, msg: Any) -> bool:
        """Act on one message; True when the rank is done with this attempt."""
        if not _is_current(msg, self.run):
            return False  # a message of an earlier query
        if msg[0] == "stage":
            self.state.done[msg[3]] = self.state.done.get(msg[3], 0) + 1
            if self.progress is not None:
                self.progress(self.state)
            return False
        if msg[0] == "done":
            self.reports[rank] = msg[3]
        elif msg[0] == "error":
            _tag, _qid, _rank, kind, message, tb = msg
            self.failures.append((rank, kind, message, tb))
            if kind != "aborted":
                self._abort(f"rank {rank} failed: {message}")
        del self.pending[rank]
        return True

    def _lost(self, rank: int) -> None:
        worker = self.pending.pop(rank)
        message = _lost_message(worker.exit_code(timeout=1.0)) + log_hint(worker.log)
        self.failures.append((rank, "lost", message, ""))
        self.broken[worker] = True
        self._abort(f"rank {rank} died")


def _pipe() -> tuple[int, int]:
    read, write = os.pipe()
    for fd in (read, write):
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    return read, write


def _drain_pipe(fd: int) -> None:
    try:
        while os.read(fd, 64):
            pass
    except OSError:  # empty
        pass


def _is_current(msg: object, run: _Run) -> bool:
    """``msg`` is a worker message ``(tag, query_id, rank, …)`` of the run's current attempt."""
    return isinstance(msg, tuple) and len(msg) >= 3 and msg[1] == run.run_id


def _lost_message(code: int | None) -> str:
    if code is None:
        return "worker connection lost"
    if code < 0:
        try:
            name = f" ({signal.Signals(-code).name})"
        except ValueError:
            name = ""
        return f"worker process was killed by signal {-code}{name}"
    return f"worker process exited with code {code}"


def _first_failure(failures: list[tuple[int, str, str, str]]) -> SquallError | _Lost:
    real = [f for f in failures if f[1] != "aborted"] or failures
    rank, kind, message, tb = real[0]
    if kind == "user":
        return QueryRuntimeError(message)
    err = WorkerError(f"rank {rank} failed: {message}")
    if kind == "lost":
        return _Lost(err)
    err.__notes__ = [tb] if tb else []
    return err


def _read_result(path: Path, ranks: tuple[int, ...] = (0,)) -> pa.Table:
    """Rank 0's result, or the parts of ``ranks`` concatenated in rank order (sorted ranges)."""
    tables = []
    for rank in ranks:
        with pa.memory_map(result_part_path(str(path), rank), "r") as source:
            tables.append(pa.ipc.open_file(source).read_all())
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _affinity(plan: Plan) -> tuple[object, ...]:
    """What a worker's kept DuckDB instance for ``plan`` depends on: its W (the threads) and the tables it scans
    (the sandbox's allowed files). The pool gives a query the workers that last ran one of the same."""
    tables = {inp.location for stage in plan.stages for inp in stage.inputs if isinstance(inp, ScanInput)}
    return (plan.world_size, tuple(sorted(tables)))
