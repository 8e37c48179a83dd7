"""The local platform's shared worker pool: queries of any W on the same processes, several queries at once on
one platform, a worker killed with SIGKILL seen at once (the query retried once, then failed with the log
named), workers that die with the driver. Order and events are asserted, never durations: the faults' delays
are far longer than any test's ceiling where the test must end early."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import squall
from squall.driver.platforms.local.platform import LocalPlatform
from squall.errors import QueryCancelled, WorkerError

#: both two stages: with the faults below rank 1 sleeps before stage 2 (a W=1 query has no rank 1: never delayed)
QUERY = "SELECT count(*) AS n FROM lineitem"
NATION = "SELECT count(*) AS n FROM nation"


def _pids(platform: LocalPlatform) -> list[int]:
    return sorted(p.pid for p in platform._procs if p is not None)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in "ZX"


@pytest.fixture
def faults(monkeypatch):
    """Set SQUALL_FAULTS for the workers the test's platform starts."""
    return lambda text: monkeypatch.setenv("SQUALL_FAULTS", text)


def test_queries_of_any_w_reuse_the_same_processes(sf001):
    owner = LocalPlatform(workers=2, pool_size=2)
    one = squall.Connection(str(sf001), platform=owner.sharing(1))
    two = squall.Connection(str(sf001), platform=owner.sharing(2))
    try:
        assert two.sql(QUERY).fetchall() == [(60175,)]
        first = _pids(owner)
        for con in (one, two, one, two):
            assert con.sql(NATION).fetchall() == [(25,)]
            assert _pids(owner) == first
        assert len(first) == 2 and owner.pool.started == 2
        one.close()  # a sharing platform leaves the pool to its owner
        assert two.sql(NATION).fetchall() == [(25,)] and _pids(owner) == first
    finally:
        two.close()
        owner.close()
    assert all(_gone(pid) for pid in first)


def test_two_queries_run_at_once_on_one_platform(sf001, faults):
    faults("delay:rank=1:stage=2:seconds=1")
    platform = LocalPlatform(workers=2, pool_size=4)
    con = squall.Connection(str(sf001), platform=platform)
    events: list[tuple[str, str]] = []
    answers: dict[str, list] = {}

    def run(name: str) -> None:
        events.append(("started", name))
        answers[name] = con.sql(f"SELECT count(*) + {len(name)} AS n FROM lineitem").fetchall()
        events.append(("finished", name))

    try:
        threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "bb")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # both started before either finished: they ran at the same time (one at a time, the first would end
        # before the second started)
        assert [kind for kind, _name in events] == ["started", "started", "finished", "finished"]
        assert answers == {"a": [(60176,)], "bb": [(60177,)]}
        assert len(_pids(platform)) == 4
    finally:
        con.close()


def test_cancel_one_query_of_two(sf001, faults):
    faults("delay:rank=1:stage=2:seconds=3600")  # the W=2 query ends only when cancelled
    owner = LocalPlatform(workers=2, pool_size=3)
    two, one = (
        squall.Connection(str(sf001), platform=owner),
        squall.Connection(str(sf001), platform=owner.sharing(1)),
    )
    running, outcome = threading.Event(), []

    def slow() -> None:
        try:
            two.sql(QUERY, query_id="qslow", progress=lambda state: running.set())
        except QueryCancelled as err:
            outcome.append(str(err))

    thread = threading.Thread(target=slow)
    try:
        thread.start()
        assert running.wait(120)
        assert one.sql(NATION).fetchall() == [(25,)]  # on the third worker, beside the slow one
        two.cancel("qother")  # not running: nothing happens
        assert thread.is_alive()
        two.cancel("qslow")
        thread.join(120)
        assert outcome == ["query cancelled"]
        assert one.sql(NATION).fetchall() == [(25,)]
    finally:
        two.close()
        one.close()
        owner.close()


def _killer(platform: LocalPlatform, query_id: str, attempts: int) -> tuple[object, list[int]]:
    """A progress callback that SIGKILLs rank 1's worker (asleep before stage 2) once per attempt, in the first
    ``attempts`` attempts; and the pids it killed."""
    killed: list[int] = []
    seen: set[str] = set()

    def progress(state) -> None:
        run = platform._runs[query_id]
        if state.done.get(1) == 2 and run.run_id not in seen and len(seen) < attempts:
            seen.add(run.run_id)
            victim = run.workers[1].proc
            killed.append(victim.pid)
            os.kill(victim.pid, signal.SIGKILL)

    return progress, killed


def test_a_killed_worker_is_seen_at_once_and_the_query_runs_again(sf001, faults, tmp_path):
    faults("delay:rank=1:stage=2:seconds=1")
    root = tmp_path / "xchg"
    with squall.connect(str(sf001), workers=2, exchange="local", exchange_options={"root": str(root)}) as con:
        progress, killed = _killer(con.platform, "qkill", attempts=1)
        result = con.sql(QUERY, query_id="qkill", progress=progress)
        assert result.fetchall() == [(60175,)]
        assert len(killed) == 1 and _gone(killed[0]) and killed[0] not in _pids(con.platform)
        assert result.stats["retried"].startswith(
            "the first attempt failed (rank 1 failed: worker process was killed by signal 9 (SIGKILL) (its log: "
        )
        assert list(root.iterdir()) == []


