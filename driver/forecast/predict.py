"""The cost of a query before it runs: the scale model (:mod:`squall.driver.forecast.scale`) for a platform.

Which profile prices a plan:

- ``lambda``: the ``aws`` profile with the platform's memory, architecture, region and fan-out;
- ``lambda-local``: the ``emulator-here`` profile (the emulator and moto on this machine);
- every other platform (``local``, ``fabric``): the ``aws`` profile, labelled "on Lambda at W=…":
  what the same plan would cost as Lambda workers (the model does not price local processes).

:class:`Estimator` caches one :class:`~squall.driver.forecast.scale.Estimate` per (plan, configuration): a plan is
simulated once, however often it is explained or run (``computed`` counts the simulations).

``workers="auto"`` (:meth:`Estimator.auto_workers`): on the lambda platforms W is chosen per query —
the model sweeps W = 1, 2, 4, … up to the platform's cap over the plan re-spread to each W
(:func:`~squall.driver.forecast.scale.workload.scaled`, stage sizes guessed by shape) and takes
:func:`~squall.driver.forecast.scale.best_workers` (the cheapest W within 10 % of the fastest) among the W at
which no worker is expected to need more than its budget (:mod:`~squall.driver.forecast.scale.memory`; when no W
fits, among all, and the reason says so). The local and fabric platforms keep a warm pool of fixed size, so
there "auto" is the machine's cores, chosen once (:func:`fixed_auto_workers`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from squall.driver.forecast.scale import (
    Calibration,
    Estimate,
    PlatformConfig,
    best_workers,
    estimate,
    estimate_workload,
    load_calibration,
)
from squall.driver.forecast.scale.memory import MemoryNeed, memory_need
from squall.driver.forecast.scale.requests import CURRENT as EXCHANGE_VERSION
from squall.driver.forecast.scale.workload import from_plan, guess_sizes, scaled
from squall.driver.platforms.memory import lambda_worker_budget_mb
from squall.operators.memory import human_bytes
from squall.plan import Plan

#: platform name -> the scale model's profile; other platforms are priced as Lambda (``aws``)
PROFILES = {"lambda": "aws", "lambda-local": "emulator-here"}
#: platforms where W is chosen per query by ``workers="auto"``
PER_QUERY_W = frozenset(PROFILES)
#: request kinds shown by explain and ``stats["estimate"]`` (what S3 bills for the exchange and scans)
SHOWN_REQUESTS = ("put", "get_data", "get_index", "get_miss", "scan_get", "list", "head")
CACHE_SIZE = 128
#: the largest W whose estimate ``Result.stats`` computes (about 1-5 s of model time at W=1,024 here)
STATS_MAX_W = 1024


def profile_for(platform: str) -> str:
    """The scale model's profile that prices ``platform`` (``aws`` unless it is ``lambda-local``)."""
    return PROFILES.get(platform, "aws")


def fixed_auto_workers(cap: int) -> int:
    """``workers="auto"`` on a platform with a warm pool of fixed size: the machine's cores (≤ ``cap``)."""
    return max(1, min(os.cpu_count() or 1, cap))


def auto_candidates(cap: int) -> list[int]:
    """W = 1, 2, 4, … ≤ ``cap``, and ``cap`` itself."""
    out, w = [], 1
    while w < cap:
        out.append(w)
        w *= 2
    return [*out, max(1, cap)]


def _fingerprint(plan: Plan) -> str:
    return hashlib.sha1(plan.to_json().encode()).hexdigest()


@dataclass(frozen=True)
class AutoChoice:
    """What ``workers="auto"`` chose for one query, and the one-line reason explain prints."""

    workers: int
    reason: str
    estimates: dict[int, Estimate]


