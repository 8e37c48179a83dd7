"""The local platform: a warm pool of W worker processes on this machine (the embedded default).

Each worker is a spawned process that stays alive between queries and runs
one rank per query. The driver sends every worker the plan (JSON) and the
exchange config, listens for stage-done messages (progress), reports and
errors, aborts the exchange as soon as one rank fails so the others stop
waiting, and always cleans the query's exchange data and result file up.
A worker process that dies is replaced before the next query.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener, wait
from pathlib import Path
from typing import Any, ClassVar, cast

import pyarrow as pa

from squall.driver.platforms.base import Execution, Platform, Progress
from squall.errors import OptionError, QueryRuntimeError, SquallError, WorkerError
from squall.exchange.base import ExchangeFactory, exchange_factory
from squall.exchange.local import default_root
from squall.plan import Plan


class LocalPlatform(Platform):
    """W warm worker processes; exchange through a shared folder unless told otherwise."""

    name = "local"
    exchanges: ClassVar[tuple[str, ...]] = ("local", "s3", "fabric")
    storages: ClassVar[tuple[str, ...]] = ("file", "s3")

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
        self.factory = (
            exchange
            if isinstance(exchange, ExchangeFactory)
            else exchange_factory(self.check_exchange(exchange), **(exchange_options or {}))
        )
        self.storage_options = dict(storage_options or {})
        self.threads = threads_per_worker or max(1, cores // self.world_size)
        self.worker_env = dict(worker_env or {})
        self._procs: list[subprocess.Popen[bytes] | None] = []
        self._conns: list[Connection] = []
        self._authkey = secrets.token_bytes(16)
        self._listener: Listener | None = None
        self._running: dict[str, Any] | None = None

    # --- pool ---------------------------------------------------------------------------------

    def _get_listener(self) -> Listener:
        if self._listener is None:
            self._listener = Listener(family="AF_UNIX", authkey=self._authkey)
        return self._listener

    def _spawn(self, rank: int) -> subprocess.Popen[bytes] | None:
        """Start rank ``rank``'s process; it connects back to the listener and says its rank."""
        logs = default_root() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SQUALL_WORKER_AUTHKEY=self._authkey.hex(), **self.worker_env)
        address = str(self._get_listener().address)
        with open(logs / f"worker-{os.getpid()}-{rank}.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "squall.driver.platforms.local.worker_process", address, str(rank), str(self.threads)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
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

    def _ensure_pool(self) -> None:
        """Start missing or dead workers and wait until each has connected back."""
        while len(self._procs) < self.world_size:
            self._procs.append(None)
            self._conns.append(None)  # type: ignore[arg-type]
        missing = [rank for rank in range(self.world_size) if not self._alive(rank)]
        if not missing:
            return
        listener = self._get_listener()
        started = {rank: self._spawn(rank) for rank in missing}
        for _ in missing:
            conn = listener.accept()
            rank = conn.recv()
            if not isinstance(rank, int) or not 0 <= rank < self.world_size:
                conn.close()
                raise WorkerError(f"a worker connected with rank {rank!r}, expected 0..{self.world_size - 1}")
            self._procs[rank], self._conns[rank] = started.get(rank), conn

    def close(self) -> None:
        for conn in self._conns:
            if conn is None:
                continue
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for proc in self._procs:
            if proc is None:
                continue
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._procs, self._conns = [], []

    # --- queries ------------------------------------------------------------------------------

    def cancel(self) -> None:
        running = self._running
        if running is not None:
            self.factory.abort(running["config"], "query cancelled")

    def execute(
        self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None = None
    ) -> Execution:
        if plan.world_size != self.world_size:
            raise OptionError(f"plan is for {plan.world_size} workers, platform has {self.world_size}")
        self._ensure_pool()
        config = self.factory.prepare(query_id, self.world_size)
        results = default_root() / "results"
        results.mkdir(parents=True, exist_ok=True)
        result_path = results / f"{query_id}-{uuid.uuid4().hex[:6]}.arrow"
        self._running = {"config": config}
        state = Progress(len(plan.stages), self.world_size)
        try:
            plan_json = plan.to_json()
            for rank, conn in enumerate(self._conns):
                conn.send(
                    {
                        "rank": rank,
                        "plan": plan_json,
                        "query_id": query_id,
                        "exchange": config,
                        "result_path": str(result_path),
                        "storage_options": self.storage_options,
                    }
                )
            reports = self._collect(config, state, progress)
            table = _read_result(result_path)
            return Execution(table, reports)
        finally:
            self._running = None
            self.factory.cleanup(config)
            result_path.unlink(missing_ok=True)

    def _collect(
        self, config: dict[str, Any], state: Progress, progress: Callable[[Progress], None] | None
    ) -> list[dict[str, Any]]:
        pending = dict(enumerate(self._conns))
        reports: dict[int, dict[str, Any]] = {}
        failures: list[tuple[int, str, str, str]] = []
        while pending:
            ready = wait(list(pending.values()), timeout=1.0)
            if not ready:
                for rank in list(pending):
                    if not self._alive(rank):
                        code = self._exit_code(rank)
                        failures.append((rank, "error", _lost(code), ""))
                        self.factory.abort(config, f"rank {rank} died")
                        del pending[rank]
                continue
            for ready_conn in ready:
                conn = cast(Connection, ready_conn)
                rank = next(r for r, c in pending.items() if c is conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    conn.close()
                    code = self._exit_code(rank)
                    failures.append((rank, "error", _lost(code), ""))
                    self.factory.abort(config, f"rank {rank} died")
                    del pending[rank]
                    continue
                if msg[0] == "stage":
                    state.done[msg[2]] = state.done.get(msg[2], 0) + 1
                    if progress is not None:
                        progress(state)
                elif msg[0] == "done":
                    reports[rank] = msg[2]
                    del pending[rank]
                elif msg[0] == "error":
                    _tag, _rank, kind, message, tb = msg
                    failures.append((rank, kind, message, tb))
                    if kind != "aborted":
                        self.factory.abort(config, f"rank {rank} failed: {message}")
                    del pending[rank]
        if failures:
            raise _first_failure(failures)
        return [reports[r] for r in sorted(reports)]


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


def _read_result(path: Path) -> pa.Table:
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    return table
