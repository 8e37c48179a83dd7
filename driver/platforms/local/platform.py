"""The local platform: a warm pool of W worker processes on this machine (the embedded default).

Each worker is a spawned process that stays alive between queries and runs
one rank per query. The driver sends every worker the plan (JSON) and the
exchange config, listens for stage-done messages (progress), reports and
errors, aborts the exchange as soon as one rank fails so the others stop
waiting, and always cleans the query's exchange data and result file up.

Lifecycle of a query, also when it does not finish:

- every message a worker sends carries the query id; messages of another query are discarded;
- cancelled (:meth:`LocalPlatform.cancel`, a timeout) or interrupted (Ctrl-C, an exception in a
  progress callback): the exchange is aborted, so ranks stop at their next stage or exchange wait;
  the driver waits up to ``drain_s`` for every rank to report, kills the ranks that did not (a second
  Ctrl-C kills them at once), removes the query's folders and result file, then raises
  (:class:`QueryCancelled`, or the KeyboardInterrupt itself). The pool stays usable: a killed or dead
  worker is replaced before the next query;
- workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group; only the driver
  decides) and run in their own process group;
- on SIGTERM/SIGHUP or at exit the workers are stopped and every file is removed
  (:mod:`~squall.driver.platforms.local.lifecycle`).

Limits: at most ``8 * cores`` workers and never more than 256 (:func:`max_local_workers`); more
processes than that only thrash the machine. Worker logs (``<root>/logs/worker-*.log``) are removed
when a worker stops, unless it failed and wrote something; the error then says where the log is.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener, wait
from pathlib import Path
from typing import Any, ClassVar, cast

import pyarrow as pa

from squall.driver.platforms.base import Execution, Platform, Progress
from squall.driver.platforms.local.lifecycle import deferred_sigint, track, untrack
from squall.driver.platforms.local.worker_process import result_part_path
from squall.errors import OptionError, QueryCancelled, QueryRuntimeError, SquallError, WorkerError
from squall.exchange.base import ExchangeFactory, exchange_factory
from squall.exchange.local import default_root
from squall.plan import Plan

#: workers per core and in all that a machine takes before processes only thrash it
WORKERS_PER_CORE = 8
MAX_WORKERS = 256
#: seconds to wait for the ranks of a cancelled or interrupted query before killing them
DRAIN_S = 3.0


def max_local_workers(cores: int | None = None) -> int:
    """The most worker processes the local platform starts on this machine: 8 per core, at most 256."""
    return min(WORKERS_PER_CORE * (cores or os.cpu_count() or 1), MAX_WORKERS)


@dataclass
class _Run:
    """The running query."""

    query_id: str
    config: dict[str, Any]
    result_path: Path
    cancelled: str | None = None


class LocalPlatform(Platform):
    """W warm worker processes; exchange through a shared folder unless told otherwise."""

    name = "local"
    exchanges: ClassVar[tuple[str, ...]] = ("local", "s3", "fabric")
    storages: ClassVar[tuple[str, ...]] = ("file", "s3")
    drain_s: float = DRAIN_S

    def __init__(
        self,
        workers: int | None = None,
        exchange: str | ExchangeFactory = "local",
        exchange_options: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        threads_per_worker: int | None = None,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        cores = os.cpu_count() or 1
        self.world_size = int(workers or cores)
        if self.world_size < 1 or self.world_size > 1024:
            raise OptionError(f"workers must be between 1 and 1024, got {workers}")
        limit = max_local_workers(cores)
        if self._spawns_locally() and self.world_size > limit:
            raise OptionError(
                f"workers must be at most {limit} on this machine, got {self.world_size}: local workers are "
                f"processes on its {cores} core(s), at most {WORKERS_PER_CORE} per core and {MAX_WORKERS} in all; "
                "more only thrash it (use the lambda platform for more workers)"
            )
        self.factory = (
            exchange
            if isinstance(exchange, ExchangeFactory)
            else exchange_factory(self.check_exchange(exchange), **(exchange_options or {}))
        )
        self.storage_options = dict(storage_options or {})
        self.threads = threads_per_worker or max(1, cores // self.world_size)
        self.worker_env = dict(worker_env or {})
        self._procs: list[subprocess.Popen[bytes] | None] = []
        self._conns: list[Connection | None] = []
        self._logs: list[Path | None] = []
        self._authkey = secrets.token_bytes(16)
        self._listener: Listener | None = None
        self._listener_dir: str | None = None
        self._running: _Run | None = None
        self._starting: threading.Thread | None = None  # prestart(): the pool starting beside planning
        self._start_error: BaseException | None = None

    def _spawns_locally(self) -> bool:
        """The platform starts its workers on this machine (subject to :func:`max_local_workers`)."""
        return True

    def ranks_per_core(self, world_size: int) -> float:
        """More ranks than this machine has cores share them (W / cores; 1.0 up to one rank per core)."""
        cores = os.cpu_count() or 1
        return max(1.0, world_size / cores) if self._spawns_locally() else 1.0

    # --- pool ---------------------------------------------------------------------------------

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
        """Start rank ``rank``'s process; it connects back to the listener and says its rank."""
        logs = default_root() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SQUALL_WORKER_AUTHKEY": self._authkey.hex(), **self.worker_env}
        address = str(self._get_listener().address)
        path = logs / f"worker-{os.getpid()}-{rank}-{uuid.uuid4().hex[:6]}.log"
        self._logs[rank] = path
        with open(path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "squall.driver.platforms.local.worker_process", address, str(rank), str(self.threads)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, process_group=0,
            )  # fmt: skip

    def _alive(self, rank: int) -> bool:
        proc, conn = self._procs[rank], self._conns[rank]
        if conn is None or conn.closed:
            return False
        return proc is None or proc.poll() is None

    def _exit_code(self, rank: int) -> int | None:
        proc = self._procs[rank]
        if proc is None:
            return None
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _log_hint(self, rank: int) -> str:
        """`` (its log: PATH)`` when rank's worker wrote a log, else nothing."""
        path = self._logs[rank] if rank < len(self._logs) else None
        if path is not None and _size(path):
            return f" (its log: {path})"
        return ""

    def _forget(self, rank: int, keep_log: bool) -> None:
        """Let go of rank's worker (kill it if alive); remove its log unless kept and not empty."""
        conn, proc, log = self._conns[rank], self._procs[rank], self._logs[rank]
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if log is not None and not (keep_log and _size(log)):
            log.unlink(missing_ok=True)
        self._procs[rank], self._conns[rank], self._logs[rank] = None, None, None

    def _ensure_pool(self) -> None:
        """Start missing or dead workers and wait until each has connected back."""
        while len(self._procs) < self.world_size:
            self._procs.append(None)
            self._conns.append(None)
            self._logs.append(None)
        missing = [rank for rank in range(self.world_size) if not self._alive(rank)]
        if not missing:
            return
        for rank in missing:  # a worker that died failed: keep what it wrote
            self._forget(rank, keep_log=True)
        track(self)
        listener = self._get_listener()
        started: dict[int, subprocess.Popen[bytes] | None] = {}
        try:
            for rank in missing:
                started[rank] = self._spawn(rank)
                self._procs[rank] = started[rank]
            waiting = set(missing)
            while waiting:
                if not _acceptable(listener, 0.5):
                    for rank in waiting:
                        proc = started[rank]
                        if proc is not None and proc.poll() is not None:
                            raise WorkerError(
                                f"rank {rank}'s worker process exited with code {proc.returncode} while starting"
                                f"{self._log_hint(rank)}"
                            )
                    continue
                conn = listener.accept()
                rank = conn.recv()
                if not isinstance(rank, int) or rank not in waiting:
                    conn.close()
                    raise WorkerError(
                        f"a worker connected with rank {rank!r}, expected one of {sorted(waiting)}"
                    )
                self._conns[rank] = conn
                waiting.discard(rank)
        except BaseException as exc:  # Ctrl-C or a failed start: no half-started pool stays behind
            for rank in started:
                self._forget(rank, keep_log=not isinstance(exc, KeyboardInterrupt))
            if all(p is not None for p in started.values()):
                self._close_listener()  # drops connections still waiting in its backlog
            raise

    def prestart(self) -> None:
        """Start missing workers in a background thread, e.g. while the driver plans the query;
        :meth:`execute` waits for it (and raises what it raised)."""
        if self._starting is not None:
            return
        if len(self._procs) == self.world_size and all(self._alive(r) for r in range(self.world_size)):
            return
        track(self)  # on the calling (main) thread: the signal handlers can only be installed there

        def start() -> None:
            try:
                self._ensure_pool()
            except BaseException as exc:
                self._start_error = exc

        self._starting = threading.Thread(target=start, name="squall-pool-start", daemon=True)
        self._starting.start()

    def _await_start(self) -> None:
        thread, self._starting = self._starting, None
        if thread is not None:
            thread.join()
            error, self._start_error = self._start_error, None
            if error is not None:
                raise error

    def close(self) -> None:
        try:
            self._await_start()
        except Exception:
            pass  # closing anyway: what started is stopped below
        untrack(self)
        for conn in self._conns:
            if conn is None:
                continue
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        for rank, proc in enumerate(self._procs):
            code = None
            if proc is not None:
                try:
                    code = proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self._forget(rank, keep_log=code not in (0, None))
        self._close_listener()
        self._procs, self._conns, self._logs = [], [], []

    def kill(self) -> None:
        """Stop everything now (SIGTERM): kill the workers, remove the running query's files, the logs,
        the listener."""
        untrack(self)
        for proc in self._procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
        run = self._running
        for rank in range(len(self._procs)):
            self._forget(rank, keep_log=False)
        if run is not None:
            self._remove(run)
        self._close_listener()
        self._procs, self._conns, self._logs = [], [], []

    # --- queries ------------------------------------------------------------------------------

    def cancel(self) -> None:
        run = self._running
        if run is not None and run.cancelled is None:
            run.cancelled = "query cancelled"
            self.factory.abort(run.config, "query cancelled")

    def execute(
        self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None = None
    ) -> Execution:
        if plan.world_size != self.world_size:
            raise OptionError(f"plan is for {plan.world_size} workers, platform has {self.world_size}")
        self._await_start()
        self._ensure_pool()
        results = default_root() / "results"
        results.mkdir(parents=True, exist_ok=True)
        run: _Run | None = None
        pending: dict[int, Connection] = {}
        try:
            run = _Run(
                query_id,
                self.factory.prepare(query_id, self.world_size),
                results / f"{query_id}-{uuid.uuid4().hex[:6]}.arrow",
            )
            self._running = run
            state = Progress(len(plan.stages), self.world_size)
            plan_json = plan.to_json()
            for rank, conn in enumerate(self._conns):
                assert conn is not None
                message = {
                    "rank": rank,
                    "plan": plan_json,
                    "query_id": query_id,
                    "exchange": run.config,
                    "result_path": str(run.result_path),
                    "storage_options": self.storage_options,
                }
                with deferred_sigint():  # a message is sent whole or not at all
                    pending[rank] = conn
                    try:
                        conn.send(message)
                    except OSError:
                        pass  # the worker died: _collect sees its connection end
            reports = self._collect(run, pending, state, progress)
            table = _read_result(run.result_path, plan.result_stage.ranks)
            return Execution(table, reports)
        except BaseException:
            if run is not None and pending:  # interrupted (Ctrl-C, a progress callback) with ranks running
                with deferred_sigint() as again:  # a second Ctrl-C, however soon, kills instead of escaping
                    self.factory.abort(run.config, "query interrupted")
                    self._drain(run, pending, again)
            raise
        finally:
            with deferred_sigint():
                self._running = None
                if run is not None:
                    self._remove(run)

    def _remove(self, run: _Run) -> None:
        """Remove the query's exchange folders and result file."""
        self.factory.cleanup(run.config)
        run.result_path.unlink(missing_ok=True)
        run.result_path.with_name(run.result_path.name + ".tmp").unlink(missing_ok=True)
        for part in run.result_path.parent.glob(run.result_path.name + ".rank*"):  # result parts
            part.unlink(missing_ok=True)

    def _rank_of(self, pending: dict[int, Connection], conn: object) -> int:
        return next(r for r, c in pending.items() if c is conn)

    def _drain(self, run: _Run, pending: dict[int, Connection], again: list[int]) -> None:
        """Wait up to ``drain_s`` for the ranks still running to report, then kill the others (at once when
        ``again``, the SIGINTs held back, fills: a second Ctrl-C): afterwards no rank works on ``run`` any more."""
        deadline = time.monotonic() + self.drain_s
        while pending and not again and time.monotonic() < deadline:
            for ready in wait(list(pending.values()), timeout=0.05):
                rank = self._rank_of(pending, ready)
                try:
                    msg = cast(Connection, ready).recv()
                except (EOFError, OSError):
                    self._forget(rank, keep_log=True)
                    del pending[rank]
                    continue
                if _is_current(msg, run) and msg[0] in ("done", "error"):
                    del pending[rank]
        for rank in list(pending):
            self._forget(rank, keep_log=False)
        pending.clear()

    def _collect(
        self,
        run: _Run,
        pending: dict[int, Connection],
        state: Progress,
        progress: Callable[[Progress], None] | None,
    ) -> list[dict[str, Any]]:
        """Read the ranks' messages until each reported (``pending`` shrinks as they do)."""
        reports: dict[int, dict[str, Any]] = {}
        failures: list[tuple[int, str, str, str]] = []
        checked = time.monotonic()
        drain_until: float | None = None

        def lost(rank: int) -> None:
            failures.append((rank, "error", _lost(self._exit_code(rank)) + self._log_hint(rank), ""))
            self.factory.abort(run.config, f"rank {rank} died")
            del pending[rank]

        while pending:
            if run.cancelled is not None:
                now = time.monotonic()
                if drain_until is None:
                    drain_until = now + self.drain_s
                elif now > drain_until:
                    for rank in list(pending):
                        self._forget(rank, keep_log=False)
                    pending.clear()
                    break
            ready = wait(list(pending.values()), timeout=0.2)
            if not ready:
                if time.monotonic() - checked > 1.0:
                    checked = time.monotonic()
                    for rank in list(pending):
                        if not self._alive(rank):
                            lost(rank)
                continue
            for ready_conn in ready:
                conn = cast(Connection, ready_conn)
                rank = self._rank_of(pending, conn)
                try:
                    with deferred_sigint():  # a message is read whole or not at all
                        msg = conn.recv()
                except (EOFError, OSError):
                    conn.close()
                    lost(rank)
                    continue
                if not _is_current(msg, run):
                    continue  # a message of an earlier query
                if msg[0] == "stage":
                    state.done[msg[3]] = state.done.get(msg[3], 0) + 1
                    if progress is not None:
                        progress(state)
                elif msg[0] == "done":
                    reports[rank] = msg[3]
                    del pending[rank]
                elif msg[0] == "error":
                    _tag, _qid, _rank, kind, message, tb = msg
                    failures.append((rank, kind, message, tb))
                    if kind != "aborted":
                        self.factory.abort(run.config, f"rank {rank} failed: {message}")
                    del pending[rank]
        if run.cancelled is not None:
            raise QueryCancelled(run.cancelled)
        if failures:
            raise _first_failure(failures)
        return [reports[r] for r in sorted(reports)]


