"""The embedded engine never breaks: Ctrl-C, cancel, timeouts, SIGTERM, too many workers, bad worker starts.

Each scenario that involves signals runs in its own subprocess (a real SIGINT/SIGTERM) and checks only the
files and processes of that subprocess, so tests running in parallel do not interfere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.driver.platforms.local.platform import LocalPlatform, max_local_workers
from squall.errors import OptionError, QueryCancelled, QueryTimeout, WorkerError
from squall.operators.duck import Sandbox, interrupted, raise_if_interrupted

#: four stages on 2 workers (hash, hash, gather, result); rank 1 sleeps before stage 3
SLOW = (
    "SELECT r_name, count(*) AS n FROM nation JOIN region ON n_regionkey = r_regionkey GROUP BY 1 ORDER BY 1"
)
#: the delay is far longer than any test's ceiling: a test ends only if the interrupt, timeout or cancel stops
#: the query (the event), never by the delay running out — no duration is asserted
SLOW_FAULT = "delay:rank=1:stage=3:seconds=3600"
#: rank 1 stuck before stage 3, deaf to the abort: only the drain timeout or a second Ctrl-C ends it
STUCK_FAULT = "hang:rank=1:stage=3:seconds=600"
#: SLOW moves both sides by key (4 stages) only with broadcasts off: region and nation are small enough for every
#: rank to read whole, which would leave 2 stages and nothing for the delay to hold up
SHUFFLED = PlannerOptions(broadcast_limit=0.0)
#: two stages (1, 2): never delayed
QUICK = "SELECT count(*) AS n FROM nation"

CHILD = r"""
import json, multiprocessing, os, sys, time
import squall
from squall.driver.options import PlannerOptions
from squall.driver.platforms.local.lifecycle import process_root

data, root, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
SLOW, QUICK = sys.argv[4], sys.argv[5]

def say(**kw):
    print(json.dumps(kw), flush=True)

con = squall.connect(data=data, workers=2, exchange="local", exchange_options={"root": root},
                     planner_options=PlannerOptions(broadcast_limit=0.0))
platform = con.platform
ids, procs = [], []
execute, spawn = platform.execute, platform._spawn

def recording_execute(plan, query_id, progress=None):
    ids.append(query_id)
    return execute(plan, query_id, progress)

def recording_spawn(rank):
    proc = spawn(rank)
    procs.append(proc)
    say(event="spawned", rank=rank)
    return proc

platform.execute, platform._spawn = recording_execute, recording_spawn
told = []

def progress(state):
    if not told and state.done.get(2, 0) == 2:  # both ranks passed stage 2: rank 1 sleeps before stage 3
        told.append(1)
        say(event="running", listener=platform._listener_dir, logs=[str(p) for p in platform._logs],
            pids=[p.pid for p in procs], pymp=multiprocessing.current_process()._config.get("tempdir"),
            results=str(platform._running.result_path))

if scenario == "stuck":  # the drain would wait 10 minutes: only a second Ctrl-C ends the query early
    platform.drain_s = 600.0

if scenario == "sigterm":
    con.sql(SLOW, progress=progress)
    say(event="finished")  # never: SIGTERM comes first
    sys.exit(3)

try:
    con.sql(QUICK if scenario == "startup" else SLOW, progress=progress)
    say(event="finished")
except KeyboardInterrupt:
    say(event="interrupted")