def test_a_worker_killed_twice_fails_the_query_with_its_log_named(sf001, faults, tmp_path):
    # rank 1 sleeps an hour: the query ends only because the deaths are seen (no timeout would)
    faults("delay:rank=1:stage=2:seconds=3600")
    root = tmp_path / "xchg"
    with squall.connect(str(sf001), workers=2, exchange="local", exchange_options={"root": str(root)}) as con:
        progress, killed = _killer(con.platform, "qkill2", attempts=2)
        with pytest.raises(WorkerError) as err:
            con.sql(QUERY, query_id="qkill2", progress=progress)
        message = str(err.value)
        assert message.startswith("rank 1 failed: worker process was killed by signal 9 (SIGKILL) (its log: ")
        assert "; it was the second attempt: the first attempt failed" in message and "\n" not in message
        logs = [Path(p) for p in re.findall(r"its log: ([^,)]+)", message)]
        assert len(logs) == 2 and all(log.exists() and log.name.startswith("worker-") for log in logs)
        for log in logs:
            log.unlink()
        assert len(killed) == 2 and list(root.iterdir()) == []
        with squall.Connection(
            str(sf001), platform=con.platform.sharing(1)
        ) as one:  # W=1: no rank 1 to delay
            assert one.sql(NATION).fetchall() == [(25,)]  # a new worker replaces the dead ones


CHILD = r"""
import os, sys, time, squall
con = squall.connect(data=sys.argv[1], workers=2)
con.sql("SELECT count(*) FROM nation")
print(" ".join(str(p.pid) for p in con.platform._procs), flush=True)
time.sleep(600)
"""


def test_workers_die_with_a_killed_driver(sf001, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(sf001)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
    finally:
        proc.kill()  # SIGKILL: no handler, no atexit runs
        proc.wait()
    deadline = time.monotonic() + 60  # a ceiling, not a measure: PR_SET_PDEATHSIG kills them at once
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids), json.dumps(pids)


def test_what_a_killed_driver_left_is_swept(tmp_path, monkeypatch):
    import tempfile

    from squall.driver.platforms.local.lifecycle import process_root, sweep_orphans
    from squall.exchange.local import default_root

    dead = subprocess.Popen(["true"])  # a pid that no longer runs
    dead.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # listener folders: in the test's own tmp
    left = process_root(dead.pid)
    (left / "results").mkdir(parents=True)
    (left / "q1").mkdir()
    (left / "q1" / "s1-r0.arrow").write_bytes(b"x")
    listener = tmp_path / f"squall-{dead.pid}-abc_12"
    listener.mkdir()
    (listener / "workers.sock").touch()
    mine = tmp_path / f"squall-{os.getpid()}-xyz"
    mine.mkdir()
    spill, exchanged = tmp_path / f"squall-{dead.pid}-spillq1w2e3", tmp_path / f"squall-{dead.pid}-exchange"
    (spill / "w123").mkdir(parents=True)
    (spill / "w123" / "duckdb_temp_storage-0.tmp").write_bytes(b"x")
    (exchanged / "q1").mkdir(parents=True)
    (exchanged / "q1" / "x1-s0-r1.arrow").write_bytes(b"x")
    logs = default_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    empty, told = logs / f"worker-{dead.pid}-0-aaaaaa.log", logs / f"worker-{dead.pid}-1-bbbbbb.log"
    empty.touch()
    told.write_text("Traceback: what the crash said\n")
    try:
        removed = sweep_orphans(once=False)
        assert {str(left), str(listener), str(empty), str(spill), str(exchanged)} <= set(removed)
        assert not left.exists() and not listener.exists() and not empty.exists()
        assert not spill.exists() and not exchanged.exists()  # what its workers spilled, its exchange on disk
        assert mine.exists() and told.exists()  # a live driver's folder, a log that says something
    finally:
        told.unlink(missing_ok=True)


def test_a_lease_prefers_the_workers_of_the_last_query_of_the_same_shape():
    """Workers keep a DuckDB instance per file set: a query gets the idle workers that last ran its shape (in
    the same rank order), not merely the first idle ones; other shapes take the rest."""
    platform = LocalPlatform(workers=2, pool_size=4)
    try:
        pool = platform.pool
        pool.warm(4)
        first = pool.lease(2, affinity="lineitem")
        pool.release(first)
        other = pool.lease(2, affinity="nation")
        assert {w.slot for w in other}.isdisjoint(w.slot for w in first)  # released workers went to the back
        pool.release(other)
        pool.release(pool.lease(1, affinity="region"))  # first of the queue now: a worker of "lineitem"
        again = pool.lease(2, affinity="lineitem")
        assert [w.slot for w in again] == [w.slot for w in first]
        pool.release(again)
        plain = pool.lease(2)
        assert [w.slot for w in plain] != [w.slot for w in first]  # without affinity: the front of the queue
        pool.release(plain)
    finally:
        platform.close()
