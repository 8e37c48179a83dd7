"""Fixtures for the REST service tests: real ``squall serve`` subprocesses on loopback.

- ``server``: TPC-H SF0.01, 2 workers, bearer token, local-folder state, small inline limit (4 KiB) so
  larger results are streamed from their file;
- ``slow_server``: the same with ``SQUALL_FAULTS=delay:rank=0:seconds=5:stage=1`` (rank 0 sleeps 5 s before
  stage 1),
  for cancellation, timeouts and progress;
- ``write_server``: TPC-H SF0.01 in 3 files a table, 2 workers, bearer token, ``--writable`` a temporary
  folder (``write_server.out``): write statements run;
- ``s3_server``: state in moto's S3 server (``--state s3://…``), inline limit 1 KiB: large results are 303
  redirects to presigned URLs.
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

TOKEN = "test-token-123"
POWERTOOLS_ENV = {"POWERTOOLS_TRACE_DISABLED": "1", "POWERTOOLS_DEV": "0"}

pytest.importorskip("aws_lambda_powertools", reason="the service needs the aws extra")


class Server:
    """One ``squall serve`` process; ``url`` once it listens. ``stop()`` sends SIGTERM and waits."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        full_env = {k: v for k, v in os.environ.items() if k != "SQUALL_FAULTS"}
        full_env.update(POWERTOOLS_ENV)
        full_env.update(env or {})
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", "serve", "--port", "0", *args],
            stdin=subprocess.DEVNULL, stdout=self._fh, stderr=subprocess.STDOUT, env=full_env,
        )  # fmt: skip
        self.url = self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(r"serving on (http://[0-9.]+:\d+)", self.log.read_text(errors="replace"))
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"squall serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"squall serve did not start:\n{self.log.read_text()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()
        return self.proc.returncode


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, args: list[str], env=None) -> Server:
    folder = tmp_path_factory.mktemp(name)
    return Server(args, folder / "server.log", env)


@pytest.fixture(scope="session")
def server(sf001, tmp_path_factory) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("state")
    srv = _start(tmp_path_factory, "serve", ["--data", str(sf001), "--workers", "2", "--token", TOKEN,
                                             "--state", str(state), "--inline-limit", "4096"])  # fmt: skip
    srv.state = state  # type: ignore[attr-defined]
    yield srv
    code = srv.stop()
    assert "Traceback" not in srv.output(), srv.output()
    assert code == 0, srv.output()


@pytest.fixture(scope="session")
def write_server(sf001_parts, tmp_path_factory) -> Iterator[Server]:
    out = tmp_path_factory.mktemp("writable")
    srv = _start(tmp_path_factory, "serve-writes",
                 ["--data", str(sf001_parts), "--workers", "2", "--token", TOKEN, "--writable", f"{out}/"])  # fmt: skip
    srv.out = out  # type: ignore[attr-defined]
    yield srv
    code = srv.stop()
    assert "Traceback" not in srv.output(), srv.output()
    assert code == 0, srv.output()


@pytest.fixture(scope="session")
def slow_server(sf001, tmp_path_factory) -> Iterator[Server]:
    srv = _start(tmp_path_factory, "serve-slow", ["--data", str(sf001), "--workers", "2", "--token", TOKEN],
                 env={"SQUALL_FAULTS": "delay:rank=0:seconds=5:stage=1"})  # fmt: skip
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def s3_server(sf001, tmp_path_factory) -> Iterator[Server]:
    from ..s3server import moto_available, moto_s3

    if moto_available() is not None:
        pytest.skip(str(moto_available()))
    with moto_s3("squall-api-state") as s3:
        srv = _start(tmp_path_factory, "serve-s3",
                     ["--data", str(sf001), "--workers", "1", "--state", "s3://squall-api-state/queries",
                      "--inline-limit", "1024"], env=s3.env)  # fmt: skip
        srv.s3 = s3  # type: ignore[attr-defined]
        yield srv
        srv.stop()
