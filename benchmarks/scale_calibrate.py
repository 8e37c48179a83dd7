"""Measure the scale model's compute rates and TPC-H stage sizes here; write them as a calibration JSON.

``python benchmarks/scale_calibrate.py [--data /work/tpch-cache] [--out FILE] [--queries 1,3,6]``
(the default ``--out`` is the calibration shipped in the package, ``driver/forecast/scale/calibration.json``)

1. **Rates**: every TPC-H query runs on the local platform with two workers (one DuckDB thread each)
   over SF1 (the real stage SQL on real splits, through the public API ``squall.connect``); each
   stage's ``compute_s`` (slowest rank) and rows per rank (scanned + received) from
   ``Result.stats["stages"]`` feed a per-shape fit ``compute_s = overhead + rows / rate`` (overhead:
   the median time of stages under 1,000 rows).
2. **Stage sizes**: every query runs with 4 workers at SF0.1 and SF1, planned as if the data were
   SF1000 (the planner's size thresholds divided by 1,000 resp. 10,000:
   :func:`squall.driver.forecast.scale.calibrate.large_sf_options`), so both runs have the plan structure the
   real planner picks at SF1000; each stage's output rows and Arrow bytes are kept with that plan's
   stage signature, so :func:`squall.driver.forecast.scale.workload.scaled` can grow them to SF100…SF10000.

Data: ``<data>/sf0.1`` and ``<data>/sf1`` (``SQUALL_TPCH_CACHE``; ``tpchgen-cli`` writes them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform as pyplatform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import squall
from squall import tpch
from squall.driver.forecast import scale
from squall.driver.forecast.scale.calibrate import PLAN_AS_SF, large_sf_options, signature
from squall.driver.forecast.scale.calibration import SHAPES, Calibration, load_calibration
from squall.driver.forecast.scale.workload import stage_shape


def measure_rates(
    data: str, queries: list[int], sf: str = "sf1"
) -> tuple[dict[str, float], float, list[Any]]:
    """Per-shape rows/s of one DuckDB thread (two workers, one thread each) and the per-stage overhead."""
    points: list[tuple[str, float, float]] = []
    con = squall.connect(data=os.path.join(data, sf), workers=2)
    try:
        con.sql(tpch.query(6))  # warm-up
        for q in queries:
            sql = tpch.query(q)
            plan = con.plan(sql)
            res = con.sql(sql)
            for s, st in zip(plan.stages, res.stats["stages"], strict=True):
                rows = float(st["rows_scanned"] + st["rows_in"]) / max(1, int(st["ranks"]))
                points.append((stage_shape(s), rows, float(st["compute_s"])))
    finally:
        con.close()
    small = [t for _s, rows, t in points if rows < 1000]
    overhead = statistics.median(small) if small else 0.004
    rates: dict[str, float] = {}
    for shape in SHAPES:
        pts = [(rows, t) for s, rows, t in points if s == shape and rows >= 1000]
        busy = sum(max(t - overhead, 1e-6) for _r, t in pts)
        if pts and busy > 0:
            rates[shape] = sum(r for r, _t in pts) / busy
    fallback = statistics.median(rates.values()) if rates else 1e7
    for shape in SHAPES:
        rates.setdefault(shape, fallback)
    return rates, overhead, points


def measure_sizes(
    data: str, queries: list[int], workers: int = 4, timeout_s: float | None = None,
    out: dict[str, Any] | None = None, save: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """Per query: stage signature and each stage's (rows_out, bytes_out) at SF0.1 and SF1.

    ``out``: profiles measured before (kept for queries whose runs fail now); a query that fails or runs
    past ``timeout_s`` is reported on stderr and keeps its old profile. ``save(out)`` after each run."""
    old = dict(out or {})
    fresh: dict[str, Any] = {}
    for sf in ("1", "0.1"):  # SF1 first: its plan is the signature benchmarks/scale.py matches
        con = squall.connect(
            data=os.path.join(data, f"sf{sf}"), workers=workers, planner_options=large_sf_options(float(sf))
        )
        try:
            for q in queries:
                sql = tpch.query(q)
                plan = con.plan(sql)
                entry = fresh.setdefault(
                    str(q),
                    {"workers": workers, "plan_as_sf": PLAN_AS_SF, "signature": signature(plan), "sizes": {}},
                )
                if entry["signature"] != signature(plan):
                    entry.setdefault("mismatch", []).append(sf)
                    continue
                t0 = time.perf_counter()
                try:
                    res = con.sql(sql, timeout=timeout_s)
                except squall.SquallError as exc:
                    print(f"Q{q} SF{sf}: {str(exc).splitlines()[0]} (keeping the old profile)", file=sys.stderr,
                          flush=True)  # fmt: skip
                    entry["failed"] = True
                    continue
                entry["sizes"][sf] = {str(st["stage"]): [st["rows_out"], st["bytes_out"]]
                                      for st in res.stats["stages"]}  # fmt: skip
                print(f"Q{q} SF{sf}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
                merged = {
                    **old,
                    **{k: v for k, v in fresh.items() if not v.get("failed") and "1" in v["sizes"]},
                }
                if save is not None:
                    save(merged)
        finally:
            con.close()
    return {**old, **{k: v for k, v in fresh.items() if not v.get("failed") and "1" in v["sizes"]}}


def main(argv: list[str] | None = None) -> None:
    """Command line entry point (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("SQUALL_TPCH_CACHE", "/work/tpch-cache"))
    ap.add_argument("--out", default=str(Path(scale.__file__).with_name("calibration.json")))
    ap.add_argument("--queries", default=",".join(str(q) for q in tpch.QUERY_NUMBERS))
    ap.add_argument("--skip-sizes", action="store_true", help="keep the TPC-H size profiles already there")
    ap.add_argument(
        "--skip-rates",
        action="store_true",
        help="keep the compute rates already there (a loaded machine: times are not load-independent)",
    )
    ap.add_argument("--timeout", type=float, default=None, help="per-query limit of the size runs (s)")
    args = ap.parse_args(argv)
    queries = [int(q) for q in args.queries.split(",")]
    base = load_calibration(args.out) if Path(args.out).exists() else Calibration()
    t0 = time.perf_counter()
    load = os.getloadavg()
    points: list[Any] = []
    if not args.skip_rates:
        rates, overhead, points = measure_rates(args.data, queries)
        base.rates = {k: round(v, 1) for k, v in rates.items()}
        base.stage_overhead_s = round(overhead, 5)
        stale = ("rates_kept", "contended_rates")  # notes of an earlier calibration's rates
        base.meta = {k: v for k, v in base.meta.items() if k not in stale}
        base.meta = {**base.meta, "rates_load_average": [round(x, 1) for x in load],
                     "rates_note": "per-shape rows/s of one DuckDB thread: every query on two workers x 1 thread "
                     "over SF1, each stage's compute_s (slowest rank) against its rows per rank",
                     "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "machine": f"{pyplatform.machine()} {os.cpu_count()} cores, {pyplatform.python_version()}",
                     "threads_per_worker": 1, "stages_measured": len(points),
                     "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    if not args.skip_sizes:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def save(profiles: dict[str, Any]) -> None:
            base.tpch = {"profiled_sf": [0.1, 1], "queries": profiles}
            base.meta = {**base.meta, "tpch_profiles": f"Q{','.join(sorted(profiles, key=int))} planned as at "
                         f"SF{PLAN_AS_SF:g} (calibrate.large_sf_options), sizes at SF0.1 and SF1, {stamp}"}  # fmt: skip
            Path(args.out).write_text(base.to_json() + "\n")

        save(measure_sizes(args.data, queries, timeout_s=args.timeout,
                           out=base.tpch.get("queries", {}), save=save))  # fmt: skip
    Path(args.out).write_text(base.to_json() + "\n")
    print(f"wrote {args.out}: rates {base.rates}, overhead {base.stage_overhead_s} s")


if __name__ == "__main__":
    main()
