"""The local platform's worker pool: warm worker processes that queries lease, several at once.

A query of W ranks leases W idle workers for its run and gives them back when it ends (:meth:`WorkerPool.lease`,
:meth:`WorkerPool.release`); the rank a worker plays comes with each query, so queries of any W reuse the same
processes. When too few are idle the pool starts more, up to its ``capacity``; beyond that a lease waits, first
come first served. A worker found dead (killed, crashed) is dropped and a new one started when needed; a worker
the query had to kill (it did not stop when told) is given back as broken and replaced the same way.

Processes are started from one long-lived thread (:class:`_Spawner`): a worker asks Linux to kill it when the
thread that started it ends (``PR_SET_PDEATHSIG``, see :func:`squall.driver.platforms.local.worker_process.main`),
and that thread ends only with the process, so workers never outlive the driver, not even a SIGKILL of it.
Each worker has a process file descriptor (``pidfd``) that becomes readable the moment it exits: the platform
waits on it beside the worker's connection and sees a crash at once.
"""

from __future__ import annotations

import functools
import os
import queue
import select
import subprocess
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any, Protocol, TypeVar

from squall.errors import QueryCancelled, WorkerError

T = TypeVar("T")

#: seconds a stopping worker gets to exit after being told to before it is killed
STOP_S = 5.0
#: query shapes whose last workers a pool remembers (:meth:`WorkerPool.lease`'s ``affinity``)
AFFINITIES_KEPT = 512


class Launcher(Protocol):
    """How a pool starts its workers: the platform that owns it (the fabric platform brings its own listener)."""

    def pool_listener(self) -> Listener:
        """The listener workers connect back to (made on first use)."""

    def launch(self, slot: int) -> tuple[subprocess.Popen[bytes] | None, Path | None]:
        """Start the worker that will say ``slot`` when it connects: its process (None when a cluster launcher
        starts it) and its log file."""

    def close_pool_listener(self) -> None:
        """Close the listener and remove its folder."""


class _Spawner:
    """One daemon thread that starts every worker process (see the module doc: ``PR_SET_PDEATHSIG`` fires when
    the *thread* that started a process ends, so it must be a thread that lives as long as the driver)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the spawner thread and return what it returned (or raise what it raised)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="squall-spawner", daemon=True)
                self._thread.start()
        done: Future[T] = Future()
        self._jobs.put((fn, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            fn, done = self._jobs.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)


_spawner = _Spawner()


@dataclass(eq=False)
class PoolWorker:
    """One worker process of a pool: ``slot`` is its name in the pool (not a rank: ranks come with each query)."""

    slot: int
    proc: subprocess.Popen[bytes] | None
    conn: Connection
    log: Path | None
    pidfd: int | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        if self.conn.closed:
            return False
        return self.proc is None or self.proc.poll() is None

    def exit_code(self, timeout: float = STOP_S) -> int | None:
        """The process's exit code (waiting up to ``timeout`` for it), None when unknown."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, keep_log: bool) -> None:
        """Kill the process if it still runs, let go of it, and remove its log unless ``keep_log``."""
        self.conn.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.exit_code()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.log is not None and not keep_log:
            self.log.unlink(missing_ok=True)


