"""The discrete-event model of one query on Lambda (SimPy): what :func:`squall.driver.forecast.scale.estimate` runs.

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
  version in ``PlatformConfig.exchange_version`` (:data:`squall.driver.forecast.scale.requests.POLLING`):

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
from collections import Counter, defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import simpy

from squall.driver.forecast.scale.calibration import Calibration
from squall.driver.forecast.scale.memory import stage_need
from squall.driver.forecast.scale.params import LogNormal, PlatformConfig, Profile
from squall.driver.forecast.scale.requests import (
    ABORT_CHECK_S,
    POLL_MAX_S,
    POLL_MIN_S,
    POLLING,
    ExchangeCounts,
    ExchangeShape,
    PairWeights,
    exchange_counts,
    grid_width,
    list_groups,
)
from squall.driver.forecast.scale.workload import StageWork, Workload
from squall.driver.platforms.lambda_ import tree
from squall.driver.platforms.memory import lambda_worker_budget_mb
from squall.driver.platforms.prices import query_cost

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


#: simulated ranks at most (above: rank classes, see :func:`squall.driver.forecast.scale.estimate_workload`)
MAX_RANKS = 512

#: a batch of more than this many waves of the thread pool takes its expected time (:func:`wave_max`)
BATCH_CLOSED_FORM = 4


@lru_cache(maxsize=256)
def wave_max(dist: LogNormal, k: int) -> float:
    """Expected time of one wave of ``k`` parallel requests: E[max of k latencies] (numerically, once)."""
    z = np.random.default_rng(12345).standard_normal((4000, k)).max(axis=1)
    return float(dist.median * np.exp(dist.sigma * z).mean())


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


class Board:
    """The objects of one exchange level as readers see them: who wrote, in which order, the running sum of
    the writers' weights (one level: a reader's share of non-empty pieces is a difference of two sums),
    the LIST groups that still miss a writer, and an event per watch key (one level: 0; two levels: the
    writer's grid row at level 1, its column at level 2) that fires at that key's next write. Readers
    thus look at what is new since their last round in O(1) (one level) or O(√W) (two levels), never at
    every sender."""

    def __init__(self, env: simpy.Environment, key_of: Callable[[int], int], weight: np.ndarray,
                 list_group: dict[int, int]) -> None:  # fmt: skip
        self.env, self.key_of, self.weight, self.list_group = env, key_of, weight, list_group
        self.index: dict[int, int] = {}
        self.cum: list[float] = [0.0]
        self.events: dict[int, simpy.Event] = {}
        self.unwritten: Counter[int] = Counter(list_group.values())
        self.open_groups = len(self.unwritten)
        self.total_weight = float(weight[list(list_group)].sum()) if list_group else 0.0

    def write(self, sender: int) -> None:
        if sender in self.index:
            return
        self.index[sender] = len(self.cum) - 1
        self.cum.append(self.cum[-1] + float(self.weight[sender]))
        group = self.list_group.get(sender)
        if group is not None:
            self.unwritten[group] -= 1
            self.open_groups -= self.unwritten[group] == 0
        ev = self.events.pop(self.key_of(sender), None)
        if ev is not None:
            ev.succeed()

    def next_write(self, keys: set[int]) -> simpy.Event:
        """An event at the next write under any of ``keys``."""
        evs = []
        for k in keys:
            if k not in self.events:
                self.events[k] = self.env.event()
            evs.append(self.events[k])
        return evs[0] if len(evs) == 1 else self.env.any_of(evs)


class _Reader:
    """One reader's progress through a :class:`Board`: one level by a cursor into the write order (its own
    object skipped), two levels by the ≤ 2√W objects it still waits for (``pending``: source -> weight)."""

    def __init__(self, board: Board, n_src: int, total: float, scale: float, own: int | None = None,
                 pending: dict[int, float] | None = None) -> None:  # fmt: skip
        self.board, self.left, self.total, self.scale, self.own = board, n_src, total, scale, own
        self.pending = pending
        self.cursor = 0

    def peek(self) -> tuple[int, float]:
        """Objects written but not yet taken, and their summed weight."""
        b = self.board
        if self.pending is not None:
            ready = [s for s in self.pending if s in b.index]
            return len(ready), float(sum(self.pending[s] for s in ready))
        end = len(b.cum) - 1
        n, w = end - self.cursor, b.cum[end] - b.cum[self.cursor]
        if self.own is not None and self.cursor <= b.index.get(self.own, -1) < end:
            n, w = n - 1, w - float(b.weight[self.own])
        return n, w * self.scale

    def take(self) -> tuple[int, float]:
        n, w = self.peek()
        b = self.board
        if self.pending is not None:
            for s in [s for s in self.pending if s in b.index]:
                del self.pending[s]
        else:
            self.cursor = len(b.cum) - 1
        self.left -= n
        return n, w

    def groups(self) -> int:
        """LIST requests of one round: one per group prefix that still misses a writer."""
        if self.pending is not None:
            return 1
        return max(1, self.board.open_groups)

    def keys(self) -> set[int]:
        if self.pending is None:
            return {0}
        return {self.board.key_of(s) for s in self.pending}


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
                 seed: int = 1, max_ranks: int = 0) -> None:  # fmt: skip
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
        self._needs: dict[int, np.ndarray] = {}  # stage id -> bytes each rank needs (_compute)
        self.per_stage = {s.id: StageEstimate(s.id, s.shape, len(s.ranks)) for s in work.stages}
        self.exchanges: dict[int, ExchangeCounts] = {}
        self.piece: dict[int, float] = {}
        self.xstats: dict[int, Counter[str]] = {}
        self.notes: list[str] = []
        self.polling = POLLING.get(config.exchange_version, "list")
        self.abort_checked: dict[int, float] = {}  # rank -> when its exchange last HEADed ABORT (v2)
        self.boards: dict[tuple[int, int], Board] = {}
        self.data_owed: defaultdict[int, float] = defaultdict(float)
        #: ranks per simulated class: above ``max_ranks`` ranks (which behave alike: scans spread evenly),
        #: rank r (r % per_class == 0) acts for r … r+per_class-1; requests and billing count all of them
        self.per_class = max(1, math.ceil(self.world / max_ranks)) if max_ranks else 1
        self.classes = self._make_classes()
        self._sets: dict[int, frozenset[int]] = {}
        self.pairs: dict[int, PairWeights] = {}
        self.grid: dict[int, tuple[dict[int, int], np.ndarray, np.ndarray]] = {}  # xid -> (pos, n_col, y)
        self._shapes()

    # -- exchange shapes and formulas

    def _shapes(self) -> None:
        for st in self.work.stages:
            if st.output_kind == "result" or not st.receivers:
                continue
            x = st.sender_hit if len(st.sender_hit) else np.ones(self.world)
            m = st.receiver_hit if len(st.receiver_hit) else np.ones(self.world)
            senders = np.asarray(st.senders, dtype=np.int64)
            # pieces with rows: the output's bytes spread over them (module doc of .emptiness)
            pairs = float(x[senders].sum()) * (
                float(m[list(st.receivers)].sum()) if st.output_kind == "hash" else 1
            )
            pairs = max(pairs, 1.0)
            piece = self.cal.ipc_piece_bytes(st.bytes_out / pairs, st.rows_out / pairs, st.n_columns)
            self.piece[st.id] = piece
            trivial = bool((x[senders] >= 1).all() and (m[list(st.receivers)] >= 1).all())
            shape = ExchangeShape(st.output_kind, st.senders, st.receivers, piece, self.cfg.levels,
                                  sender_hit=() if trivial else tuple(x.tolist()),
                                  receiver_hit=() if trivial else tuple(m.tolist()))  # fmt: skip
            counts = exchange_counts(shape, self.cfg.exchange_version)
            self.exchanges[st.id] = counts
            self.pairs[st.id] = shape.pairs()
            self.xstats[st.id] = Counter()
            self._boards(st, counts.levels)

    def _boards(self, st: StageWork, levels: int) -> None:
        """One :class:`Board` per level of ``st``'s exchange."""
        pw = self.pairs[st.id]
        if levels == 1:
            groups = list_groups(st.output_kind, st.senders, 1)
            self.boards[st.id, 1] = Board(self.env, lambda s: 0, pw.x, groups)
            return
        recv = sorted(st.receivers)
        pos = {r: i for i, r in enumerate(recv)}
        g = grid_width(len(recv))
        n_col, y = pw.grid_terms(recv)
        self.grid[st.id] = (pos, n_col, y)
        ones = np.ones(self.world)
        self.boards[st.id, 1] = Board(self.env, lambda s: pos[s] // g, ones, {})
        self.boards[st.id, 2] = Board(self.env, lambda s: pos[s] % g, ones, {})

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
            count_as: str | None = None, at: float = 0.0, spread_s: float = 0.0, mult: int = 1,
            shared_by: int = 1) -> float:  # fmt: skip
        """Count ``n`` requests of ``kind`` issued in parallel by ``rank`` (its thread pool) ``at`` seconds
        from now, moving ``nbytes`` in total; return how long they take (throttling, latency, transfer).
        On a shared-CPU host the caller also runs ``n x s3_request_cpu_s`` of CPU work. ``mult``: the
        ranks this one stands for (:attr:`Simulation.per_class`): counted and throttled ``mult`` times.
        ``shared_by``: ``n`` is the total of that many ranks of a class; this one waits for its share."""
        if n <= 0 or mult <= 0:
            return 0.0
        if shared_by > 1:  # as ``own`` requests by each of ``shared_by`` ranks, counted as ``n`` in all
            own = max(1, round(n / shared_by))
            self.requests[count_as or kind] += n - own * shared_by
            if xid is not None:
                self.xstats[xid][count_as or kind] += n - own * shared_by
            return self.req(kind, own, rank, nbytes, xid, count_as, at, spread_s, mult=shared_by)
        p = self.prof
        self.requests[count_as or kind] += n * mult
        if xid is not None:
            self.xstats[xid][count_as or kind] += n * mult
        now = self.env.now + at
        limiter = self.puts if kind in ("put", "list") else self.gets
        t = 0.0
        # a class's members book one after another; the representative waits their mean wait
        waits = [limiter.admit(now, n, spread_s) for _ in range(mult)]
        for w in waits:
            if w > 0:
                self.retries += n * self._tries(w)
        wait = sum(waits) / mult
        if wait > 0:  # 503 SlowDown, retried after botocore's backoff: about log2 rounds per request
            tries = self._tries(wait)
            backoff = sum(min(p.retry_cap_s, p.retry_base_s * 2**i * 0.5) for i in range(tries))
            t += max(wait, backoff)
        dist = {"get": p.s3_get_s, "put": p.s3_put_s, "head": p.s3_head_s, "list": p.s3_list_s}[kind]
        lanes = max(1, p.threads_per_rank)
        if n == 1:
            t += self._lat1(dist)
        elif n <= lanes:
            t += float(self._lat(dist, n).max())
        elif n > BATCH_CLOSED_FORM * lanes:  # a big batch: its expected time, not one draw per request
            full, rest = divmod(n, lanes)
            t += full * wave_max(dist, lanes) + (wave_max(dist, rest) if rest else 0.0)
        else:
            waves = math.ceil(n / lanes)
            lat = self._lat(dist, waves * lanes)
            lat[n:] = 0.0
            t += float(lat.reshape(waves, lanes).max(axis=1).sum())
        if nbytes > 0:
            t += self._net(rank).transfer(now + t, nbytes)
        return t

    def _tries(self, wait: float) -> int:
        """Attempts of a request throttled for ``wait`` seconds (botocore's doubling backoff)."""
        return max(1, math.ceil(math.log2(1 + wait / max(self.prof.retry_base_s * 0.5, 1e-3))))

    def s3(self, kind: str, n: int, rank: int, nbytes: float = 0.0, xid: int | None = None,
           count_as: str | None = None, mult: int = 1) -> Generator[Any, Any, None]:  # fmt: skip
        """:meth:`req` as a process step (CPU on shared hosts, then the wait)."""
        if n <= 0:
            return
        if self.prof.s3_request_cpu_s:
            yield from self.cpu_work(n * self.prof.s3_request_cpu_s)
        yield self.env.timeout(self.req(kind, n, rank, nbytes, xid, count_as, mult=mult))

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

    def _status(self, rank: int, mult: int = 1) -> Generator[Any, Any, None]:
        self.last_change = self.env.now
        yield from self.s3("put", 1, rank, count_as="put", mult=mult)
        self.requests["status_put"] += mult

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
        cls = self.classes.get(lo)
        if cls is None:
            return  # another rank of its class runs the query for it (and bills its time)
        yield from self.rank(lo)
        if lo == 0:
            last = self.work.stages[-1]
            yield from self.s3("put", 1, lo, nbytes=last.bytes_out)
        yield from self._status(lo, len(cls))  # done
        self.billed.extend([self.env.now - start] * len(cls))
        self.done_ranks.extend([self.env.now] * len(cls))

    # -- one rank

    def _make_classes(self) -> dict[int, list[int]]:
        """Representative rank -> the ranks it stands for (itself first). With :attr:`per_class` k > 1:
        the ranks that invoke others (their start differs) each alone; the others in runs of k, led by the
        run's last rank."""
        k = self.per_class
        if k == 1:
            return {r: [r] for r in range(self.world)}
        invokers: set[int] = set()
        stack = list(tree_blocks(self.world, self.fanout))
        while stack:
            lo, hi = stack.pop()
            kids = list(tree_children(lo, hi, self.fanout))
            if kids:
                invokers.add(lo)
            stack.extend(kids)
        classes: dict[int, list[int]] = {r: [r] for r in invokers | {0}}
        run: list[int] = []
        for r in range(self.world):
            if r in classes:
                continue
            run.append(r)
            if len(run) == k or r == self.world - 1:
                classes[run[-1]] = [run[-1], *run[:-1]]
                run = []
        return classes

    def rank(self, r: int) -> Generator[Any, Any, None]:
        """Rank ``r``'s stages (and those of the ranks of its class, which behave alike)."""
        p = self.prof
        shared = self.cpu is not None
        cls = self.classes[r]
        for st in self.work.stages:
            est = self.per_stage[st.id]
            wait = 0.0
            if self._abort_due(r):
                self.requests["abort_head"] += len(cls)
                if shared:
                    yield from self.s3("head", 1, r, mult=len(cls))
                else:
                    wait = self.req("head", 1, r, mult=len(cls))
            members = self._members(st.ranks, cls)
            if members:
                a = members[0]  # the class's first rank in this stage acts for its members
                m = len(members)
                wait += p.stage_overhead_s
                if p.data_on_s3 and st.scan_bytes[a] > 0:
                    per_split = st.scan_bytes[a] / max(st.scan_splits[a], 1)
                    n_get = int(
                        st.scan_files[a] + st.scan_splits[a] * max(1, math.ceil(per_split / (16 << 20)))
                    )
                    scan = self.req(
                        "get", n_get, a, nbytes=float(st.scan_bytes[a]), count_as="scan_get", at=wait, mult=m
                    )
                    est.scan_s = max(est.scan_s, scan)
                    wait += scan
                seconds, mem, spilled = self._compute(st, a)
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
                senders = self._members(st.senders, cls) if st.output_kind != "result" else []
                if senders:
                    t0 = self.env.now + wait
                    if shared:
                        yield self.env.timeout(wait)
                        wait = 0.0
                        yield from self._send(st, senders, 1)
                        yield from self._status(a, len(senders))  # sent-<stage>
                    else:
                        wait += self._put_object(st, senders, 1, at=wait)
                        yield self.env.timeout(wait)
                        wait = 0.0
                        for q in senders:
                            self._written(st.id, 1, q)
                        wait += self._status_t(a, len(senders))
                    est.send_s = max(est.send_s, self.env.now + wait - t0)
            receivers = self._members(st.receivers, cls) if st.output_kind != "result" else []
            if receivers:
                if wait:
                    yield self.env.timeout(wait)
                    wait = 0.0
                t0 = self.env.now
                yield from self._receive(st, receivers)
                est.receive_s = max(est.receive_s, self.env.now - t0)
            if shared:
                yield from self._status(r, len(cls))  # stage-<stage>
            else:
                wait += self._status_t(r, len(cls))
                yield self.env.timeout(wait)
            est.end_s = max(est.end_s, self.env.now)

    def _members(self, ranks: tuple[int, ...], cls: list[int]) -> list[int]:
        """The ranks of ``cls`` among ``ranks``."""
        if len(cls) == 1:
            return [cls[0]] if cls[0] in self._rank_set(ranks) else []
        rs = self._rank_set(ranks)
        return [q for q in cls if q in rs]

    def _rank_set(self, ranks: tuple[int, ...]) -> frozenset[int]:
        got = self._sets.get(id(ranks))
        if got is None:
            got = self._sets[id(ranks)] = frozenset(ranks)
        return got

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

    def _status_t(self, rank: int, mult: int = 1) -> float:
        self.last_change = self.env.now
        self.requests["status_put"] += mult
        return self.req("put", 1, rank, mult=mult)

    def _put_object(self, st: StageWork, ranks: list[int], level: int, at: float = 0.0) -> float:
        """The level's PUT of ``ranks[0]`` (counted for every rank of ``ranks`` that PUTs)."""
        puts = self.exchanges[st.id].puts[level]
        n = sum(int(puts[q]) for q in ranks)
        if not n:
            return 0.0
        r = ranks[0]
        return self.req("put", 1, r, nbytes=self._object_bytes(st, r, level), xid=st.id, at=at, mult=n)

    def _written(self, xid: int, level: int, r: int) -> None:
        board = self.boards.get((xid, level))
        if board is not None:
            board.write(r)
        if self.polling == "get":
            ev = self._event((xid, level, r))
            if not ev.triggered:
                ev.succeed()

    def _compute(self, st: StageWork, r: int) -> tuple[float, float, bool]:
        rows = float(st.scan_rows[r] + st.in_rows[r])
        seconds = self.cal.compute_s(st.shape, rows, self.threads) / self.prof.compute_speed
        # output partitioning and IPC encoding
        out_bytes = st.bytes_out * st.out_share(r)
        seconds += out_bytes / self.cal.encode_Bps / self.prof.compute_speed
        # what the stage asks of the rank (forecast/scale/memory.py) against the worker's budget
        if st.id not in self._needs:  # every rank's at once: once per stage, not once per rank
            self._needs[st.id] = stage_need(st).per_rank
        mem_mb = float(self._needs[st.id][r]) / 2**20
        spilled = mem_mb > lambda_worker_budget_mb(int(self.cfg.memory_mb))
        if spilled:
            seconds *= self.cal.spill_slowdown
        return seconds, mem_mb, spilled

    def _event(self, key: tuple[int, int, int]) -> simpy.Event:
        if key not in self.written:
            self.written[key] = self.env.event()
        return self.written[key]

    def _send(self, st: StageWork, ranks: list[int], level: int) -> Generator[Any, Any, None]:
        if self.exchanges[st.id].puts[level][ranks[0]] and self.prof.s3_request_cpu_s:
            yield from self.cpu_work(self.prof.s3_request_cpu_s)
        yield self.env.timeout(self._put_object(st, ranks, level))
        for q in ranks:
            self._written(st.id, level, q)

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

    def _receive(self, st: StageWork, ranks: list[int]) -> Generator[Any, Any, None]:
        """Receive for ``ranks`` (a class's receivers; ``ranks[0]`` acts for all)."""
        counts = self.exchanges[st.id]
        if counts.levels == 1:
            yield from self._collect(st, ranks, 1, 1)
            return
        yield from self._collect(st, ranks, 1, 2)
        yield from self._send(st, ranks, 2)
        yield from self._collect(st, ranks, 2, 2)

    def _collect(self, st: StageWork, ranks: list[int], level: int, levels: int) -> Generator[Any, Any, None]:
        """``S3Exchange._collect`` of the configured exchange version (module doc)."""
        if self.polling == "get":
            for r in ranks:  # s3-v1 is simulated at small W only (per_class 1)
                yield from self._collect_v1(st, r, level, levels)
        else:
            yield from self._collect_listed(st, ranks, level, levels)

    def _reader(self, st: StageWork, r: int, level: int, levels: int) -> _Reader | None:
        """Rank ``r``'s view of the level-``level`` objects it reads: how many, their weights."""
        xid = st.id
        board = self.boards[xid, level]
        counts = self.exchanges[xid]
        if levels == 1:
            is_sender = r in board.list_group
            n_src = len(board.list_group) - is_sender
            if n_src <= 0:
                return None
            pw = self.pairs[xid]
            total = board.total_weight - (float(pw.x[r]) if is_sender else 0.0)
            return _Reader(board, n_src, total * float(pw.m[r]), float(pw.m[r]), own=r if is_sender else None)
        sources = self._sources(st, r, level, levels)
        if not sources:
            return None
        pw = self.pairs[xid]
        pos, n_col, y = self.grid[xid]
        g = len(n_col)
        if level == 1:
            w = pw.level1(pw.x[sources], float(n_col[pos[r] % g]))
        else:
            w = float(pw.m[r]) * y[[pos[s] for s in sources]]
        weights = dict(zip(sources, (float(v) for v in w), strict=True))
        del counts
        return _Reader(board, len(sources), float(sum(weights.values())), 1.0, pending=weights)

    def _collect_listed(
        self, st: StageWork, ranks: list[int], level: int, levels: int
    ) -> Generator[Any, Any, None]:
        """s3-v2: per round one LIST per pending group prefix, the GETs of what it listed (in the
        background), an abort HEAD at most once per second of waiting, a jittered backoff sleep.
        ``ranks[0]`` reads; the others of its class (``ranks``) are counted alike."""
        xid = st.id
        r, mult = ranks[0], len(ranks)
        counts = self.exchanges[xid]
        reader = self._reader(st, r, level, levels)
        if reader is None:
            return
        data_total = float(sum(counts.data_gets[level][q] for q in ranks))
        g = grid_width(len(st.receivers)) if levels == 2 else 1
        range_bytes = self.piece[xid] * g
        index = counts.get_index > 0  # keys overflowed: a tail GET per object first
        cpu = self.prof.s3_request_cpu_s
        delay = POLL_MIN_S
        fetched = self.env.now  # when the GETs started so far are done
        self.abort_checked.setdefault(r, self.env.now)
        while reader.left:
            n_ready, weight = reader.peek()
            if not cpu and not n_ready:
                delay = yield from self._idle_lists(xid, r, reader, delay, mult)
                continue
            n_groups = reader.groups()
            n_ready, weight = reader.take()
            t = self.req("list", n_groups, r, xid=xid, mult=mult)
            n_req = n_groups
            if n_ready:
                gt = 0.0
                if index:
                    gt = self.req("get", n_ready, r, xid=xid, count_as="get_index", at=t, mult=mult)
                    n_req += n_ready
                # expected (fractional) GETs: the rounding remainder carries over the exchange's readers
                if reader.total > 0:
                    self.data_owed[xid] += data_total * weight / reader.total
                n_data = int(round(self.data_owed[xid]))
                self.data_owed[xid] -= n_data
                gt += self.req("get", n_data, r, nbytes=range_bytes * weight, xid=xid,
                               count_as="get_data", at=t + gt, shared_by=mult)  # fmt: skip
                n_req += n_data
                fetched = max(fetched, self.env.now + t + gt)
            if reader.left:
                if self._abort_due(r, t):
                    t += self.req("head", 1, r, xid=xid, at=t, mult=mult)
                    n_req += 1
                t += delay * float(self.prng.uniform(0.5, 1.0))
                delay = min(delay * 2, POLL_MAX_S)
            if cpu:
                yield from self.cpu_work(n_req * cpu)
            yield self.env.timeout(t)
        if fetched > self.env.now:
            yield self.env.timeout(fetched - self.env.now)

    def _idle_lists(
        self, xid: int, r: int, reader: _Reader, delay: float, mult: int = 1
    ) -> Generator[Any, Any, float]:
        """s3-v2 without per-request CPU: wait until one of the reader's pending objects is written and
        count the rounds that found nothing meanwhile (one LIST per pending group each, an abort HEAD per
        second)."""
        p = self.prof
        start = self.env.now
        n_groups = reader.groups()
        yield reader.board.next_write(reader.keys())
        until = self.env.now
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
        lists, heads = rounds * n_groups * mult, heads * mult
        self.requests["list"] += lists
        self.requests["head"] += heads
        self.xstats[xid]["list"] += lists
        self.xstats[xid]["head"] += heads
        self.puts.admit(until, lists)
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
        if self.per_class > 1:
            self.notes.append(
                f"simulated every {self.per_class}th rank, each standing for {self.per_class} ranks (W={self.world})"
            )
        notes = sorted(set(self.notes))
        if any(s.spilled for s in self.per_stage.values()):
            notes.append(
                "some stages ask a worker for more than its budget (the function's memory less the runtime's): "
                "they spill to /tmp"
            )
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
