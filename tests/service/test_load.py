"""A bounded load test of ``squall serve`` as a team uses it (issue 34): one real server on loopback (TPC-H
SF0.1, ``--workers 2``), 16 clients at once, each sending 10 queries one after another — TPC-H queries
(validation parameters, all 22 among the clients) and small lookups, mixed in an order of its own.

The clients are ``benchmarks/service.py``'s: plain HTTP (http.client), a new connection per request as the
SDK's urllib does, so a reset is seen and counted, not hidden by a retry (the request is then sent again, the
submit with the same ``Idempotency-Key``). Every answer is checked against DuckDB on the same files
(``squall.testing``'s comparator); no 5xx; no connection reset, refused or dropped by a full listen queue;
the server logs no traceback and stops cleanly. Nothing here is timed: the run is a few tens of seconds even with a server that runs one query at
a time.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

from ..tpch_data import tpch_dataset
from .conftest import TOKEN, _start

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "service.py"
CLIENTS = 16
PER_CLIENT = 10  # half TPC-H, half lookups
SF = 0.1


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("squall_bench_service", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _bench()


def lookups(rng: random.Random) -> list[str]:
    """Small queries a user expects back at once: point lookups and tiny aggregates."""
    return [
        f"SELECT n_name, n_regionkey FROM nation WHERE n_nationkey = {rng.randrange(25)}",
        f"SELECT c_name, c_acctbal FROM customer WHERE c_custkey = {rng.randrange(1, 15_001)}",
        f"SELECT o_orderstatus, o_totalprice, o_orderdate FROM orders WHERE o_orderkey = {rng.randrange(1, 600_001)}",
        f"SELECT s_name, s_acctbal FROM supplier WHERE s_suppkey = {rng.randrange(1, 1_001)}",
        "SELECT r_name, count(*) AS n FROM region JOIN nation ON n_regionkey = r_regionkey GROUP BY 1 ORDER BY 1",
    ]


def mixed_jobs() -> list[list[tuple[str, str]]]:
    """Client i: 5 TPC-H queries (i*5 % 22 + 1 onwards) and the 5 lookups, shuffled by its own seed."""
    tpch = bench.tpch_jobs(CLIENTS, PER_CLIENT // 2, SF)
    jobs = []
    for i in range(CLIENTS):
        rng = random.Random(i)
        job = [("tpch", sql) for sql in tpch[i]] + [("lookup", sql) for sql in lookups(rng)]
        rng.shuffle(job)
        jobs.append(job)
    return jobs


@dataclass
class LoadRun:
    data: Path
    answers: list[Any]
    counts: dict[str, int]
    exit_code: int
    log: str


@pytest.fixture(scope="module")
def sf01(tmp_path_factory) -> Path:
    return tpch_dataset(SF, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def load_run(sf01, tmp_path_factory) -> LoadRun:
    """The whole load, run once for the module's tests; the server stopped after it."""
    data = sf01
    srv = _start(tmp_path_factory, "serve-load", ["--data", str(data), "--workers", "2", "--token", TOKEN])
    try:
        tally = bench.Tally()
        clients = [bench.Client(srv.url, TOKEN, tally, timeout_s=120) for _ in range(CLIENTS)]
        _wall, answers = bench.run_clients(clients, mixed_jobs())
    finally:
        code = srv.stop()
    counts = tally.since(Counter())
    print(f"load: {len(answers)} queries in {_wall:.1f} s; {counts}")
    return LoadRun(data, answers, counts, code, srv.output())


def test_every_answer_matches_duckdb(load_run):
    assert len(load_run.answers) == CLIENTS * PER_CLIENT
    assert {a.kind for a in load_run.answers} == {"tpch", "lookup"}
    assert bench.Reference(load_run.data).problems(load_run.answers) == []


def test_the_check_catches_a_wrong_or_failed_answer(sf01):
    sql = "SELECT count(*) AS n FROM nation"
    wrong = bench.Answer(sql, "lookup", query_id="q1", table=pa.table({"n": pa.array([24], pa.int64())}))
    failed = bench.Answer(sql, "lookup", query_id="q2", error="failed: {'error': 'Busy'}")
    problems = bench.Reference(sf01).problems([wrong, failed])
    assert len(problems) == 2 and "q1" in problems[0] and "Busy" in problems[1], problems


def test_no_5xx_and_a_clean_server(load_run):
    assert load_run.counts["5xx"] == 0, load_run.counts
    assert load_run.counts["timeouts"] == 0, load_run.counts
    assert "Traceback" not in load_run.log, load_run.log
    assert load_run.exit_code == 0, load_run.log


def test_no_connection_turned_away(load_run):
    """No reset, no refusal, no handshake the server's kernel dropped (a SYN or ACK sent again on loopback,
    counted from the client socket's ``tcpi_total_retrans``): every symptom of a full listen queue. Resets
    come in some runs only; dropped handshakes (tens per run) in every one."""
    counts = load_run.counts
    assert counts["resets"] == counts["refused"] == counts["dropped_handshakes"] == 0, counts