class WorkerPool:
    """Worker processes that queries lease (see the module doc). ``capacity``: the most processes it runs;
    ``spare``: after a lease leaves fewer idle workers than this, more start in the background (within capacity),
    so the next query finds warm ones (a service's fast lane)."""

    def __init__(self, capacity: int, launcher: Launcher, spare: int = 0) -> None:
        self.capacity = int(capacity)
        self.spare = int(spare)
        self.launcher = launcher
        self._cond = threading.Condition()
        self._idle: list[PoolWorker] = []
        self._busy: set[PoolWorker] = set()
        self._starting: set[int] = set()  # slots being started
        self._spawned: dict[int, subprocess.Popen[bytes] | None] = {}  # their processes, once spawned
        self._affinity: OrderedDict[Hashable, tuple[int, ...]] = OrderedDict()  # see lease: slots, by rank
        self._waiters: deque[object] = deque()  # leases in arrival order: only the first may take workers
        self._start_lock = threading.Lock()  # one start at a time: connections that arrive are its own
        self._closed = False
        #: processes started since the pool was made (a reused pool does not grow it)
        self.started = 0

    # --- what it holds --------------------------------------------------------------------------

    def workers(self) -> list[PoolWorker]:
        """Every worker, idle or leased, by slot."""
        with self._cond:
            return sorted([*self._idle, *self._busy], key=lambda w: w.slot)

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        """The processes of every worker, idle, leased or still starting, by slot."""
        with self._cond:
            procs = {w.slot: w.proc for w in [*self._idle, *self._busy]}
            procs.update(self._spawned)
        return [procs[slot] for slot in sorted(procs)]

    def counts(self) -> dict[str, int]:
        """``{"idle", "busy", "starting", "capacity"}``."""
        with self._cond:
            return {"idle": len(self._idle), "busy": len(self._busy), "starting": len(self._starting),
                    "capacity": self.capacity}  # fmt: skip

    def ready(self, n: int) -> bool:
        """At least ``n`` workers are alive or starting (nothing to start for a query of ``n`` ranks)."""
        with self._cond:
            alive = sum(1 for w in self._idle if w.alive()) + len(self._busy) + len(self._starting)
            return alive >= min(n, self.capacity)

    # --- lease and release ------------------------------------------------------------------------

    def lease(
        self, n: int, cancelled: Callable[[], bool] = lambda: False, affinity: Hashable | None = None
    ) -> list[PoolWorker]:
        """``n`` idle workers for one query, starting more while the pool is under capacity, else waiting for
        others to be released (first come, first served). QueryCancelled when ``cancelled()`` turns true while
        waiting; WorkerError when a worker cannot start. ``affinity``: what the query's workers keep between
        queries depends on (its files, its W): of the idle workers, those of the last lease with the same
        ``affinity`` come first, in the same order (a worker keeps a DuckDB instance per file set, ~10 ms of CPU
        to make; without this a busy server's queries land on workers that never saw their files)."""
        if not 1 <= n <= self.capacity:
            raise WorkerError(f"a query of {n} workers cannot run on a pool of {self.capacity}")
        ticket = object()
        with self._cond:
            self._waiters.append(ticket)
        try:
            while True:
                taken, to_start = self._take_or_plan(ticket, n, affinity)
                if taken is not None:
                    self._top_up()
                    return taken
                if to_start:
                    self._start_slots(to_start)
                if cancelled():
                    raise QueryCancelled("query cancelled")
        finally:
            with self._cond:
                if ticket in self._waiters:
                    self._waiters.remove(ticket)
                self._cond.notify_all()

    def _take_or_plan(
        self, ticket: object, n: int, affinity: Hashable | None = None
    ) -> tuple[list[PoolWorker] | None, list[int]]:
        """Under the lock: the ``n`` workers when this lease is first and they are idle; else the slots to
        start for it (the first lease only, within capacity); else wait a little and return neither."""
        with self._cond:
            if self._closed:
                raise WorkerError("the worker pool is closed")
            self._reap()
            first = bool(self._waiters) and self._waiters[0] is ticket
            if first and len(self._idle) >= n:
                taken = self._pick(n, affinity)
                self._idle = [w for w in self._idle if w not in taken]
                self._busy.update(taken)
                self._waiters.popleft()
                self._cond.notify_all()
                return taken, []
            if first:
                total = len(self._idle) + len(self._busy) + len(self._starting)
                short = n - len(self._idle) - len(self._starting)
                slots = self._free_slots(min(short, self.capacity - total))
                if slots:
                    self._starting.update(slots)
                    return None, slots
            self._cond.wait(0.1)
            return None, []

    def _pick(self, n: int, affinity: Hashable | None) -> list[PoolWorker]:
        """Under the lock: ``n`` of the idle workers, those of ``affinity``'s last lease first (see :meth:`lease`)."""
        if affinity is None:
            return self._idle[:n]
        idle = {w.slot: w for w in self._idle}
        before = [idle[slot] for slot in self._affinity.get(affinity, ()) if slot in idle][:n]
        taken = before + [w for w in self._idle if w not in before][: n - len(before)]
        self._affinity[affinity] = tuple(w.slot for w in taken)
        self._affinity.move_to_end(affinity)
        while len(self._affinity) > AFFINITIES_KEPT:
            self._affinity.popitem(last=False)
        return taken

    def release(self, workers: Iterable[PoolWorker], broken: Mapping[PoolWorker, bool] | None = None) -> None:
        """Give leased workers back. ``broken`` ones (killed, dead, lost; the value: keep its log, e.g. because
        an error names it) are stopped instead, as are workers found dead."""
        given, broken = list(workers), broken or {}
        with self._cond:
            for worker in given:
                self._busy.discard(worker)
            back = [w for w in given if w not in broken and w.alive() and not self._closed]
            self._idle.extend(back)
            self._cond.notify_all()
        for worker in given:
            if worker not in back:
                keep = broken.get(worker, bool(worker.log and _size(worker.log)))
                worker.stop(keep_log=keep)

    def warm(self, n: int) -> None:
        """Start workers until ``n`` (at most the capacity) are alive or starting; WorkerError when one cannot
        start. Returns once the ones it started have connected."""
        with self._cond:
            self._reap()
            total = len(self._idle) + len(self._busy) + len(self._starting)
            slots = self._free_slots(min(n, self.capacity) - total)
            self._starting.update(slots)
        if slots:
            self._start_slots(slots)

    def _top_up(self) -> None:
        """Start workers in the background until ``spare`` are idle or starting (within capacity)."""
        with self._cond:
            if self._closed or not self.spare:
                return
            total = len(self._idle) + len(self._busy) + len(self._starting)
            slots = self._free_slots(
                min(self.spare - len(self._idle) - len(self._starting), self.capacity - total)
            )
            self._starting.update(slots)
        if slots:

            def start() -> None:
                try:
                    self._start_slots(slots)
                except BaseException:  # a lease that needs them starts its own and says why
                    pass

            threading.Thread(target=start, name="squall-pool-spare", daemon=True).start()

    def _reap(self) -> None:
        """Under the lock: drop idle workers that died (their log is kept: it may say why)."""
        dead = [w for w in self._idle if not w.alive()]
        if dead:
            self._idle = [w for w in self._idle if w not in dead]
            for worker in dead:
                worker.stop(keep_log=bool(worker.log and _size(worker.log)))

    def _free_slots(self, k: int) -> list[int]:
        """Under the lock: the ``k`` lowest slot numbers not in use (a cluster's ranks keep their numbers)."""
        used = {w.slot for w in self._idle} | {w.slot for w in self._busy} | self._starting
        out: list[int] = []
        slot = 0
        while len(out) < k:
            if slot not in used:
                out.append(slot)
            slot += 1
        return out

    # --- starting workers ---------------------------------------------------------------------------

    def _start_slots(self, slots: list[int]) -> None:
        """Start the workers of ``slots`` (reserved in ``_starting``) and add them to the idle ones."""
        started: list[PoolWorker] = []
        try:
            with self._start_lock:
                started = self._start(slots)
        finally:
            with self._cond:
                self._starting.difference_update(slots)
                for slot in slots:
                    self._spawned.pop(slot, None)
                if self._closed:
                    for worker in started:
                        worker.stop(keep_log=False)
                else:
                    self._idle.extend(started)
                    self.started += len(started)
                self._cond.notify_all()

    def _start(self, slots: list[int]) -> list[PoolWorker]:
        """Spawn one process per slot and wait until each has connected back (see :meth:`_accept`)."""
        listener = self.launcher.pool_listener()
        procs: dict[int, tuple[subprocess.Popen[bytes] | None, Path | None, int | None]] = {}
        conns: dict[int, Connection] = {}
        try:
            for slot in slots:
                procs[slot] = _spawner.call(functools.partial(_launch, self.launcher, slot))
                with self._cond:
                    self._spawned[slot] = procs[slot][0]
            self._accept(listener, procs, conns)
        except BaseException as exc:  # Ctrl-C or a failed start: nothing half-started stays behind
            for slot, (proc, log, pidfd) in procs.items():
                conn = conns.get(slot)
                if conn is not None:
                    conn.close()
                _kill(proc, pidfd)
                if log is not None and (isinstance(exc, KeyboardInterrupt) or not _size(log)):
                    log.unlink(missing_ok=True)
            if all(proc is not None for proc, _log, _fd in procs.values()):
                self.launcher.close_pool_listener()  # drops connections still waiting in its backlog
            raise
        return [PoolWorker(slot, proc, conns[slot], log, pidfd) for slot, (proc, log, pidfd) in procs.items()]

    def _accept(
        self,
        listener: Listener,
        procs: dict[int, tuple[subprocess.Popen[bytes] | None, Path | None, int | None]],
        conns: dict[int, Connection],
    ) -> None:
        waiting = set(procs)
        while waiting:
            if not _acceptable(listener, 0.5):
                for slot in waiting:
                    proc, log = procs[slot][0], procs[slot][1]
                    if proc is not None and proc.poll() is not None:
                        raise WorkerError(
                            f"a worker process exited with code {proc.returncode} while starting{log_hint(log)}"
                        )
                if self._closed:
                    raise WorkerError("the worker pool was closed while workers started")
                continue
            conn = listener.accept()
            slot = conn.recv()
            if not isinstance(slot, int) or slot not in waiting:
                conn.close()
                raise WorkerError(f"a worker connected as {slot!r}, expected one of {sorted(waiting)}")
            conns[slot] = conn
            waiting.discard(slot)

    # --- stopping -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Tell every worker to stop, wait for them (then kill), remove their logs (kept when one failed and
        wrote something) and the listener."""
        with self._cond:
            self._closed = True
            workers, self._idle = [*self._idle, *self._busy], []
            self._busy = set()
            self._cond.notify_all()
        for worker in workers:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        for worker in workers:
            code = worker.exit_code()
            worker.stop(keep_log=code not in (0, None) and bool(worker.log and _size(worker.log)))
        self.launcher.close_pool_listener()

    def kill(self) -> None:
        """Kill every worker now (SIGTERM of the driver), remove their logs and the listener."""
        with self._cond:
            self._closed = True
            workers, self._idle = [*self._idle, *self._busy], []
            self._busy = set()
            self._cond.notify_all()
        for worker in workers:
            if worker.proc is not None and worker.proc.poll() is None:
                worker.proc.kill()
        for worker in workers:
            worker.stop(keep_log=False)
        self.launcher.close_pool_listener()


def _launch(launcher: Launcher, slot: int) -> tuple[subprocess.Popen[bytes] | None, Path | None, int | None]:
    """On the spawner thread: start the process of ``slot`` and open its pidfd."""
    proc, log = launcher.launch(slot)
    pidfd = None
    if proc is not None and hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:  # an old kernel: the connection's end still tells
            pidfd = None
    return proc, log, pidfd


def _kill(proc: subprocess.Popen[bytes] | None, pidfd: int | None) -> None:
    if proc is not None:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            pass
    if pidfd is not None:
        os.close(pidfd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_hint(log: Path | None) -> str:
    """`` (its log: PATH)`` when the worker has a log file, else nothing."""
    if log is not None and log.exists():
        return f" (its log: {log}{'' if _size(log) else ', empty'})"
    return ""


def _acceptable(listener: Listener, timeout: float) -> bool:
    """A worker waits to be accepted (True when the listener's socket cannot be polled)."""
    sock = getattr(getattr(listener, "_listener", None), "_socket", None)
    if sock is None:
        return True
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)