class Estimator:
    """Estimates for one platform configuration (``config``'s W is replaced by each plan's), cached.

    ``platform``: the platform's name (chooses the profile, see module doc). Thread-safe; the stats path
    uses :meth:`start` to simulate in the background while the query runs.
    """

    def __init__(self, platform: str, config: PlatformConfig | None = None,
                 calibration: Calibration | None = None) -> None:  # fmt: skip
        self.platform = platform
        self.profile = profile_for(platform)
        base = config or PlatformConfig(workers=1)
        self.config = replace(base, profile=self.profile, exchange_version=EXCHANGE_VERSION)
        self._calibration = calibration
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, ...], Future[Estimate]] = OrderedDict()
        self._auto: OrderedDict[tuple[str, ...], AutoChoice] = OrderedDict()
        self.computed = 0  # simulations run (the cache's misses)

    @property
    def calibration(self) -> Calibration:
        if self._calibration is None:
            self._calibration = load_calibration()
        return self._calibration

    @property
    def on_lambda(self) -> bool:
        """True when the estimate is for the platform itself, False when it is "what Lambda would cost"."""
        return self.platform in PROFILES

    def label(self, workers: int) -> str:
        if self.on_lambda:
            return f"{self.platform} at W={workers} (model profile {self.profile})"
        return f"on Lambda at W={workers} (this query runs on {self.platform}; model profile {self.profile})"

    def _future(self, plan: Plan) -> tuple[Future[Estimate], bool]:
        key = (_fingerprint(plan), repr(self.config))
        with self._lock:
            fut = self._cache.get(key)
            if fut is not None:
                self._cache.move_to_end(key)
                return fut, False
            fut = Future()
            self._cache[key] = fut
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            self.computed += 1
            return fut, True

    def _compute(self, plan: Plan, fut: Future[Estimate]) -> None:
        try:
            fut.set_result(estimate(plan, replace(self.config, workers=plan.world_size), self.calibration))
        except BaseException as exc:  # the waiter re-raises it
            fut.set_exception(exc)

    def estimate(self, plan: Plan) -> Estimate:
        """The model's prediction for ``plan`` (simulated once per plan and configuration)."""
        fut, mine = self._future(plan)
        if mine:
            self._compute(plan, fut)
        return fut.result()

    def start(self, plan: Plan) -> Callable[[float | None], Estimate | None]:
        """Simulate ``plan`` in a background thread; the returned function waits for it (None on error)."""
        fut, mine = self._future(plan)
        if mine:
            threading.Thread(
                target=self._compute, args=(plan, fut), name="squall-estimate", daemon=True
            ).start()

        def wait(timeout: float | None = None) -> Estimate | None:
            try:
                return fut.result(timeout)
            except Exception:
                return None

        return wait

    def auto_workers(self, template: Plan, cap: int) -> AutoChoice:
        """The model's best W for the query of ``template`` (a plan at any W), among W = 1, 2, 4, … ≤ cap."""
        key = (_fingerprint(template), repr(self.config), str(cap))
        with self._lock:
            hit = self._auto.get(key)
        if hit is not None:
            return hit
        sizes = guess_sizes(template)
        budget = float(memory_plan(self)[1] << 20)
        estimates: dict[int, Estimate] = {}
        needs: dict[int, float] = {}
        for w in auto_candidates(cap):
            work = scaled(template, sizes, w, 1.0)
            estimates[w] = estimate_workload(work, replace(self.config, workers=w), self.calibration)
            needs[w] = memory_need(work).peak
        fitting = {w: e for w, e in estimates.items() if needs[w] <= budget}
        w = best_workers(fitting or estimates)
        fastest = min(fitting or estimates, key=lambda k: estimates[k].time_s)
        e = estimates[w]
        reason = (
            f"W={w} chosen by workers='auto': the cheapest of W=1..{cap} within 10 % of the fastest "
            f"(W={fastest}, {estimates[fastest].time_s:.2f} s); predicted {e.time_s:.2f} s, ${e.cost_usd:.6f}"
        )
        reason += _memory_reason(needs, set(fitting), budget, w)
        choice = AutoChoice(w, reason, estimates)
        with self._lock:
            self._auto[key] = choice
            while len(self._auto) > CACHE_SIZE:
                self._auto.popitem(last=False)
        return choice


#: Lambda function sizes ``workers="auto"`` suggests when no W fits the deployed one (MB; 10,240 is Lambda's most)
FUNCTION_MEMORY_MB = (1769, 3008, 4096, 6144, 8192, 10240)


def _memory_reason(needs: dict[int, float], fitting: set[int], budget: float, chosen: int) -> str:
    """What the memory budget did to ``workers="auto"``'s choice (empty when every W fits)."""
    if len(fitting) == len(needs):
        return ""
    if not fitting:
        least = min(needs, key=lambda w: needs[w])
        sizes = [mb for mb in FUNCTION_MEMORY_MB if lambda_worker_budget_mb(mb) << 20 >= needs[least]]
        deploy = (
            f"; a function of {sizes[0]} MB would fit it at W={least} (the memory is set when deployed)"
            if sizes
            else ""
        )
        return (
            f"; no W up to {max(needs)} keeps a worker within its budget of {human_bytes(budget)} (at W={chosen} "
            f"a worker is expected to need {human_bytes(needs[chosen])}: it spills){deploy}"
        )
    left = sorted(w for w in needs if w not in fitting)
    return (
        f"; W={', '.join(map(str, left))} left out: a worker would need more than its budget of "
        f"{human_bytes(budget)} (at W={left[-1]}: {human_bytes(needs[left[-1]])})"
    )


