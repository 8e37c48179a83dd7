"""A ``squall serve`` killed with SIGKILL, then started again on the same ``--state``: real processes on loopback.

The second server marks the queries the first left running or queued as failed (``ServerStopped``), answers a
DELETE of one with a 409 that says why, removes the first server's worker folder (``$TMPDIR/squall-<pid>-*``) and
its exchange folders (``.owner`` = its pid) — and leaves alone what belongs to a live process — then runs queries.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from squall.exchange.local import OWNER_FILE, default_root
from squall.service import records

from .conftest import TOKEN, Server
from .test_http_api import call, submit, wait

requests = pytest.importorskip("requests")


def _owned_by(pid: int) -> list[Path]:
    """Exchange folders whose owner is ``pid`` (at the exchange root, or in a driver's ``proc-<pid>`` folder)."""
    found = []
    root = default_root()
    folders = [*root.iterdir(), *root.glob("proc-*/*")] if root.is_dir() else []
    for folder in folders:
        try:
            if (folder / OWNER_FILE).read_text().split()[0] == str(pid):
                found.append(folder)
        except (OSError, IndexError):
            continue
    return found


def _children_of_listener(pid: int) -> list[int]:
    """Worker processes started by server ``pid`` (their command line names its listener folder)."""
    mark = f"/squall-{pid}-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _start(tmp_path: Path, name: str, state: Path, sf001, env: dict[str, str] | None = None) -> Server:
    args = ["--data", str(sf001), "--workers", "2", "--token", TOKEN, "--state", str(state)]
    return Server(args, tmp_path / f"{name}.log", env)


def test_a_restarted_server_fails_what_the_killed_one_left_and_removes_its_folders(sf001, tmp_path):
    state = tmp_path / "state"
    first = _start(tmp_path, "first", state, sf001, env={"SQUALL_FAULTS": "delay:rank=0:seconds=60:stage=1"})
    workers: list[int] = []
    try:
        running = submit(first, "SELECT o_orderstatus, count(*) FROM orders GROUP BY 1")["query_id"]
        queued = submit(first, "SELECT count(*) FROM lineitem")["query_id"]
        wait(first, running, until=("running",))
        deadline = time.monotonic() + 30
        while not _owned_by(first.proc.pid) and time.monotonic() < deadline:  # the query's exchange folder
            time.sleep(0.05)
        assert _owned_by(first.proc.pid)
        listener = list(Path(tempfile.gettempdir()).glob(f"squall-{first.proc.pid}-*"))
        assert listener
        workers = _children_of_listener(first.proc.pid)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    finally:
        first.stop()
        for pid in workers:  # orphans of the killed server (a platform with PR_SET_PDEATHSIG has none)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # what a live process owns stays; what a dead one left goes
    live = Path(tempfile.gettempdir()) / f"squall-{os.getpid()}-testlive"
    live.mkdir(exist_ok=True)
    dead = Path(tempfile.gettempdir()) / f"squall-{_dead_pid()}-testdead"
    dead.mkdir(exist_ok=True)
    mine = default_root() / f"q{os.getpid():016x}"[:17]
    mine.mkdir(parents=True, exist_ok=True)
    (mine / OWNER_FILE).write_text(f"{os.getpid()}\n")
    # a query a server of an older version left queued, without an owner
    unowned = records.new_query_id()
    (state / unowned).mkdir()
    (state / unowned / "request.json").write_text(json.dumps({"sql": "SELECT 1", "workers": None}))
    (state / unowned / "status.json").write_text(json.dumps({"query_id": unowned, "status": "queued"}))

    second = _start(tmp_path, "second", state, sf001)
    try:
        assert "marked 3 queries of a stopped server as failed" in second.output()
        for query_id in (running, queued, unowned):
            doc = call(second, "GET", f"/v1/queries/{query_id}").json()
            assert doc["status"] == "failed" and doc["error"]["error"] == "ServerStopped", doc
            assert "server" not in doc
        response = call(second, "DELETE", f"/v1/queries/{running}")
        assert response.status_code == 409 and "server stopped" in response.json()["detail"], response.text
        assert not any(p.exists() for p in listener) and not dead.exists()
        assert not _owned_by(first.proc.pid)
        assert live.exists() and mine.exists()
        query_id = submit(second, "SELECT count(*) AS n FROM nation")["query_id"]
        assert wait(second, query_id)[-1]["status"] == "succeeded"
    finally:
        assert second.stop() == 0, second.output()
        live.rmdir()
        (mine / OWNER_FILE).unlink()
        mine.rmdir()
