"""The shared service as a team uses it: ``squall serve`` under many clients at once, in one run.

    make bench-service                                   # TPC-H SF1 (make data), squall serve --workers 2
    python benchmarks/service.py --data data/sf1 --workers 2 --clients 8,16 --repeat 3

Starts ``squall serve --data DATA --workers W`` (a bearer token, a temporary state folder) — or uses
``--endpoint URL --token T``, a server already running on the same data — and measures, in this order:

- **short alone**: :data:`SHORT` (``count(*)`` of ``nation``) sent ``5 x --repeat`` times, one after another:
  the median seconds from the submit to the whole result in hand;
- **short behind two long**: two clients submit a long query each (:data:`LONG`, self-joins of ``lineitem``
  on ``l_partkey``, ≈4 s each alone at SF1 W=2), then a third the short one; the short one's seconds, median
  of ``--repeat`` rounds (goal ≤ 0.5 s); each round waits for its long queries before the next;
- **throughput** of N clients (``--clients``): each sends ``--per-client`` TPC-H queries (validation
  parameters; client i starts at query ``i*per_client % 22 + 1`` and goes on in order) one after another;
  queries per second from the start to the last result in hand, against DuckDB answering the same queries
  alone in this process (one cursor — a connection to the same database — per client thread); ratio
  Squall/DuckDB (goal ≥ 0.8);
- **/healthz during a 100,000-element IN list**: a client sends ``GET /healthz`` back to back (a new
  connection each) from before the ``POST`` of :func:`in_list_sql` until that query has finished; the
  worst latency (goal ≤ 0.1 s);
- **cancel**: :data:`CANCEL` (≈30 s alone at SF1 W=2) is sent a ``DELETE`` 1 s after its status reads
  ``running``; seconds from the ``DELETE`` to a status ``cancelled`` (goal ≤ 1 s; a query that finishes
  anyway counts as never cancelled), median and worst of ``--repeat``.

Before the measures every TPC-H query runs once on both engines (warm file cache, warm workers), and once more
on Squall at W=1, the W a busy server gives queries that name none (``adaptive_workers``): the measures see a
server that has run these queries before, its plans cached at both W (``--cold-plans`` leaves that out: the
first throughput measure then also plans each query at W=1, ≈0.1 below the warm ratio at 8 clients).

**Clients** (:class:`Client`) speak plain HTTP with :mod:`http.client` — a new connection per request, as
the SDK's urllib does — and count what a team would feel (:class:`Tally`): connection resets (``ECONNRESET``,
``EPIPE``, a server that closed without answering), refused connections, dropped handshakes (a SYN or ACK the
client's kernel sent again — on loopback only a full listen queue drops them; read from the socket's
``tcpi_total_retrans``; each costs the client a second or more), timeouts, 429s, 5xx. A request that got no answer is sent again (the
submit with the same ``Idempotency-Key``, so the query runs once); a 429 is retried after its
``Retry-After`` (else 0.5 s) with a new key. They wait for a query's end as the SDK does, with a long poll
(``GET /v1/queries/{id}?wait_s=5``: answered when it ends); for other states (``running``) they poll every
10 ms, growing by half up to ``--poll-max`` (0.1 s).

**Checked**: every answer Squall gives is compared with DuckDB's on the same files
(:func:`squall.testing.compare_results`); a differing or failed query prints ``DIFFERS`` and the exit status
is 1. Prints one table: goal, measured, ratio (measured/goal for the latency goals, Squall/DuckDB for
throughput), then the counts of resets, 429s and 5xx per measure. ``tests/service/test_load.py`` drives the
same clients in ``make test`` (SF0.1).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

#: seconds a client's status request may wait for the query to end (the SDK's long poll)
LONG_POLL_S = 5.0
#: the short query: a lookup a user expects back at once
SHORT = "SELECT count(*) AS n FROM nation"
#: two users' long queries (≈4 s each alone at SF1, W=2)
LONG = (
    "SELECT count(*) AS n, sum(l1.l_quantity * l2.l_quantity) AS q FROM lineitem l1 "
    "JOIN lineitem l2 ON l1.l_partkey = l2.l_partkey WHERE l1.l_shipdate < l2.l_shipdate",
    "SELECT count(*) AS n, sum(l1.l_extendedprice - l2.l_extendedprice) AS d FROM lineitem l1 "
    "JOIN lineitem l2 ON l1.l_partkey = l2.l_partkey WHERE l1.l_receiptdate > l2.l_receiptdate",
)
#: the query cancelled while it runs (≈30 s alone at SF1, W=2)
CANCEL = (
    "SELECT count(*) AS n, sum(l1.l_quantity * l2.l_quantity) AS q FROM lineitem l1 "
    "JOIN lineitem l2 ON l1.l_suppkey = l2.l_suppkey"
)
FINISHED = ("succeeded", "failed", "cancelled")
#: a connection that went away without an answer (http.client's RemoteDisconnected is a ConnectionResetError)
RESET_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
SLOW_CONNECT_S = 0.9  # Linux sends a dropped SYN again after 1 s


def in_list_sql(n: int) -> str:
    """``count``/``sum`` of the orders whose key is one of ``n`` keys (1, 5, 9, …: about a quarter exist)."""
    keys = ", ".join(str(1 + 4 * i) for i in range(n))
    return f"SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE o_orderkey IN ({keys})"


def tpch_jobs(clients: int, per_client: int, sf: float) -> list[list[str]]:
    """``per_client`` TPC-H queries for each of ``clients``: client i starts at query ``i*per_client % 22 + 1``
    and goes on in order (so 8 x 10 or more run all 22)."""
    import squall.tpch as tpch

    texts = {n: tpch.query(n, sf=sf) for n in range(1, 23)}
    return [[texts[(i * per_client + j) % 22 + 1] for j in range(per_client)] for i in range(clients)]


# ---------------------------------------------------------------------------------------------- clients


def _retransmits(sock: Any) -> int:
    """``tcpi_total_retrans`` of a TCP socket (Linux ``struct tcp_info``), 0 when unknown. On loopback nothing
    is lost: a packet sent again is one the server's kernel dropped — a SYN or the handshake's last ACK while
    the listen queue was full."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (AttributeError, OSError):
        return 0
    return int.from_bytes(info[100:104], sys.byteorder) if len(info) >= 104 else 0


