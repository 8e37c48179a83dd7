"""``squall serve`` runs queries concurrently (a real server on loopback, real worker processes).

The server runs W=2 queries slowly — rank 1 sleeps before stage 2 (``SQUALL_FAULTS``) — and W=1 queries at
full speed (they have no rank 1); its fast lane takes queries that read at most 1000 bytes (``nation``), the
others (``lineitem``) are long. Asserted: order of completion and the queries' own started/finished times,
worker pids, statuses and errors — never durations.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import POWERTOOLS_ENV, TOKEN

requests = pytest.importorskip("requests")
AUTH = {"Authorization": f"Bearer {TOKEN}"}

LONG = "SELECT count(*) AS n FROM lineitem"  # W=2: rank 1 sleeps before stage 2
SHORT = "SELECT n_name FROM nation WHERE n_nationkey = 7"  # W=1: never delayed
SERVICE_TOML = "[service]\nlong_running = 2\nmax_running = 4\n"


class Serve:
    """``squall serve`` in a folder of its own (its squall.toml); ``stop()`` sends SIGTERM, ``kill()`` SIGKILL."""

    def __init__(self, folder: Path, args: list[str], faults: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "squall.toml").write_text(SERVICE_TOML)
        self.log = folder / "server.log"
        env = {**{k: v for k, v in os.environ.items() if k != "SQUALL_FAULTS"}, **POWERTOOLS_ENV,
               "SQUALL_FAULTS": faults}  # fmt: skip
        self._fh = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", "serve", "--port", "0", "--token", TOKEN, *args],
            cwd=folder, stdin=subprocess.DEVNULL, stdout=self._fh, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (match := re.search(r"serving on (http://[0-9.]+:\d+)", self.log.read_text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"squall serve did not start:\n{self.log.read_text()}")
            time.sleep(0.05)
        self.url = match.group(1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()
        return self.proc.returncode

    def workers(self) -> set[int]:
        """The pids of the server's worker processes (its children)."""
        return set(_children(self.proc.pid))

    def submit(self, sql: str, expect: int = 202, **fields: object) -> dict:
        response = requests.post(
            f"{self.url}/v1/queries", json={"sql": sql, **fields}, headers=AUTH, timeout=60
        )
        assert response.status_code == expect, response.text
        return response.json()

    def status(self, query_id: str) -> dict:
        response = requests.get(f"{self.url}/v1/queries/{query_id}", headers=AUTH, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    def finish_order(self, ids: list[str], ceiling: float = 120) -> list[str]:
        """Poll until every query ended; returns the ids in the order they finished (by their finished_at)."""
        deadline = time.monotonic() + ceiling
        done: dict[str, dict] = {}
        while len(done) < len(ids) and time.monotonic() < deadline:
            for query_id in ids:
                if query_id not in done and (doc := self.status(query_id))["status"] not in (
                    "queued",
                    "running",
                ):
                    done[query_id] = doc
            time.sleep(0.05)
        assert len(done) == len(ids), f"not finished: {set(ids) - set(done)}"
        assert all(d["status"] == "succeeded" for d in done.values()), done
        return sorted(ids, key=lambda q: done[q]["finished_at"])


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] not in "ZX":
                out.append(int(entry.name))
    return out


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.fixture(scope="module")
def serve(sf001, tmp_path_factory) -> Iterator[Serve]:
    srv = Serve(tmp_path_factory.mktemp("sched"),
                ["--data", str(sf001), "--workers", "2", "--fast-lane-bytes", "1000", "--max-scan-bytes", "1000000",
                 "--max-result-rows", "1000"],
                "delay:rank=1:stage=2:seconds=2")  # fmt: skip
    yield srv
    code = srv.stop()
    assert "Traceback" not in srv.log.read_text(), srv.log.read_text()
    assert code == 0, srv.log.read_text()


def test_a_short_query_behind_two_long_ones_finishes_first_and_the_long_ones_overlap(serve):
    long1 = serve.submit(LONG, workers=2)["query_id"]
    long2 = serve.submit(LONG, workers=2)["query_id"]
    short = serve.submit(SHORT, workers=1)["query_id"]
    assert serve.finish_order([long1, long2, short])[0] == short
    one, two = serve.status(long1), serve.status(long2)
    assert (
        one["started_at"] < two["finished_at"] and two["started_at"] < one["finished_at"]
    )  # at the same time
    assert serve.status(short)["stats"]["rows"] == 1