def _is_current(msg: object, run: _Run) -> bool:
    """``msg`` is a worker message ``(tag, query_id, rank, …)`` of the running query."""
    return isinstance(msg, tuple) and len(msg) >= 3 and msg[1] == run.query_id


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _acceptable(listener: Listener, timeout: float) -> bool:
    """A worker waits to be accepted (True when the listener's socket cannot be polled)."""
    sock = getattr(getattr(listener, "_listener", None), "_socket", None)
    if sock is None:
        return True
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


def _lost(code: int | None) -> str:
    return f"worker process exited with code {code}" if code is not None else "worker connection lost"


def _first_failure(failures: list[tuple[int, str, str, str]]) -> SquallError:
    real = [f for f in failures if f[1] != "aborted"] or failures
    rank, kind, message, tb = real[0]
    if kind == "user":
        return QueryRuntimeError(message)
    err = WorkerError(f"rank {rank} failed: {message}")
    err.__notes__ = [tb] if tb else []
    return err


def _read_result(path: Path, ranks: tuple[int, ...] = (0,)) -> pa.Table:
    """Rank 0's result, or the parts of ``ranks`` concatenated in rank order (sorted ranges)."""
    tables = []
    for rank in ranks:
        with pa.memory_map(result_part_path(str(path), rank), "r") as source:
            tables.append(pa.ipc.open_file(source).read_all())
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