left = sorted(os.listdir(root)) if os.path.isdir(root) else []
results = [str(p) for p in (process_root() / "results").glob(ids[0] + "*")] if ids else []
dead = [p.pid for p in procs if p.poll() is None and p not in platform._procs]
answers = [con.sql(QUICK).to_arrow()["n"][0].as_py() for _ in range(2)]
say(event="after", left=left, results=results, stray_workers=dead, answers=answers, ids=ids)
con.close()
say(event="closed", left=sorted(os.listdir(root)) if os.path.isdir(root) else [])
"""


def _start(
    tmp_path: Path, sf001: Path, scenario: str, fault: str = SLOW_FAULT
) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    root = tmp_path / "xchg"
    env = dict(os.environ, SQUALL_FAULTS=fault, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(sf001), str(root), scenario, SLOW, QUICK],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    return proc, root


def _next_event(proc: subprocess.Popen[str], timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"child ended (code {proc.returncode}) without an event:\n{err}")
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no event from the child")


def _finish(proc: subprocess.Popen[str], ceiling: float = 240) -> list[dict]:
    try:
        out, err = proc.communicate(timeout=ceiling)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(
            f"the child did not end within {ceiling} s (the query was not stopped)"
        ) from None
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, err
    return events


def _ctrl_c(proc: subprocess.Popen[str]) -> None:
    """What a terminal does: SIGINT to the whole foreground process group."""
    os.killpg(proc.pid, signal.SIGINT)


def _check_recovered(events: list[dict], expect_interrupted: bool = True) -> None:
    names = [e["event"] for e in events]
    assert ("interrupted" in names) is expect_interrupted, events
    after = next(e for e in events if e["event"] == "after")
    assert after["left"] == [], "the interrupted query's exchange folder stayed"
    assert after["results"] == [], "the interrupted query's result file stayed"
    assert after["stray_workers"] == [], "a worker of the interrupted query still runs"
    assert after["answers"] == [25, 25]
    assert next(e for e in events if e["event"] == "closed")["left"] == []


@pytest.mark.timeout(600)
def test_ctrl_c_during_a_query_cancels_it_and_the_connection_works(tmp_path, sf001):
    proc, _root = _start(tmp_path, sf001, "query")
    while _next_event(proc)["event"] != "running":
        pass
    time.sleep(0.5)
    _ctrl_c(proc)
    _check_recovered(_finish(proc))  # ends only if the interrupt stopped the query (the delay is an hour)


@pytest.mark.timeout(600)
def test_ctrl_c_twice_kills_the_ranks_at_once(tmp_path, sf001):
    # rank 1 ignores the abort and the drain waits 600 s: the query ends early only if the second Ctrl-C kills
    proc, _root = _start(tmp_path, sf001, "stuck", STUCK_FAULT)
    while _next_event(proc)["event"] != "running":
        pass
    _ctrl_c(proc)
    time.sleep(0.3)
    _ctrl_c(proc)
    _check_recovered(_finish(proc))  # within 240 s, before the 600 s drain: the second Ctrl-C killed the rank


@pytest.mark.timeout(600)
def test_ctrl_c_while_the_pool_starts(tmp_path, sf001):
    proc, _root = _start(tmp_path, sf001, "startup")
    assert _next_event(proc)["event"] == "spawned"
    time.sleep(0.2)
    _ctrl_c(proc)
    _check_recovered(_finish(proc))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in "ZX"


@pytest.mark.timeout(600)
def test_sigterm_removes_workers_listener_exchange_results_and_logs(tmp_path, sf001):
    proc, root = _start(tmp_path, sf001, "sigterm")
    event = _next_event(proc)
    while event["event"] != "running":
        event = _next_event(proc)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM
    owned = [event["listener"], event["results"], *event["logs"]]
    if event["pymp"]:
        owned.append(event["pymp"])
    assert [p for p in owned if os.path.exists(p)] == []
    assert not root.exists() or list(root.iterdir()) == []
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in event["pids"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in event["pids"])


def test_close_removes_the_empty_worker_logs_and_the_listener(sf001):
    con = squall.connect(data=str(sf001), workers=2)
    try:
        assert con.sql(QUICK).num_rows == 1
        logs = list(con.platform._logs)
        listener = con.platform._listener_dir
        assert logs and all(p is not None and p.exists() for p in logs) and os.path.isdir(listener)
    finally:
        con.close()
    assert [p for p in logs if p.exists()] == []
    assert not os.path.exists(listener)


def test_a_worker_that_fails_to_start_keeps_its_log_and_says_where(sf001):
    platform = LocalPlatform(workers=1, worker_env={"SQUALL_WORKER_AUTHKEY": "not-hex"})
    con = squall.Connection(data=str(sf001), platform=platform)
    try:
        with pytest.raises(WorkerError, match=r"exited with code 2 while starting \(its log: ") as info:
            con.sql(QUICK)
        log = Path(str(info.value).split("its log: ", 1)[1].rstrip(")"))
        assert "error: SQUALL_WORKER_AUTHKEY must be hexadecimal" in log.read_text()
        log.unlink()
    finally:
        con.close()


# --- timeout and cancel ---------------------------------------------------------------------------


@pytest.fixture
def slow_connection(sf001, tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_FAULTS", SLOW_FAULT)  # the workers start with it
    root = tmp_path / "xchg"
    con = squall.connect(
        data=str(sf001), workers=2, exchange="local", exchange_options={"root": str(root)},
        planner_options=SHUFFLED,
    )  # fmt: skip
    assert con.sql(QUICK).num_rows == 1  # pool started
    yield con, root
    con.close()


@pytest.mark.timeout(300)
def test_timeout_cancels_the_query_and_the_connection_works(slow_connection):
    con, root = slow_connection
    with pytest.raises(QueryTimeout, match=r"^query timed out after 2 s and was cancelled$"):
        con.sql(SLOW, timeout=2)  # the delay is an hour: ending at all is the event
    assert list(root.iterdir()) == []
    assert con.sql(QUICK).to_arrow()["n"][0].as_py() == 25


@pytest.mark.timeout(300)
def test_connection_default_timeout(sf001, tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_FAULTS", SLOW_FAULT)
    with squall.connect(data=str(sf001), workers=2, timeout=2, planner_options=SHUFFLED) as con:
        with pytest.raises(QueryTimeout):
            con.sql(SLOW)
        assert con.sql(QUICK, timeout=120).to_arrow()["n"][0].as_py() == 25
    with pytest.raises(OptionError, match="timeout must be a number of seconds > 0"):
        squall.connect(data=str(sf001), workers=1, timeout=0)


def test_planner_options_as_a_dict_or_a_clear_error(sf001):
    with squall.connect(data=str(sf001), workers=1, planner_options={"replicated_scan_rows": 10}) as con:
        assert con.planner_options == PlannerOptions(replicated_scan_rows=10)
        assert con.sql(QUICK).to_arrow()["n"][0].as_py() == 25
    with pytest.raises(OptionError, match=r"^planner_options: unknown option\(s\) no_such_option$"):
        squall.connect(data=str(sf001), workers=1, planner_options={"no_such_option": 1})
    with pytest.raises(OptionError, match="planner_options must be a PlannerOptions or a dict, got str"):
        squall.connect(data=str(sf001), workers=1, planner_options="fast")


@pytest.mark.timeout(300)
def test_cancel_from_another_thread(slow_connection):
    con, root = slow_connection
    running = threading.Event()
    threading.Thread(target=lambda: running.wait(120) and con.cancel(), daemon=True).start()
    with pytest.raises(QueryCancelled, match=r"^query cancelled$") as info:
        con.sql(SLOW, progress=lambda state: running.set())
    assert not isinstance(info.value, QueryTimeout)
    assert list(root.iterdir()) == []
    assert con.sql(QUICK).to_arrow()["n"][0].as_py() == 25
    con.cancel()  # nothing runs: no effect on the next query
    assert con.sql(QUICK).to_arrow()["n"][0].as_py() == 25


# --- limits and the worker programs --------------------------------------------------------------


def test_too_many_local_workers_are_refused(sf001, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert max_local_workers() == 16
    with pytest.raises(OptionError, match=r"workers must be at most 16 on this machine, got 1000: .* 2 core"):
        squall.connect(data=str(sf001), workers=1000)
    with pytest.raises(OptionError, match="at most 16"):
        LocalPlatform(workers=17)
    LocalPlatform(workers=16).close()  # the limit itself is fine (nothing starts before a query)
    assert max_local_workers(64) == 256


@pytest.mark.parametrize("program", ["local", "fabric"])
def test_worker_programs_answer_bad_starts_in_one_line(program):
    module = f"squall.driver.platforms.{program}.worker_process"

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k != "SQUALL_WORKER_AUTHKEY"}
        environ.update(env)
        return subprocess.run(
            [sys.executable, "-m", module, *args], capture_output=True, text=True, env=environ
        )

    helped = run("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: ") and not helped.stderr
    good = ["/nonexistent.sock", "0", "1"] if program == "local" else ["--connect", "127.0.0.1:1"]
    for args, env, message in [
        ((), {}, "error: expected"),
        (good, {"SQUALL_WORKER_AUTHKEY": "xyz"}, "error: SQUALL_WORKER_AUTHKEY must be hexadecimal"),
        (good, {}, "error: SQUALL_WORKER_AUTHKEY is not set"),
    ]:
        done = run(*args, **env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(message) and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[1].startswith("usage: ")
    unreachable = run(*good, SQUALL_WORKER_AUTHKEY="00ff", SLURM_PROCID="0", SLURM_NTASKS="1")
    assert unreachable.returncode == 1 and unreachable.stderr.startswith(
        "error: cannot connect to the driver"
    )


def _interrupting_schema() -> object:
    class Interrupting:
        def __arrow_c_schema__(self):
            raise KeyboardInterrupt

        def __arrow_c_stream__(self, requested_schema=None):
            raise KeyboardInterrupt

    return Interrupting()


def _interrupting_rows() -> pa.RecordBatchReader:
    def batches():
        raise KeyboardInterrupt
        yield

    return pa.RecordBatchReader.from_batches(pa.schema([("a", pa.int64())]), batches())


@pytest.mark.parametrize("source", [_interrupting_schema, _interrupting_rows], ids=["schema", "rows"])
def test_ctrl_c_inside_duckdb_stays_an_interrupt(source):
    """Ctrl-C while DuckDB reads a registered Arrow object (the driver binds and type-checks queries over
    registered empty tables) comes back as KeyboardInterrupt, not as a query error (seen in CI: Ctrl-C during
    planning read 'reading the schema of the object registered as 'nation' failed: KeyboardInterrupt')."""
    with Sandbox(threads=1) as db:
        with pytest.raises(duckdb.InvalidInputException) as caught:
            db.con.register("t", source())
            db.query("SELECT * FROM t")
        with pytest.raises(KeyboardInterrupt):
            raise_if_interrupted(caught.value)
        db.register("v", pa.table({"s": ["KeyboardInterrupt"]}))
        with pytest.raises(duckdb.Error) as other:
            db.query("SELECT error(s) FROM v")
    assert "KeyboardInterrupt" in str(other.value)
    raise_if_interrupted(other.value)  # a user's value that merely says it: not an interrupt


_CTRL_C_IN_PLANNING = """
import os, signal, sys, threading
import duckdb
from squall.driver.frontend.boundary import Boundary

con = duckdb.connect()
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    with Boundary("SELECT 1"):
        con.sql("SELECT count(*) FROM range(100000000000) a").fetchall()
except KeyboardInterrupt:
    print("KeyboardInterrupt")
except BaseException as err:
    print(type(err).__name__, err)
"""


def test_ctrl_c_while_the_driver_runs_a_duckdb_query_stays_an_interrupt(tmp_path):
    """Ctrl-C while the driver's own DuckDB runs a query (seen in CI: DuckDB's list of aggregate functions, read
    while planning) is DuckDB's RuntimeError 'Query interrupted': the error boundary gives it back as
    KeyboardInterrupt instead of an internal error."""
    script = tmp_path / "child.py"
    script.write_text(_CTRL_C_IN_PLANNING)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "KeyboardInterrupt", done.stdout + done.stderr


def test_interrupt_forms_of_duckdb():
    assert interrupted(RuntimeError("Query interrupted"))
    assert interrupted(duckdb.InterruptException("INTERRUPT Error: Interrupted!"))
    assert not interrupted(RuntimeError("something else"))
    assert not interrupted(duckdb.BinderException("Query interrupted"))
