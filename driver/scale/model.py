"""The discrete-event model of one query on Lambda (SimPy): what :func:`squall.driver.scale.estimate` runs.

Processes (one SimPy process each), following ``driver/platforms/lambda_`` (formerly
``driver/lambda_platform.py`` / ``lambda_worker.py``) step by step:

- **driver**: set-up (HEAD bucket) → one async Invoke per first-level block of ``f`` ranks, serially
  (``invoke_api_s`` each) → polls the status keys with one LIST per round (50 ms … 1 s backoff, reset
  when a status key appeared) → GETs each ``done`` document and rank 0's result → clean-up.
- **invocation** of ranks [lo, hi): waits ``invoke_to_start_s`` plus a cold start
  (``cold_start_base_s + layer_mb x cold_start_per_layer_mb_s``) unless warm, and for a slot under the
  account's burst limit → set-up → HEAD (abort marker) + PUT ``start`` → invokes its children
  serially (the invocation tree: :func:`tree_blocks`) → runs rank ``lo``.
- **rank**: for each stage: HEAD abort check; if it runs the stage: scan (S3 ranged GETs through the
  function's network bucket, on AWS) then compute (calibrated rate of the stage's shape, on its own vCPUs
  or on the emulator's shared cores, processor sharing) then send (one PUT per exchange object, then
  the ``sent`` status PUT); if it receives: poll-and-fetch like ``S3Exchange._collect`` of the exchange
  version in ``PlatformConfig.exchange_version`` (:data:`squall.driver.scale.requests.POLLING`):

  - ``s3-v2`` (today's exchange, the default): each round one LIST per group prefix that still has a
    pending sender, then — without waiting for them — the data GETs of the newly listed senders (as many
    as the formulas give; none for empty pieces; an index GET first only when keys overflowed); if
    senders are still missing, an abort HEAD when ``ABORT_CHECK_S`` (1 s) passed since this rank's last
    check and a jittered sleep 20 ms … 1 s (doubling); at the end it waits for its GETs. Between stages
    the worker's abort check is also at most one HEAD per second.
  - ``s3-v1``: a GET per pending sender per round (a 404 miss until the object exists, then the index
    GET and the data GETs), a HEAD and a jittered sleep per round, and a HEAD per stage.

  Two levels forward first; then the ``stage`` status PUT.

Shared resources: S3 request rate per class (GET/HEAD vs PUT/LIST) as a token bucket of
``s3_prefixes x 5,500`` (resp. 3,500) per second: requests above it see 503 SlowDown and retry after
botocore's backoff (counted in ``retries``, not billed); each function's network as a token bucket
(burst credit drained at the peak rate, then the sustained rate); the emulator's CPU cores.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import simpy

from squall.driver.platforms.lambda_ import tree
from squall.driver.scale.calibration import Calibration
from squall.driver.scale.params import LogNormal, PlatformConfig, Profile
from squall.driver.scale.requests import (
    ABORT_CHECK_S,
    POLL_MAX_S,
    POLL_MIN_S,
    POLLING,
    ExchangeCounts,
    ExchangeShape,
    exchange_counts,
    grid_width,
    list_groups,
)
from squall.driver.scale.workload import StageWork, Workload

#: the invocation tree is the Lambda platform's own: the driver's first-level blocks, each worker's children
tree_blocks = tree.first_level
tree_children = tree.children


@lru_cache(maxsize=16)
def grid_sources(width: int) -> tuple[list[list[int]], list[list[int]]]:
    """Per grid position: positions whose level-1 objects it reads as forwarder, and whose level-2
    objects it reads as receiver (own excluded); ``squall.exchange.s3.Grid.sources``/``forwarders``."""
    g = grid_width(width)

    def forwarder(row_start: int, col: int) -> int:
        q = row_start + col
        return q - g if q >= width else q

    rows_of: dict[int, set[int]] = {}
    for start in range(0, width, g):
        for col in range(min(g, width)):
            rows_of.setdefault(forwarder(start, col), set()).add(start)
    lvl1 = [
        sorted({q for s in rows_of.get(f, ()) for q in range(s, min(s + g, width))} - {f})
        for f in range(width)
    ]
    lvl2 = [sorted({forwarder(start, q % g) for start in range(0, width, g)} - {q}) for q in range(width)]
    return lvl1, lvl2


# --- shared resources ---------------------------------------------------------------------------


class RateLimit:
    """At most ``rate`` requests in each one-second window; a batch that does not fit waits for the next
    window with room (order-independent, so requests may be booked ahead of the clock)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.used: dict[int, float] = {}

    def admit(self, now: float, n: int, spread_s: float = 0.0) -> float:
        """Book ``n`` requests at ``now`` (or evenly over ``spread_s`` seconds); return the extra wait."""
        if self.rate >= 1e8 or n <= 0:
            return 0.0
        if spread_s >= 1.0:
            secs = int(spread_s)
            return max(self.admit(now + i, math.ceil(n / secs)) for i in range(secs))
        sec = first = int(now // 1)
        left = float(n)
        while left > 0:
            take = min(self.rate - self.used.get(sec, 0.0), left)
            if take > 0:
                self.used[sec] = self.used.get(sec, 0.0) + take
                left -= take
            if left > 0:
                sec += 1
        return max(0.0, sec - now) if sec > first else 0.0


class NetBucket:
    """A function's network: ``burst`` bytes at ``peak`` B/s, refilled at ``sustained`` B/s."""

    def __init__(self, peak: float, sustained: float, burst: float) -> None:
        self.peak, self.sustained, self.cap = peak, sustained, burst
        self.tokens, self.at = burst, 0.0

    def transfer(self, now: float, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        self.tokens = min(self.cap, self.tokens + (now - self.at) * self.sustained)
        self.at = now
        fast = min(nbytes, self.tokens)
        self.tokens -= fast
        return fast / self.peak + (nbytes - fast) / self.sustained


class SharedCpu:
    """``cores`` cores shared by every process of the emulator and ``background`` runnable threads of
    other programs (processor sharing, as Linux's fair scheduler: each of n runnable jobs gets
    ``min(1, cores / (n + background))`` of a core)."""

    def __init__(self, env: simpy.Environment, cores: int, background: float = 0.0) -> None:
        self.env, self.cores, self.background = env, cores, background
        self.jobs: dict[int, list[Any]] = {}
        self.last = 0.0
        self.wake: simpy.Event | None = None
        self.ids = 0
        self.busy_s = 0.0
        env.process(self._loop())

    def _rate(self) -> float:
        return min(1.0, self.cores / (len(self.jobs) + self.background)) if self.jobs else 1.0

    def _advance(self) -> None:
        dt = self.env.now - self.last
        if dt > 0 and self.jobs:
            rate = self._rate()
            for job in self.jobs.values():
                job[0] -= dt * rate
            self.busy_s += dt * rate * len(self.jobs)
        self.last = self.env.now

    def run(self, seconds: float) -> Generator[Any, Any, None]:
        self._advance()
        done = self.env.event()
        self.ids += 1
        self.jobs[self.ids] = [seconds, done]
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()
        yield done

    def _loop(self) -> Generator[Any, Any, None]:
        while True:
            self._advance()
            for jid in [j for j, job in self.jobs.items() if job[0] <= 1e-9]:
                self.jobs.pop(jid)[1].succeed()
            self.wake = self.env.event()
            if self.jobs:
                left = min(job[0] for job in self.jobs.values()) / self._rate()
                yield self.env.any_of([self.env.timeout(left), self.wake])
            else:
                yield self.wake


# --- the estimate -------------------------------------------------------------------------------


@dataclass
class StageEstimate:
    """Per stage: slowest rank's compute, scan and exchange time, and bytes."""

    stage: int
    shape: str
    ranks: int
    compute_s: float = 0.0
    scan_s: float = 0.0
    send_s: float = 0.0
    receive_s: float = 0.0
    end_s: float = 0.0  # when the last rank finished the stage
    bytes_scanned: float = 0.0
    rows_in: float = 0.0
    exchange: dict[str, Any] = field(default_factory=dict)
    memory_mb: float = 0.0  # peak working set of one rank
    spilled: bool = False


@dataclass
class Estimate:
    """What the model predicts for one query on one platform configuration."""

    time_s: float
    cost_usd: float
    requests: dict[str, int]
    per_stage: list[StageEstimate]
    cost: dict[str, Any]
    workers: int
    profile: str
    startup_s: float = 0.0  # when the last rank started
    billed_s: float = 0.0  # sum of billed durations
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


class Simulation:
    """One run of the model (see module doc); :meth:`run` returns an :class:`Estimate`."""

    def __init__(self, work: Workload, config: PlatformConfig, prof: Profile, cal: Calibration,
                 seed: int = 1) -> None:  # fmt: skip
        self.work, self.cfg, self.prof, self.cal = work, config, prof, cal
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(seed)
        self.prng = random.Random(seed)
        self.world = work.world
        self.fanout = config.effective_fanout()
        self.requests: Counter[str] = Counter()
        self.retries = 0
        self.cpu = SharedCpu(self.env, prof.host_cores, prof.background_load) if prof.host_cores else None
        self.gets = RateLimit(prof.s3_get_per_prefix * prof.s3_prefixes)
        self.puts = RateLimit(prof.s3_put_per_prefix * prof.s3_prefixes)
        self.nets: dict[int, NetBucket] = {}
        self.written: dict[tuple[int, int, int], simpy.Event] = {}
        self.billed: list[float] = []
        self.starts: list[float] = []
        self.invocations = 0
        self.concurrent = 0
        self.burst_used: list[float] = []
        self.last_change = 0.0
        self.done_ranks: list[float] = []
        self.all_done = self.env.event()
        self.threads = prof.threads_override or max(1, math.ceil(config.memory_mb / 1769))
        self.per_stage = {s.id: StageEstimate(s.id, s.shape, len(s.ranks)) for s in work.stages}
        self.exchanges: dict[int, ExchangeCounts] = {}
        self.piece: dict[int, float] = {}
        self.xstats: dict[int, Counter[str]] = {}
        self.notes: list[str] = []
        self.polling = POLLING.get(config.exchange_version, "list")
        self.abort_checked: dict[int, float] = {}  # rank -> when its exchange last HEADed ABORT (v2)
        self._shapes()

    # -- exchange shapes and formulas

    def _shapes(self) -> None:
        for st in self.work.stages:
            if st.output_kind == "result" or not st.receivers:
                continue
            n_s = max(1, len(st.senders))
            if st.output_kind == "hash":
                share = st.bytes_out / (n_s * len(st.receivers))
                rows = st.rows_out / (n_s * len(st.receivers))
            else:
                share, rows = st.bytes_out / n_s, st.rows_out / n_s
            piece = self.cal.ipc_piece_bytes(share, rows, st.n_columns)
            self.piece[st.id] = piece
            shape = ExchangeShape(st.output_kind, st.senders, st.receivers, piece, self.cfg.levels)
            self.exchanges[st.id] = exchange_counts(shape, self.cfg.exchange_version)
            self.xstats[st.id] = Counter()

    # -- primitives

    def _lat(self, d: LogNormal, n: int = 1) -> np.ndarray:
        return d.median * np.exp(d.sigma * self.rng.standard_normal(n))

    def _lat1(self, d: LogNormal) -> float:
        return d.median * math.exp(d.sigma * self.prng.gauss(0.0, 1.0))

    def _net(self, rank: int) -> NetBucket:
        if rank not in self.nets:
            p = self.prof
            self.nets[rank] = NetBucket(p.net_peak_Bps, p.net_sustained_Bps, p.net_burst_bytes)
        return self.nets[rank]

    def cpu_work(self, seconds: float) -> Generator[Any, Any, None]:
        if seconds <= 0:
            return
        if self.cpu is not None:
            yield from self.cpu.run(seconds)
        else:
            yield self.env.timeout(seconds)

    def req(self, kind: str, n: int, rank: int, nbytes: float = 0.0, xid: int | None = None,
            count_as: str | None = None, at: float = 0.0, spread_s: float = 0.0) -> float:  # fmt: skip
        """Count ``n`` requests of ``kind`` issued in parallel by ``rank`` (its thread pool) ``at`` seconds
        from now, moving ``nbytes`` in total; return how long they take (throttling, latency, transfer).
        On a shared-CPU host the caller also runs ``n x s3_request_cpu_s`` of CPU work."""
        if n <= 0:
            return 0.0
        p = self.prof
        self.requests[count_as or kind] += n
        if xid is not None:
            self.xstats[xid][count_as or kind] += n
        now = self.env.now + at
        limiter = self.puts if kind in ("put", "list") else self.gets
        t = 0.0
        wait = limiter.admit(now, n, spread_s)
        if wait > 0:  # 503 SlowDown, retried after botocore's backoff: about log2 rounds per request
            tries = max(1, math.ceil(math.log2(1 + wait / max(p.retry_base_s * 0.5, 1e-3))))
            self.retries += n * tries
            backoff = sum(min(p.retry_cap_s, p.retry_base_s * 2**i * 0.5) for i in range(tries))
            t += max(wait, backoff)
        dist = {"get": p.s3_get_s, "put": p.s3_put_s, "head": p.s3_head_s, "list": p.s3_list_s}[kind]
        lanes = max(1, p.threads_per_rank)
        if n == 1:
            t += self._lat1(dist)
        elif n <= lanes:
            t += float(self._lat(dist, n).max())
        else:
            waves = math.ceil(n / lanes)
            lat = self._lat(dist, waves * lanes)
            lat[n:] = 0.0
            t += float(lat.reshape(waves, lanes).max(axis=1).sum())
        if nbytes > 0:
            t += self._net(rank).transfer(now + t, nbytes)
        return t

    def s3(self, kind: str, n: int, rank: int, nbytes: float = 0.0, xid: int | None = None,
           count_as: str | None = None) -> Generator[Any, Any, None]:  # fmt: skip
        """:meth:`req` as a process step (CPU on shared hosts, then the wait)."""
        if n <= 0:
            return
        if self.prof.s3_request_cpu_s:
            yield from self.cpu_work(n * self.prof.s3_request_cpu_s)
        yield self.env.timeout(self.req(kind, n, rank, nbytes, xid, count_as))

    # -- driver

    def driver(self) -> Generator[Any, Any, None]:
        p = self.prof
        yield self.env.timeout(p.driver_setup_s)
        yield from self.cpu_work(p.driver_cpu_s / 2)
        yield from self.s3("head", 1, -1)
        for lo, hi in tree_blocks(self.world, self.fanout):
            yield self.env.timeout(float(self._lat(p.invoke_api_s)[0]))
            self.env.process(self.invocation(lo, hi))
            self.invocations += 1
        delay = p.driver_poll_min_s
        seen_change = 0.0
        while len(self.done_ranks) < self.world:
            yield from self.s3("list", max(1, math.ceil(self.world * 4 / 1000)), -1)
            changed = self.last_change > seen_change
            seen_change = self.env.now
            delay = p.driver_poll_min_s if changed else min(delay * 2, p.driver_poll_max_s)
            if len(self.done_ranks) >= self.world:
                break
            yield self.env.timeout(delay)
        yield from self.s3("get", self.world, -1)  # the done documents
        yield from self.s3("get", 1, -1)  # rank 0's result
        yield from self.cpu_work(p.driver_cpu_s / 2)
        yield self.env.timeout(p.cleanup_s)
        self.requests["list"] += max(1, math.ceil(self._objects() / 1000))
        self.requests["delete"] += max(1, math.ceil(self._objects() / 1000))

    def _objects(self) -> int:
        puts = sum(c.put for c in self.exchanges.values())
        return puts + self.world * (3 + 2 * len(self.work.stages))

    def _status(self, rank: int) -> Generator[Any, Any, None]:
        self.last_change = self.env.now
        yield from self.s3("put", 1, rank, count_as="put")
        self.requests["status_put"] += 1

    # -- invocations

    def invocation(self, lo: int, hi: int) -> Generator[Any, Any, None]:
        p = self.prof
        delay = float(self._lat(p.invoke_to_start_s)[0])
        if self.rng.random() >= p.warm_fraction:
            delay += p.cold_start_base_s + p.layer_mb * p.cold_start_per_layer_mb_s
        # account burst limit: at most burst_concurrency new environments per window
        self.burst_used.append(self.env.now)
        n = len(self.burst_used)
        if n > p.burst_concurrency:
            delay += p.burst_window_s * ((n - 1) // p.burst_concurrency)
        if n > p.account_concurrency:
            self.notes.append(f"W={self.world} exceeds the account concurrency {p.account_concurrency}")
        yield self.env.timeout(delay)
        start = self.env.now
        self.starts.append(start)
        yield self.env.timeout(p.worker_setup_s)
        yield from self.cpu_work(p.worker_setup_cpu_s)
        yield from self.s3("head", 1, lo)
        self.requests["abort_head"] += 1
        yield from self._status(lo)  # start
        for a, b in tree_children(lo, hi, self.fanout):
            yield self.env.timeout(float(self._lat(p.invoke_api_s)[0]))
            self.env.process(self.invocation(a, b))
            self.invocations += 1
        yield from self.rank(lo)
        if lo == 0:
            last = self.work.stages[-1]
            yield from self.s3("put", 1, lo, nbytes=last.bytes_out)
        yield from self._status(lo)  # done
        self.billed.append(self.env.now - start)
        self.done_ranks.append(self.env.now)

    # -- one rank

    def rank(self, r: int) -> Generator[Any, Any, None]:
        p = self.prof
        shared = self.cpu is not None
        for st in self.work.stages:
            est = self.per_stage[st.id]
            wait = 0.0
            if self._abort_due(r):
                self.requests["abort_head"] += 1
                if shared:
                    yield from self.s3("head", 1, r)
                else:
                    wait = self.req("head", 1, r)
            if r in st.ranks:
                wait += p.stage_overhead_s
                if p.data_on_s3 and st.scan_bytes[r] > 0:
                    per_split = st.scan_bytes[r] / max(st.scan_splits[r], 1)
                    n_get = int(
                        st.scan_files[r] + st.scan_splits[r] * max(1, math.ceil(per_split / (16 << 20)))
                    )
                    scan = self.req(
                        "get", n_get, r, nbytes=float(st.scan_bytes[r]), count_as="scan_get", at=wait
                    )
                    est.scan_s = max(est.scan_s, scan)
                    wait += scan
                seconds, mem, spilled = self._compute(st, r)
                est.memory_mb = max(est.memory_mb, mem)
                est.spilled |= spilled
                if shared:
                    yield self.env.timeout(wait)
                    wait = 0.0
                    t0 = self.env.now
                    yield from self.cpu_work(seconds)
                    est.compute_s = max(est.compute_s, self.env.now - t0)
                else:
                    wait += seconds
                    est.compute_s = max(est.compute_s, seconds)
                if st.output_kind != "result" and r in st.senders:
                    t0 = self.env.now + wait
                    if shared:
                        yield self.env.timeout(wait)
                        wait = 0.0
                        yield from self._send(st, r, 1)
                        yield from self._status(r)  # sent-<stage>
                    else:
                        wait += self._put_object(st, r, 1, at=wait)
                        yield self.env.timeout(wait)
                        wait = 0.0
                        self._written(st.id, 1, r)
                        wait += self._status_t(r)
                    est.send_s = max(est.send_s, self.env.now + wait - t0)
            if st.output_kind != "result" and r in st.receivers:
                if wait:
                    yield self.env.timeout(wait)
                    wait = 0.0
                t0 = self.env.now
                yield from self._receive(st, r)
                est.receive_s = max(est.receive_s, self.env.now - t0)
            if shared:
                yield from self._status(r)  # stage-<stage>
            else:
                wait += self._status_t(r)
                yield self.env.timeout(wait)
            est.end_s = max(est.end_s, self.env.now)

    def _abort_due(self, r: int, at: float = 0.0) -> bool:
        """Whether rank ``r`` HEADs the abort marker now (+``at``): v1 at every stage, v2 at most once per
        ``ABORT_CHECK_S`` (its exchange opens with the clock at its first stage)."""
        if self.polling == "get":
            return True
        now = self.env.now + at
        last = self.abort_checked.setdefault(r, now)
        if now - last < ABORT_CHECK_S:
            return False
        self.abort_checked[r] = now
        return True

    def _status_t(self, rank: int) -> float:
        self.last_change = self.env.now
        self.requests["status_put"] += 1
        return self.req("put", 1, rank)

    def _put_object(self, st: StageWork, r: int, level: int, at: float = 0.0) -> float:
        if not self.exchanges[st.id].puts[level][r]:
            return 0.0
        return self.req("put", 1, r, nbytes=self._object_bytes(st, r, level), xid=st.id, at=at)

    def _written(self, xid: int, level: int, r: int) -> None:
        ev = self._event((xid, level, r))
        if not ev.triggered:
            ev.succeed()

    def _compute(self, st: StageWork, r: int) -> tuple[float, float, bool]:
        rows = float(st.scan_rows[r] + st.in_rows[r])
        seconds = self.cal.compute_s(st.shape, rows, self.threads) / self.prof.compute_speed
        # output partitioning and IPC encoding
        out_bytes = st.bytes_out * st.out_share(r)
        seconds += out_bytes / self.cal.encode_Bps / self.prof.compute_speed
        mem_mb = (
            float(st.scan_bytes[r]) * self.cal.decompress_ratio + float(st.in_bytes[r]) + out_bytes
        ) / 2**20
        limit = 0.6 * self.cfg.memory_mb
        spilled = mem_mb > limit
        if spilled:
            seconds *= self.cal.spill_slowdown
        return seconds, mem_mb, spilled

    def _event(self, key: tuple[int, int, int]) -> simpy.Event:
        if key not in self.written:
            self.written[key] = self.env.event()
        return self.written[key]

    def _send(self, st: StageWork, r: int, level: int) -> Generator[Any, Any, None]:
        if self.exchanges[st.id].puts[level][r] and self.prof.s3_request_cpu_s:
            yield from self.cpu_work(self.prof.s3_request_cpu_s)
        yield self.env.timeout(self._put_object(st, r, level))
        self._written(st.id, level, r)

    def _object_bytes(self, st: StageWork, r: int, level: int) -> float:
        piece = self.piece[st.id]
        n = len(st.receivers) if st.output_kind == "hash" else 1
        return piece * n + 24 * n + 16

    def _sources(self, st: StageWork, r: int, level: int, levels: int) -> list[int]:
        """Whose level-``level`` objects rank ``r`` reads (its own excluded), as the exchange's Grid."""
        if levels == 1:
            return [s for s in st.senders if s != r]
        recv = sorted(st.receivers)
        pos = r if r < len(recv) and recv[r] == r else recv.index(r)
        table = grid_sources(len(recv))[level - 1]
        return [recv[q] for q in table[pos]]

    def _receive(self, st: StageWork, r: int) -> Generator[Any, Any, None]:
        counts = self.exchanges[st.id]
        if counts.levels == 1:
            yield from self._collect(st, r, 1, 1)
            return
        yield from self._collect(st, r, 1, 2)
        yield from self._send(st, r, 2)
        yield from self._collect(st, r, 2, 2)

    def _collect(self, st: StageWork, r: int, level: int, levels: int) -> Generator[Any, Any, None]:
        """``S3Exchange._collect`` of the configured exchange version (module doc)."""
        if self.polling == "get":
            yield from self._collect_v1(st, r, level, levels)
        else:
            yield from self._collect_listed(st, r, level, levels)

    def _collect_listed(self, st: StageWork, r: int, level: int, levels: int) -> Generator[Any, Any, None]:
        """s3-v2: per round one LIST per pending group prefix, the GETs of what it listed (in the
        background), an abort HEAD at most once per second of waiting, a jittered backoff sleep."""
        xid = st.id
        counts = self.exchanges[xid]
        pending = self._sources(st, r, level, levels)
        if not pending:
            return
        group = list_groups(st.output_kind, self._sources(st, -1, level, levels) if levels == 1 else pending,
                            counts.levels)  # fmt: skip
        n_read = max(1, int(counts.reads[level][r]))
        data_per_obj = int(counts.data_gets[level][r]) / n_read
        bytes_per_obj = float(counts.read_bytes[level][r]) / n_read
        index = counts.get_index > 0  # keys overflowed: a tail GET per object first
        cpu = self.prof.s3_request_cpu_s
        delay = POLL_MIN_S
        data_owed = 0.0
        fetched = self.env.now  # when the GETs started so far are done
        self.abort_checked.setdefault(r, self.env.now)
        while pending:
            if not cpu and not any(self._event((xid, level, s)).triggered for s in pending):
                delay = yield from self._idle_lists(xid, level, r, pending, group, delay)
                continue
            groups = {group[s] for s in pending}
            t = self.req("list", len(groups), r, xid=xid)
            n_req = len(groups)
            ready = [s for s in pending if self._event((xid, level, s)).triggered]
            if ready:
                g = 0.0
                if index:
                    g = self.req("get", len(ready), r, xid=xid, count_as="get_index", at=t)
                    n_req += len(ready)
                data_owed += data_per_obj * len(ready)
                n_data = int(round(data_owed))
                data_owed -= n_data
                g += self.req("get", n_data, r, nbytes=bytes_per_obj * len(ready), xid=xid,
                              count_as="get_data", at=t + g)  # fmt: skip
                n_req += n_data
                fetched = max(fetched, self.env.now + t + g)
            pending = [s for s in pending if s not in ready]
            if pending:
                if self._abort_due(r, t):
                    t += self.req("head", 1, r, xid=xid, at=t)
                    n_req += 1
                t += delay * float(self.prng.uniform(0.5, 1.0))
                delay = min(delay * 2, POLL_MAX_S)
            if cpu:
                yield from self.cpu_work(n_req * cpu)
            yield self.env.timeout(t)
        if fetched > self.env.now:
            yield self.env.timeout(fetched - self.env.now)

    def _idle_lists(
        self, xid: int, level: int, r: int, pending: list[int], group: dict[int, int], delay: float
    ) -> Generator[Any, Any, float]:
        """s3-v2 without per-request CPU: wait until one of ``pending`` is written and count the rounds
        that found nothing meanwhile (one LIST per pending group each, an abort HEAD per second)."""
        p = self.prof
        start = self.env.now
        yield self.env.any_of([self._event((xid, level, s)) for s in pending])
        until = self.env.now
        n_groups = len({group[s] for s in pending})
        t, rounds, heads = start, 0, 0
        while t < until:
            t += p.s3_list_s.median
            if self._abort_due(r, t - self.env.now):
                heads += 1
                t += p.s3_head_s.median
            t += delay * 0.75
            delay = min(delay * 2, POLL_MAX_S)
            rounds += 1
            if rounds > 100_000:
                break
        rounds = max(rounds, 1)
        self.requests["list"] += rounds * n_groups
        self.requests["head"] += heads
        self.xstats[xid]["list"] += rounds * n_groups
        self.xstats[xid]["head"] += heads
        self.puts.admit(until, rounds * n_groups)
        self.gets.admit(until, heads)
        if t > until:
            yield self.env.timeout(t - until)
        return delay

    def _collect_v1(self, st: StageWork, r: int, level: int, levels: int) -> Generator[Any, Any, None]:
        """s3-v1: rounds of GETs over the pending senders until every object was read."""
        xid = st.id
        counts = self.exchanges[xid]
        pending = self._sources(st, r, level, levels)
        if not pending:
            return
        n_read = max(1, int(counts.reads[level][r]))
        data_per_obj = int(counts.data_gets[level][r]) / n_read
        bytes_per_obj = float(counts.read_bytes[level][r]) / n_read
        cpu = self.prof.s3_request_cpu_s
        delay = 0.02
        data_owed = 0.0
        while pending:
            ready = [s for s in pending if self._event((xid, level, s)).triggered]
            if not ready and not cpu:  # nothing to read yet: skip the empty rounds in one step
                delay = yield from self._idle_rounds(xid, level, pending, delay)
                continue
            missing = len(pending) - len(ready)
            n_req = 0
            if counts.get_index or not ready:
                t = self.req("get", len(ready), r, xid=xid, count_as="get_index")
                t = max(t, self.req("get", missing, r, xid=xid, count_as="get_miss"))
                n_req += len(pending)
            else:  # target version: one LIST finds the offsets
                t = self.req("list", 1, r, xid=xid)
                n_req += 1
            if ready:
                data_owed += data_per_obj * len(ready)
                n_data = int(round(data_owed))
                data_owed -= n_data
                t += self.req("get", n_data, r, nbytes=bytes_per_obj * len(ready), xid=xid, count_as="get_data",
                              at=t)  # fmt: skip
                n_req += n_data
            pending = [s for s in pending if s not in ready]
            if pending:
                t += self.req("head", 1, r, xid=xid, at=t)
                n_req += 1
                t += delay * float(self.prng.uniform(0.5, 1.0))
                delay = min(delay * 2, 1.0)
            if cpu:
                yield from self.cpu_work(n_req * cpu)
            yield self.env.timeout(t)

    def _idle_rounds(
        self, xid: int, level: int, pending: list[int], delay: float
    ) -> Generator[Any, Any, float]:
        """Wait until one of ``pending`` is written; count the polling rounds that found nothing meanwhile
        (one miss per pending sender and one HEAD each) and resume at the first round that sees it."""
        p = self.prof
        start = self.env.now
        yield self.env.any_of([self._event((xid, level, s)) for s in pending])
        until = self.env.now
        t = start
        rounds = 0
        while t < until:
            t += p.s3_get_s.median * 1.2 + p.s3_head_s.median + delay * 0.75
            delay = min(delay * 2, 1.0)
            rounds += 1
            if rounds > 100_000:
                break
        rounds = max(rounds, 1)
        self.requests["get_miss"] += rounds * len(pending)
        self.requests["head"] += rounds
        self.xstats[xid]["get_miss"] += rounds * len(pending)
        self.xstats[xid]["head"] += rounds
        self.gets.admit(until, rounds * (len(pending) + 1))
        if t > until:
            yield self.env.timeout(t - until)
        return delay

    # -- run

    def run(self) -> Estimate:
        from squall.driver.cost import query_cost

        self.env.process(self.driver())
        self.env.run()
        elapsed = self.env.now
        billed = [(max(1, math.ceil(b * 1000)), self.cfg.memory_mb) for b in self.billed]
        s3_kinds = Counter({k: v for k, v in self.requests.items()
                            if k not in ("status_put", "abort_head")})  # fmt: skip
        billable: Counter[str] = Counter()
        for k, v in s3_kinds.items():
            billable["get" if k in ("get_index", "get_miss", "get_data", "scan_get") else k] += v
        cost = query_cost(billed, self.invocations, billable, region=self.cfg.region,
                          architecture=self.cfg.architecture)  # fmt: skip
        exchanges = []
        for xid, c in self.exchanges.items():
            x = self.xstats[xid]
            exchanges.append({"stage": xid, "levels": c.levels, "put": int(x["put"]),
                              "get_index": int(x["get_index"]), "get_data": int(x["get_data"]),
                              "get_miss": int(x["get_miss"]), "head": int(x["head"]), "list": int(x["list"]),
                              "formula": c.as_dict(), "piece_bytes": round(self.piece[xid], 1)})  # fmt: skip
            self.per_stage[xid].exchange = exchanges[-1]
        requests = {k: int(v) for k, v in sorted(self.requests.items())}
        requests["retries"] = int(self.retries)
        notes = sorted(set(self.notes))
        if any(s.spilled for s in self.per_stage.values()):
            notes.append("some stages exceed 60 % of the function's memory (DuckDB spills to /tmp)")
        return Estimate(
            time_s=elapsed,
            cost_usd=float(cost["cost_usd"]),
            requests=requests,
            per_stage=list(self.per_stage.values()),
            cost=cost["cost"],
            workers=self.world,
            profile=self.prof.name,
            startup_s=max(self.starts, default=0.0),
            billed_s=float(sum(self.billed)),
            exchanges=exchanges,
            notes=notes,
        )