def test_a_queued_query_says_where_it_stands(serve):
    running = [serve.submit(LONG, workers=2)["query_id"] for _ in range(2)]
    queued = serve.submit(LONG, workers=2)["query_id"]  # long_running = 2: it waits
    doc = serve.status(queued)
    if doc["status"] == "queued":  # (unless the first two ended already on a very fast machine)
        queue = doc["queue"]
        assert queue["group"] == "default" and queue["position"] >= 1 and queue["ahead"] == 0
        assert queue["estimated_wait_s"] >= 0
    serve.finish_order([*running, queued])
    assert serve.status(queued).get("queue") is None


def test_alternating_workers_reuse_the_pool(serve):
    serve.finish_order([serve.submit(SHORT, workers=1)["query_id"]])
    before = serve.workers()
    for workers in (2, 1, 2):
        serve.finish_order([serve.submit(SHORT, workers=workers)["query_id"]])
    assert serve.workers() == before and len(before) >= 2


def test_limits_are_refused_before_running_or_in_one_line(serve):
    response = requests.post(f"{serve.url}/v1/queries", json={"sql": "SELECT * FROM lineitem"}, headers=AUTH,
                             timeout=60)  # fmt: skip
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "LimitExceeded"
    assert (
        body["detail"].startswith("the query would read 1.")
        and "more than this server lets one query read" in body["detail"]
    )
    big = serve.submit("SELECT o_orderkey FROM orders", workers=1)["query_id"]
    while (doc := serve.status(big))["status"] in ("queued", "running"):
        time.sleep(0.05)
    assert doc["status"] == "failed" and doc["error"]["error"] == "LimitExceeded"
    assert doc["error"]["detail"].startswith("the result has 15,000 rows, more than this server returns (1,000): "
                                             "write it with COPY")  # fmt: skip


def test_timeout_counts_from_submission(serve):
    running = [serve.submit(LONG, workers=2)["query_id"] for _ in range(2)]
    late = serve.submit(LONG, workers=2, timeout_s=0.5)["query_id"]  # waits behind them, longer than 0.5 s
    while (doc := serve.status(late))["status"] in ("queued", "running"):
        time.sleep(0.05)
    assert doc["status"] == "failed" and doc["error"]["error"] == "QueryCancelled"
    assert re.fullmatch(r"query timed out after 0.5 s \(counted from submission: it waited [0-9.]+ s in the queue\)",
                        doc["error"]["detail"]), doc  # fmt: skip
    assert doc.get("started_at") is None  # it never ran
    serve.finish_order(running)


def test_a_sigkilled_worker_fails_its_query_with_the_log_named_and_the_next_query_works(serve):
    query_id = serve.submit(LONG, workers=2)["query_id"]
    while serve.status(query_id)["status"] != "running":
        time.sleep(0.02)
    killed: set[int] = set()
    while (doc := serve.status(query_id))["status"] == "running":  # kill every worker, the retry's too
        for pid in serve.workers() - killed:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)
    assert doc["status"] == "failed" and doc["error"]["error"] == "WorkerError", doc
    detail = doc["error"]["detail"]
    assert "\n" not in detail and re.search(r"killed by signal 9 \(SIGKILL\)|exited with code -9", detail), (
        detail
    )
    logs = re.findall(r"its log: ([^,)]+)", detail)
    assert logs and all(Path(log).name.startswith("worker-") for log in logs)
    assert serve.finish_order([serve.submit(SHORT, workers=1)["query_id"]])  # new workers, the query works
    assert serve.finish_order([serve.submit(LONG, workers=2)["query_id"]])
    for log in logs:
        Path(log).unlink(missing_ok=True)


def test_workers_die_with_a_sigkilled_server(sf001, tmp_path):
    srv = Serve(tmp_path / "doomed", ["--data", str(sf001), "--workers", "2"], "")
    try:
        query_id = srv.submit(SHORT, workers=2)["query_id"]
        srv.finish_order([query_id])
        workers = srv.workers()
        assert len(workers) >= 2
    finally:
        srv.proc.kill()
        srv.stop()
    deadline = time.monotonic() + 60  # a ceiling, not a measure: PR_SET_PDEATHSIG kills them with the server
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in workers)