class Tally:
    """What the clients saw, counted across threads: ``requests``, ``resets``, ``refused``, ``timeouts``,
    ``slow_connects`` (≥ 0.9 s), ``dropped_handshakes`` (see :func:`_retransmits`), ``429``, ``5xx``,
    ``retried_busy`` (a query found failed with ``Busy``)."""

    KEYS = (
        "requests",
        "resets",
        "refused",
        "timeouts",
        "slow_connects",
        "dropped_handshakes",
        "429",
        "5xx",
        "retried_busy",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)

    def since(self, before: Counter[str]) -> dict[str, int]:
        """The counts added after ``before`` (a :meth:`snapshot`), every key present."""
        now = self.snapshot()
        return {k: now[k] - before[k] for k in self.KEYS}


class ServiceError(Exception):
    """The service answered something a client cannot go on with (or never answered)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    """One query as a client saw it: the result (or the error) and when it was sent and got back."""

    sql: str
    kind: str
    workers: int | None = None
    query_id: str | None = None
    table: pa.Table | None = None
    error: str | None = None
    status: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0
    finished: float = 0.0

    @property
    def seconds(self) -> float:
        return self.finished - self.started


class Client:
    """One user of the service on plain HTTP (see the module doc): a new connection per request, every
    failure to get an answer counted in ``tally`` and the request sent again (``attempts`` in all)."""

    def __init__(self, url: str, token: str | None, tally: Tally, *, timeout_s: float = 600.0,
                 poll_max_s: float = 0.1, attempts: int = 6) -> None:  # fmt: skip
        parts = urllib.parse.urlsplit(url)
        self.url, self.host, self.port = url.rstrip("/"), parts.hostname or "127.0.0.1", parts.port or 80
        self.token, self.tally = token, tally
        self.timeout_s, self.poll_max_s, self.attempts = timeout_s, poll_max_s, attempts

    # --- HTTP ---------------------------------------------------------------------------------------

    def _once(self, method: str, path: str, data: bytes | None, headers: dict[str, str]) -> Response:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            start = time.perf_counter()
            conn.connect()
            if time.perf_counter() - start >= SLOW_CONNECT_S:
                self.tally.add("slow_connects")
            sock, retransmits = conn.sock, _retransmits(conn.sock)
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            answer = Response(
                response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            )
            retransmits = max(retransmits, _retransmits(sock))
        finally:
            conn.close()
        if retransmits:
            self.tally.add("dropped_handshakes")
        self.tally.add("requests")
        if answer.status >= 500:
            self.tally.add("5xx")
        elif answer.status == 429:
            self.tally.add("429")
        return answer

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        """One request, sent again when the connection failed (reset, refused, timed out) and after a 503's
        ``Retry-After`` (the 503 still counts as a 5xx)."""
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            sent["Content-Type"] = "application/json"
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        for attempt in range(self.attempts):
            try:
                response = self._once(method, path, data, sent)
                if (
                    response.status != 503
                    or "retry-after" not in response.headers
                    or attempt + 1 == self.attempts
                ):
                    return response
                time.sleep(float(response.headers["retry-after"]))  # overloaded, says when to come back
                continue
            except RESET_ERRORS:
                self.tally.add("resets")
            except ConnectionRefusedError:
                self.tally.add("refused")
            except TimeoutError:
                self.tally.add("timeouts")
            time.sleep(0.05 * 2**attempt)
        raise ServiceError(f"{method} {path}: no answer in {self.attempts} attempts")

    def healthz(self) -> float:
        """Seconds of one ``GET /healthz`` (connection included)."""
        start = time.perf_counter()
        response = self.request("GET", "/healthz")
        if response.status != 200:
            raise ServiceError(f"GET /healthz: HTTP {response.status}")
        return time.perf_counter() - start

    # --- queries ------------------------------------------------------------------------------------

    def submit(self, sql: str, *, workers: int | None = None) -> str:
        """The query id of ``sql`` once accepted (429: retried after ``Retry-After`` with a new key)."""
        body: dict[str, Any] = {"sql": sql, "format": "arrow"}
        if workers is not None:
            body["workers"] = workers
        key, deadline = uuid.uuid4().hex, time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            response = self.request("POST", "/v1/queries", body, {"Idempotency-Key": key})
            if response.status in (200, 202):
                return str(response.json()["query_id"])
            if response.status == 429:
                time.sleep(float(response.headers.get("retry-after") or 0.5))
                key = uuid.uuid4().hex  # the refused query is stored as failed under the old key
            elif response.status == 409 and b"being processed" in response.body:
                time.sleep(0.05)
            else:
                raise ServiceError(f"POST /v1/queries: HTTP {response.status} {response.body[:300]!r}")
        raise ServiceError(f"POST /v1/queries: not accepted in {self.timeout_s:g} s")

    def status(self, query_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        response = self.request("GET", f"/v1/queries/{query_id}" + (f"?wait_s={wait_s:g}" if wait_s else ""))
        if response.status != 200:
            raise ServiceError(f"GET /v1/queries/{query_id}: HTTP {response.status} {response.body[:300]!r}")
        return dict(response.json())

    def wait(self, query_id: str, until: Sequence[str] = FINISHED) -> dict[str, Any]:
        """Poll the status until it is one of ``until``: for the end of a query a long poll as the SDK does
        (``?wait_s=5``), else every 10 ms growing by half up to ``poll_max_s``."""
        delay, deadline = 0.01, time.monotonic() + self.timeout_s
        wait_s = LONG_POLL_S if set(until) <= set(FINISHED) else 0.0
        while time.monotonic() < deadline:
            doc = self.status(query_id, wait_s)
            if doc["status"] in until or doc["status"] in FINISHED:
                return doc
            time.sleep(delay)
            delay = min(delay * 1.5, self.poll_max_s)
        raise ServiceError(f"query {query_id} not finished in {self.timeout_s:g} s")

    def cancel(self, query_id: str) -> int:
        """``DELETE`` the query; its HTTP status."""
        return self.request("DELETE", f"/v1/queries/{query_id}").status

    def result(self, query_id: str) -> pa.Table:
        """The whole result as Arrow (a 303 is followed)."""
        response = self.request(
            "GET", f"/v1/queries/{query_id}/result?format=arrow", headers={"Accept": "*/*"}
        )
        data = response.body
        if response.status == 303:
            with urllib.request.urlopen(response.headers["location"], timeout=self.timeout_s) as fh:
                data = fh.read()
        elif response.status != 200:
            raise ServiceError(f"GET …/result: HTTP {response.status} {response.body[:300]!r}")
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    def start(self, sql: str, kind: str = "", *, workers: int | None = None) -> Answer:
        """Submit ``sql``: its :class:`Answer` with the query id (or the error)."""
        answer = Answer(sql, kind, workers=workers, started=time.perf_counter())
        try:
            answer.query_id = self.submit(sql, workers=workers)
        except ServiceError as err:
            answer.error, answer.finished = str(err), time.perf_counter()
        return answer

    def finish(self, answer: Answer) -> Answer:
        """Wait for a query sent by :meth:`start` and fetch its result (``error`` set if it failed, or the
        service did). A query found refused by a full queue (after a lost answer) is submitted again."""
        if answer.query_id is None:
            return answer
        try:
            answer.status = self.wait(answer.query_id)
            while (
                answer.status["status"] == "failed"
                and (answer.status.get("error") or {}).get("error") == "Busy"
            ):
                self.tally.add("retried_busy")
                time.sleep(0.5)
                answer.query_id = self.submit(answer.sql, workers=answer.workers)
                answer.status = self.wait(answer.query_id)
            if answer.status["status"] == "succeeded":
                answer.table = self.result(answer.query_id)
            else:
                answer.error = f"{answer.status['status']}: {answer.status.get('error')}"
        except ServiceError as err:
            answer.error = str(err)
        answer.finished = time.perf_counter()
        return answer

    def run(self, sql: str, kind: str = "", *, workers: int | None = None) -> Answer:
        """Submit, wait, fetch: the :class:`Answer`."""
        return self.finish(self.start(sql, kind, workers=workers))


def run_clients(
    clients: Sequence[Client], jobs: Sequence[Sequence[tuple[str, str]]]
) -> tuple[float, list[Answer]]:
    """Client i runs ``jobs[i]`` (``(kind, sql)`` pairs) one after another, all clients at once (released
    together by a barrier): seconds from the release to the last answer, and every answer."""
    barrier = threading.Barrier(len(clients) + 1)
    answers: list[list[Answer]] = [[] for _ in clients]

    def work(i: int) -> None:
        barrier.wait()
        for kind, sql in jobs[i]:
            answers[i].append(clients[i].run(sql, kind))

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, [a for per_client in answers for a in per_client]


# ------------------------------------------------------------------------------------------ the reference


class Reference:
    """DuckDB over the same Parquet files: the expected answer of each SQL (computed once) and the check."""

    def __init__(self, data: Path) -> None:
        import duckdb

        from squall.tpch import dataset_files

        self.con = duckdb.connect()
        for table, files in dataset_files(data).items():
            paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            self.con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{paths}])")
        self._answers: dict[str, pa.Table] = {}

    def expected(self, sql: str) -> pa.Table:
        if sql not in self._answers:
            self._answers[sql] = self.con.sql(sql).to_arrow_table()
        return self._answers[sql]

    def problems(self, answers: Sequence[Answer]) -> list[str]:
        """One line per answer that failed or differs from DuckDB's (empty: all right)."""
        from squall.testing import compare_results

        out = []
        for answer in answers:
            head = f"{answer.kind} {answer.query_id}: {' '.join(answer.sql.split())[:120]}"
            if answer.table is None:
                out.append(f"{head}: {answer.error}")
                continue
            problem = compare_results(answer.table, self.expected(answer.sql), answer.sql, reference=self.con)
            if problem is not None:
                out.append(f"{head}: {problem}")
        return out