def platform_config(platform: Any) -> PlatformConfig:
    """The model's configuration for a platform object (memory, architecture, region, fan-out, levels)."""
    settings: dict[str, Any] = dict(getattr(platform, "settings", None) or {})
    kwargs: dict[str, Any] = {"workers": int(getattr(platform, "world_size", 1) or 1)}
    if settings.get("memory_mb"):
        kwargs["memory_mb"] = int(settings["memory_mb"])
    if settings.get("architecture"):
        kwargs["architecture"] = str(settings["architecture"])
    if settings.get("region"):
        kwargs["region"] = str(settings["region"])
    # a lambda platform's own option (it may have no bucket, hence no exchange, while it is only planned)
    levels = getattr(platform, "exchange_levels", None)
    if levels is None:
        levels = getattr(getattr(platform, "factory", None), "levels", None)
    if levels is not None:
        kwargs["levels"] = levels
    return PlatformConfig(**kwargs)


def plan_need(plan: Plan) -> MemoryNeed:
    """What ``plan`` is expected to ask of each worker at its peak (:mod:`~squall.driver.forecast.scale.memory`;
    stage sizes guessed by shape)."""
    return memory_need(from_plan(plan))


def memory_plan(estimator: Estimator) -> tuple[int, int]:
    """The memory per worker the model plans: the Lambda function's MB it prices, and the budget of one worker
    (what a rank may use at its peak: :func:`~squall.driver.platforms.memory.lambda_worker_budget_mb`)."""
    function_mb = int(estimator.config.memory_mb)
    return function_mb, lambda_worker_budget_mb(function_mb)


def summary(est: Estimate, estimator: Estimator) -> dict[str, Any]:
    """``{"time_s", "cost_usd", "requests", "profile", "workers", "label", "memory_mb", "budget_mb",
    "exchanges"}`` (stats, the API); ``memory_mb`` is the function's memory, ``budget_mb`` a worker's budget."""
    function_mb, budget_mb = memory_plan(estimator)
    requests = {k: int(est.requests.get(k, 0)) for k in SHOWN_REQUESTS if est.requests.get(k)}
    exchanges = [
        {k: x[k] for k in ("stage", "levels", "put", "get_data", "get_index", "list")} for x in est.exchanges
    ]
    return {
        "time_s": round(est.time_s, 3),
        "cost_usd": est.cost_usd,
        "requests": requests,
        "profile": est.profile,
        "workers": est.workers,
        "label": estimator.label(est.workers),
        "memory_mb": function_mb,
        "budget_mb": budget_mb,
        # the exchanges' own requests (``requests`` also holds scans, status keys, polling), per sending stage
        "exchanges": exchanges,
    }


def format_estimate(
    est: Estimate,
    estimator: Estimator,
    reason: str | None = None,
    notes: Sequence[str] = (),
    need: MemoryNeed | None = None,
) -> str:
    """The lines ``squall explain --estimate`` prints under the plan (``notes``: the caller's, after the
    model's; ``need``: the plan's expected peak per worker, :func:`plan_need`)."""
    s = summary(est, estimator)
    reqs = ", ".join(f"{k} {v:,}" for k, v in s["requests"].items()) or "none"
    lines = [
        f"Estimate {s['label']}:",
        f"  time   {est.time_s:.2f} s (workers started after {est.startup_s:.2f} s)",
        f"  cost   ${est.cost_usd:.6f} ({est.billed_s:.1f} billed worker-seconds)",
        f"  S3     {reqs}",
        f"  memory {s['memory_mb']} MB per worker (function), budget {s['budget_mb']} MB",
    ]
    if need is not None:
        lines.append(f"         {need.line(s['budget_mb'] << 20)}")
    if reason:
        lines.append(f"  why W  {reason}")
    lines += [f"  note   {n}" for n in (*est.notes, *notes)]
    return "\n".join(lines)