def test_closing_the_backend_stops_running_queries_and_fails_queued_ones(sf001, tmp_path, monkeypatch):
    from squall.service.backend import LocalBackend
    from squall.service.service import Service
    from squall.service.settings import ServiceSettings
    from squall.service.state import state_store

    monkeypatch.setenv("SQUALL_FAULTS", "delay:rank=1:stage=2:seconds=3600")  # W=2 queries run until stopped
    settings = ServiceSettings(max_running=1, long_running=1, fast_lane_bytes=0, warm_workers=0)
    backend = LocalBackend(str(sf001), workers=2, settings=settings)
    service = Service(state_store(str(tmp_path / "state")), backend)
    try:
        running = service.submit(LONG)[0]["query_id"]
        queued = service.submit(LONG)[0]["query_id"]
        assert service.status(queued)["queue"]["ahead"] == 0
        while service.status(running)["status"] != "running":
            time.sleep(0.02)
    finally:
        service.close()
    assert service.status(running)["status"] == "cancelled"
    stopped = service.status(queued)
    assert stopped["status"] == "failed" and stopped["error"] == {
        "error": "ServerStopped",
        "detail": "the server stopped before the query started",
    }


def test_busy_server_runs_queries_that_name_no_workers_on_fewer(sf001, tmp_path, monkeypatch):
    from squall.service.backend import LocalBackend
    from squall.service.service import Service
    from squall.service.settings import ServiceSettings
    from squall.service.state import state_store

    monkeypatch.setenv("SQUALL_FAULTS", "delay:rank=1:stage=2:seconds=3600")  # W=2 queries run until stopped
    settings = ServiceSettings(max_running=3, long_running=3, fast_lane_bytes=0, warm_workers=0)
    backend = LocalBackend(str(sf001), workers=2, settings=settings, cores=2)
    service = Service(state_store(str(tmp_path / "state")), backend)
    try:
        alone = service.submit(LONG)[0]["query_id"]  # alone on the server: the default W=2
        while service.status(alone)["status"] != "running":
            time.sleep(0.02)
        named = service.submit(LONG, workers=2)[0]["query_id"]  # names its W: gets it however busy
        busy = service.submit(LONG)[0]["query_id"]  # 3 at hand on 2 cores: W=1 (no rank 1: not delayed)
        deadline = time.monotonic() + 120
        while service.status(busy)["status"] in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.05)
        done = service.status(busy)
        assert done["status"] == "succeeded", done
        assert done["scheduling"]["workers"] == 1 and done["scheduling"]["load"] == 3
        assert done["scheduling"]["workers_lowered"] == (
            "3 queries were running or waiting on 2 cores: 1 worker instead of 2"
        )
        assert done["stats"]["scheduling"] == done["scheduling"] and done["stats"]["workers"] == 1
        assert service.status(alone)["scheduling"] == {"group": "default", "workers": 2, "load": 1}
        assert service.status(named)["scheduling"]["workers"] == 2
        assert "workers_lowered" not in service.status(named)["scheduling"]
    finally:
        service.close()


def test_the_pool_workers_keep_the_servers_worker_memory(sf001):
    """``squall serve --worker-memory`` (``worker_memory`` in ``[service]``): every pool worker's budget, whatever
    the query; a budget too small for a worker is refused at start in one line."""
    from squall.errors import OptionError
    from squall.service.backend import LocalBackend
    from squall.service.settings import ServiceSettings

    settings = ServiceSettings.load({"worker_memory": "300MB"}, {"warm_workers": 0})
    backend = LocalBackend(str(sf001), workers=2, settings=settings)
    try:
        assert backend.pool_platform is not None and backend.pool_platform.memory_budget == 300_000_000
        result = backend.connection_for(1).sql("SELECT count(*) AS n FROM nation")
        assert result.fetchall() == [(25,)]
        assert result.stats["memory"]["budget_per_worker_bytes"] == 300_000_000
    finally:
        backend.close()
    assert ServiceSettings.load({}, {"worker_memory": "off"}).worker_memory is None
    with pytest.raises(OptionError, match="worker_memory must be at least 192 MiB") as err:
        LocalBackend(str(sf001), workers=2, settings=ServiceSettings.load({}, {"worker_memory": "64MB"}))
    assert "\n" not in str(err.value)