def duckdb_throughput(reference: Reference, jobs: Sequence[Sequence[str]]) -> float:
    """Seconds for DuckDB to answer ``jobs`` in this process, one thread (and cursor) per client at once."""
    cursors = [reference.con.cursor() for _ in jobs]
    barrier = threading.Barrier(len(jobs) + 1)

    def work(i: int) -> None:
        barrier.wait()
        for sql in jobs[i]:
            cursors[i].sql(sql).to_arrow_table()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    for cursor in cursors:
        cursor.close()
    return seconds


# ----------------------------------------------------------------------------------------- the server


@contextmanager
def squall_serve(data: Path, workers: int, token: str, log: Path) -> Iterator[str]:
    """``squall serve --data DATA --workers W --token T`` on a free loopback port, a temporary state folder:
    yields its URL; SIGTERM at the end."""
    with tempfile.TemporaryDirectory(prefix="squall-bench-service-") as state, open(log, "wb") as fh:
        env = {k: v for k, v in os.environ.items() if k != "SQUALL_FAULTS"}
        env.update(POWERTOOLS_TRACE_DISABLED="1", POWERTOOLS_DEV="0")
        proc = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", "serve", "--port", "0", "--data", str(data),
             "--workers", str(workers), "--token", token, "--state", state],
            stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            yield _wait_listening(proc, log)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait_listening(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(r"serving on (http://[0-9.]+:\d+)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"squall serve did not start:\n{log.read_text(errors='replace')}")


# ---------------------------------------------------------------------------------------- the measures


@dataclass
class Row:
    """One line of the table."""

    measure: str
    goal: str
    measured: str
    ratio: str
    counts: dict[str, int]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def secs(s: float) -> str:
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.0f} ms"


class Bench:
    """The measures against one server (see the module doc); rows for the table, problems found."""

    def __init__(self, url: str, token: str | None, reference: Reference, args: argparse.Namespace) -> None:
        self.url, self.token, self.reference, self.args = url, token, reference, args
        self.tally = Tally()
        self.rows: list[Row] = []
        self.problems: list[str] = []

    def client(self) -> Client:
        return Client(self.url, self.token, self.tally, poll_max_s=self.args.poll_max)

    def check(self, answers: Sequence[Answer]) -> None:
        self.problems += self.reference.problems(answers)

    def row(self, measure: str, goal: str, measured: str, ratio: str, before: Counter[str]) -> None:
        self.rows.append(Row(measure, goal, measured, ratio, self.tally.since(before)))
        print(f"  {measure}: {measured}  {ratio}", file=sys.stderr, flush=True)

    def warm_up(self) -> None:
        """Every TPC-H query once on Squall and on DuckDB (answers checked), and once more on Squall at W=1:
        the W a busy server gives a query that names none (``adaptive_workers``), so the throughput measures
        see the plans cached, as on a server that has run these queries before (``--cold-plans``: not)."""
        jobs = tpch_jobs(1, 22, self.args.sf)[0]
        client = self.client()
        self.check([client.run(sql, "warm-up") for sql in jobs])
        if not self.args.cold_plans and self.args.workers > 1:
            self.check([client.run(sql, "warm-up", workers=1) for sql in jobs])
        for sql in (SHORT, *LONG):
            self.reference.expected(sql)

    def short_alone(self) -> None:
        before, client = self.tally.snapshot(), self.client()
        answers = [client.run(SHORT, "short") for _ in range(5 * self.args.repeat)]
        self.check(answers)
        self.row("short query alone, median", "-", secs(_median([a.seconds for a in answers])), "", before)

    def short_behind_long(self) -> None:
        before, seconds = self.tally.snapshot(), []
        for _ in range(self.args.repeat):
            long_answers = [self.client().start(sql, "long") for sql in LONG]  # two users, then a third
            short = self.client().run(SHORT, "short")
            long_answers = [self.client().finish(answer) for answer in long_answers]
            seconds.append(short.seconds)
            self.check([short, *long_answers])
        median = _median(seconds)
        self.row(
            "short query behind 2 long, median", "≤ 0.5 s", secs(median), f"{median / 0.5:.1f}x goal", before
        )

    def throughputs(self) -> None:
        for clients in self.args.clients:
            self.throughput(clients)

    def throughput(self, clients: int) -> None:
        before = self.tally.snapshot()
        jobs = tpch_jobs(clients, self.args.per_client, self.args.sf)
        wall, answers = run_clients(
            [self.client() for _ in jobs], [[("tpch", sql) for sql in job] for job in jobs]
        )
        self.check(answers)
        duck = duckdb_throughput(self.reference, jobs)
        n = sum(len(job) for job in jobs)
        ours, theirs = n / wall, n / duck
        p50 = _median([a.seconds for a in answers])
        self.row(f"throughput {clients} clients x {self.args.per_client} TPC-H, q/s (squall/duckdb)", "≥ 0.8x",
                 f"{ours:.1f}/{theirs:.1f} (query median {secs(p50)})", f"{ours / theirs:.2f}x", before)  # fmt: skip

    def healthz_during_in_list(self) -> None:
        before, sql = self.tally.snapshot(), in_list_sql(self.args.in_list)
        done, worst, probes = threading.Event(), [0.0], [0]

        def probe() -> None:
            client = self.client()
            while not done.is_set():
                try:
                    worst[0] = max(worst[0], client.healthz())
                except ServiceError as err:
                    self.problems.append(f"/healthz: {err}")
                    worst[0] = float("inf")
                probes[0] += 1

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(0.3)  # the prober is at full speed
        submitter = self.client()
        start = time.perf_counter()
        answer = submitter.run(sql, "in-list")
        done.set()
        prober.join()
        self.check([answer])
        self.row(f"/healthz worst while a {self.args.in_list:,}-element IN list is submitted and runs",
                 "≤ 100 ms", f"{secs(worst[0])} ({probes[0]} probes in {secs(time.perf_counter() - start)})",
                 f"{worst[0] / 0.1:.1f}x goal", before)  # fmt: skip

    def cancel(self) -> None:
        before, seconds, client = self.tally.snapshot(), [], self.client()
        for _ in range(self.args.repeat):
            query_id = client.submit(CANCEL)
            if client.wait(query_id, until=("running",))["status"] != "running":
                self.problems.append(f"cancel {query_id}: finished before it could be cancelled")
                continue
            time.sleep(1.0)
            start = time.perf_counter()
            code = client.cancel(query_id)
            doc = client.wait(query_id)
            seconds.append(time.perf_counter() - start if doc["status"] == "cancelled" else float("inf"))
            if code not in (200, 202) or doc["status"] == "failed":
                self.problems.append(f"cancel {query_id}: DELETE answered {code}, then {doc['status']}")
        median, worst = _median(seconds), max(seconds, default=float("nan"))
        self.row("cancel: DELETE of a running long query → cancelled, median/worst", "≤ 1 s",
                 f"{secs(median)}/{secs(worst)}", f"{worst:.1f}x goal", before)  # fmt: skip


MEASURES: dict[str, Callable[[Bench], None]] = {
    "short": Bench.short_alone,
    "behind": Bench.short_behind_long,
    "throughput": Bench.throughputs,
    "healthz": Bench.healthz_during_in_list,
    "cancel": Bench.cancel,
}


def print_table(bench: Bench, seconds: float, load_before: tuple[float, float, float]) -> None:
    load = os.getloadavg()
    print(f"squall serve --workers {bench.args.workers} on {bench.args.data}; {os.cpu_count()} cores; "
          f"load average {load_before[0]:.2f} before, {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} after; "
          f"{seconds:.0f} s in all; clients poll every ≤ {bench.args.poll_max:g} s")  # fmt: skip
    head = ("measure", "goal", "measured", "ratio", "requests", "resets", "refused", "dropped handshakes", "429",
            "5xx")  # fmt: skip
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for row in bench.rows:
        c = row.counts
        print(" | ".join((row.measure, row.goal, row.measured, row.ratio, str(c["requests"]), str(c["resets"]),
                          str(c["refused"]), str(c["dropped_handshakes"]), str(c["429"] + c["retried_busy"]),
                          str(c["5xx"]))))  # fmt: skip
    total = bench.tally.since(Counter())
    print(f"all requests: {total['requests']}, resets {total['resets']}, refused {total['refused']}, "
          f"timeouts {total['timeouts']}, dropped handshakes {total['dropped_handshakes']} "
          f"(connects ≥ 1 s: {total['slow_connects']}), "
          f"429 {total['429'] + total['retried_busy']}, 5xx {total['5xx']}")  # fmt: skip


def bench(args: argparse.Namespace, url: str, token: str | None) -> int:
    """Every measure asked for, then the table; 1 when an answer differed or failed."""
    start, load = time.perf_counter(), os.getloadavg()
    runner = Bench(url, token, Reference(args.data), args)
    print("warming up: 22 TPC-H queries (and at W=1)", file=sys.stderr, flush=True)
    runner.warm_up()
    for name in args.measures:
        print(f"measuring {name}", file=sys.stderr, flush=True)
        try:
            MEASURES[name](runner)
        except ServiceError as err:  # the service stopped answering: the other measures still run
            runner.problems.append(f"{name}: {err}")
    print_table(runner, time.perf_counter() - start, load)
    for problem in runner.problems:
        print("DIFFERS:", problem)
    return 1 if runner.problems else 0


def _numbers(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want numbers like 8,16, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"want positive numbers like 8,16, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/sf1", type=Path, help="TPC-H Parquet folder (make data)")
    parser.add_argument("--workers", type=int, default=2, help="squall serve --workers")
    parser.add_argument("--clients", type=_numbers, default=[8, 16], help="client counts for throughput")
    parser.add_argument("--per-client", type=int, default=10, help="TPC-H queries per client")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the latency measures")
    parser.add_argument("--in-list", type=int, default=100_000, help="elements of the IN list")
    parser.add_argument("--cold-plans", action="store_true",
                        help="warm up at the server's W only: the throughput measures then plan each query at "
                        "W=1 (the W under load) once more")  # fmt: skip
    parser.add_argument("--poll-max", type=float, default=0.1, help="clients' longest pause between polls")
    parser.add_argument("--measures", default=",".join(MEASURES), help="some of: " + ",".join(MEASURES))
    parser.add_argument("--endpoint", help="a server already running on --data (default: start squall serve)")
    parser.add_argument("--token", help="its bearer token")
    args = parser.parse_args(argv)
    args.data = args.data.resolve()
    args.measures = [m for m in args.measures.split(",") if m]
    if unknown := [m for m in args.measures if m not in MEASURES]:
        parser.error(f"unknown measures {unknown}; known: {', '.join(MEASURES)}")
    from squall.errors import DataError
    from squall.tpch import dataset_files, existing_sf

    try:
        dataset_files(args.data)
    except DataError:
        parser.error(f"no TPC-H data in {args.data}: make data (SF=1)")
    args.sf = existing_sf(args.data) or 1.0
    if args.endpoint:
        return bench(args, args.endpoint, args.token)
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="squall-bench-service-log-") as tmp:
        log = Path(tmp) / "serve.log"
        with squall_serve(args.data, args.workers, token, log) as url:
            code = bench(args, url, token)
        if "Traceback" in log.read_text(errors="replace"):
            print(f"the server logged a traceback:\n{log.read_text(errors='replace')[-3000:]}")
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
