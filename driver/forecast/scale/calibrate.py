"""What calibration runs share with the model: plan signatures and planning "as if at SF1000".

The measuring itself (running real stage SQL through the public API) is
``benchmarks/scale_calibrate.py`` — it needs the SDK, which the driver may not import:
``python benchmarks/scale_calibrate.py [--data /work/tpch-cache] [--out FILE] [--queries 1,3,6]``

1. **Rates**: every TPC-H query runs on the local platform with two workers (one DuckDB thread each)
   over SF1 (the real stage SQL on real splits, through the public API ``squall.connect``); each
   stage's ``compute_s`` (slowest rank) and rows per rank (scanned + received) from
   ``Result.stats["stages"]`` feed a per-shape fit ``compute_s = overhead + rows / rate`` (overhead:
   the median time of stages under 1,000 rows).
2. **Stage sizes**: every query runs with 4 workers at SF0.1 and SF1, planned as if the data were
   SF1000 (the planner's size thresholds divided by 1,000 resp. 10,000: :func:`large_sf_options`), so
   both runs have the plan structure the real planner picks at SF1000; each stage's output rows and
   Arrow bytes are kept with that plan's stage signature, so :func:`squall.driver.forecast.scale.workload.scaled`
   can grow them to SF100…SF10000 with per-stage exponents.

Data: ``<data>/sf0.1`` and ``<data>/sf1`` (``SQUALL_TPCH_CACHE``; ``tpchgen-cli`` writes them).
"""

from __future__ import annotations

from typing import Any

from squall.driver.forecast.scale.workload import stage_shape


def signature(plan: Any) -> list[str]:
    """What must match for a size profile to apply to a plan: each stage's id, output kind and shape."""
    return [f"{s.id}:{s.output.kind}:{stage_shape(s)}" for s in plan.stages]


PLAN_AS_SF = 1000.0


def large_sf_options(data_sf: float, as_sf: float = PLAN_AS_SF) -> Any:
    """PlannerOptions whose absolute size thresholds make a plan over SF ``data_sf`` look like one over
    SF ``as_sf`` (broadcast limit, gather groups and replicated-scan rows divided by the ratio)."""
    from squall.driver.options import PlannerOptions

    base = PlannerOptions()
    ratio = as_sf / data_sf
    return PlannerOptions(
        broadcast_limit=base.broadcast_limit / ratio,
        broadcast_factor=base.broadcast_factor,
        gather_groups=base.gather_groups / ratio,
        replicated_scan_rows=base.replicated_scan_rows / ratio,
    )
