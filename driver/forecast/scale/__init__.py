"""Scale model: predicted time, cost and S3 requests of a query on Lambda for any W, before it runs.

``estimate(plan, config, calibration)`` simulates one query (SimPy, :mod:`.model`) and returns an
:class:`Estimate` (``time_s``, ``cost_usd``, ``requests``, ``per_stage``…); ``sweep`` runs it over
several W and ``best_workers`` applies the rule "cheapest W within 10 % of the fastest". Parameters
live in :mod:`.params` (profiles ``aws`` and ``emulator-here``), exchange request formulas in
:mod:`.requests`, compute rates and TPC-H size profiles in :mod:`.calibration` (measured here by
benchmarks/scale_calibrate.py), the plan-to-work translation and SF scaling in :mod:`.workload`.

May import: the rest of the driver below :mod:`squall.driver.forecast` (the options, the Lambda platform's
invocation tree, :mod:`squall.driver.platforms.prices`), :mod:`squall.plan` and below; never the SDK
(calibration runs through it, so it is a benchmark).

Validation: ``benchmarks/scale_validate.py`` runs lambda-local + moto here and compares with the
``emulator-here`` profile (PUT, index-GET and data-GET counts per exchange match the formulas
exactly; polling LISTs and abort HEADs are timing-dependent: the formula's one LIST per reader and level
plus one per extra round); ``benchmarks/scale.py`` sweeps TPC-H SF100…SF10000 over W with the ``aws``
profile. The model follows ``PlatformConfig.exchange_version`` (default ``s3-v2``, the exchange as it
runs today; ``s3-v1`` the exchange before issue 15).

Typical use (what ``squall explain --estimate`` and ``workers="auto"`` can call)::

    from squall.driver.forecast.scale import PlatformConfig, estimate, load_calibration
    est = estimate(con.plan(sql), PlatformConfig(workers=64), load_calibration())
    print(est.time_s, est.cost_usd, est.requests)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from squall.driver.forecast.scale.calibration import Calibration, load_calibration
from squall.driver.forecast.scale.model import MAX_RANKS, Estimate, Simulation, StageEstimate
from squall.driver.forecast.scale.params import AWS, EMULATOR_HERE, PlatformConfig, Profile, profile
from squall.driver.forecast.scale.requests import ExchangeCounts, ExchangeShape, exchange_counts
from squall.driver.forecast.scale.workload import StageSizes, Workload, from_plan, scaled
from squall.plan import Plan

__all__ = [
    "AWS",
    "EMULATOR_HERE",
    "Calibration",
    "Estimate",
    "ExchangeCounts",
    "ExchangeShape",
    "PlatformConfig",
    "Profile",
    "StageEstimate",
    "StageSizes",
    "Workload",
    "best_workers",
    "estimate",
    "estimate_workload",
    "exchange_counts",
    "from_plan",
    "load_calibration",
    "scaled",
    "sweep",
]


def estimate_workload(
    work: Workload,
    config: PlatformConfig,
    calibration: Calibration | None = None,
    *,
    profile_: Profile | str | None = None,
    seed: int = 1,
    max_ranks: int = MAX_RANKS,
) -> Estimate:
    """Simulate ``work`` (a :class:`Workload`) under ``config`` (profile: ``config.profile`` unless given).

    Above ``max_ranks`` workers (0: never) the model simulates every k-th rank, k = ⌈W / max_ranks⌉, each
    standing for the k ranks from it on (their requests and billed time counted k times): the ranks of
    a large query behave alike (its scans are spread evenly), and this keeps W = 4,096 at the cost of
    W = 512 (the estimate's notes say so)."""
    prof = profile(profile_ or config.profile)
    if config.workers != work.world:
        raise ValueError(f"workload is for {work.world} workers, config says {config.workers}")
    return Simulation(work, config, prof, calibration or load_calibration(), seed, max_ranks).run()


def estimate(
    plan: Plan,
    config: PlatformConfig | None = None,
    calibration: Calibration | None = None,
    *,
    sizes: StageSizes | None = None,
    profile_: Profile | str | None = None,
    seed: int = 1,
) -> Estimate:
    """Predicted time, cost and requests of ``plan`` on Lambda (W = ``plan.world_size``).

    ``sizes``: measured stage output sizes (``StageSizes.from_stats(result.stats)``); without them the
    model guesses by stage shape. ``config`` defaults to ``PlatformConfig(workers=plan.world_size)``.
    """
    config = config or PlatformConfig(workers=plan.world_size)
    if config.workers != plan.world_size:
        config = replace(config, workers=plan.world_size)
    return estimate_workload(from_plan(plan, sizes), config, calibration, profile_=profile_, seed=seed)


def sweep(
    workload_for: Callable[[int], Workload],
    workers: Iterable[int],
    config: PlatformConfig,
    calibration: Calibration | None = None,
    *,
    seed: int = 1,
) -> dict[int, Estimate]:
    """``estimate_workload`` for every W in ``workers`` (``workload_for(W)`` builds the work)."""
    cal = calibration or load_calibration()
    return {
        w: estimate_workload(workload_for(w), replace(config, workers=w), cal, seed=seed) for w in workers
    }


def best_workers(
    estimates: dict[int, Estimate] | Sequence[tuple[int, float, float]], slack: float = 0.10
) -> int:
    """The cheapest W whose time is within ``slack`` (10 %) of the fastest; ties: the smaller W.

    ``estimates``: {W: Estimate} or (W, time_s, cost_usd) triples.
    """
    if isinstance(estimates, dict):
        rows = [(w, e.time_s, e.cost_usd) for w, e in estimates.items()]
    else:
        rows = list(estimates)
    if not rows:
        raise ValueError("no estimates to choose from")
    fastest = min(t for _w, t, _c in rows)
    ok = [(c, w) for w, t, c in rows if t <= fastest * (1 + slack)]
    return min(ok)[1]
