"""TPC-H at SF100, SF1000, SF10000 on W = 16 … 4,096 Lambda workers, as the scale model predicts.

    python benchmarks/scale.py [--out benchmarks/scale-out] [--sf 100,1000,10000] [--queries 1,3,…]
                               [--workers 16,32,…,4096] [--memory 4096] [--version s3-v2|s3-v1|target]

Each query is planned by the real planner over TPC-H SF1 (``$SQUALL_TPCH_CACHE/sf1``) for 4 workers,
with its size thresholds scaled so that it picks the plan it would pick at SF1000;
the calibration's TPC-H profile (stage output sizes at SF0.1 and SF1, same plan signature) gives each
stage's growth exponent, and :func:`squall.driver.forecast.scale.workload.scaled` spreads the scans of the target
SF evenly over W ranks. The ``aws`` profile's model (see ``squall.driver.forecast.scale.params``) then predicts
time, cost and requests. Writes into ``--out``: ``tables.txt`` (what it prints), ``latency_sf<SF>.png``,
``cost_sf<SF>.png`` (per query, vs W), ``pareto_sf<SF>.png`` (cost vs latency, every query and W, the
front marked) and ``results.json``; prints the table per SF with the best W (cheapest within 10 % of the fastest, only W
whose invocations stay under Lambda's 900 s) beside the published anchors: Starling (SIGMOD 2020)
TPC-H SF1000 ≈ $0.26 per query on Lambda + S3, Athena $5 per TB scanned.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

STARLING_SF1000_USD = 0.26
ATHENA_USD_PER_TB = 5.0
LAMBDA_LIMIT_S = 900.0


def workloads(data: str, queries: list[int]) -> dict[int, Any]:
    """Per query: (template plan, SF1 sizes, exponents) from the planner and the calibration."""
    import squall
    from squall import tpch
    from squall.driver.forecast.scale import load_calibration
    from squall.driver.forecast.scale.calibrate import PLAN_AS_SF, large_sf_options, signature
    from squall.driver.forecast.scale.workload import StageSize, StageSizes, exponents_between

    cal = load_calibration()
    profiles = cal.tpch.get("queries", {})
    out: dict[int, Any] = {}
    # plan as the real planner would at SF1000 (its size thresholds scaled, see calibrate.large_sf_options)
    con = squall.connect(data=data, workers=4, planner_options=large_sf_options(1.0, PLAN_AS_SF))
    try:
        for q in queries:
            plan = con.plan(tpch.query(q))
            prof = profiles.get(str(q))
            if prof and prof["signature"] == signature(plan) and "1" in prof["sizes"]:
                big = StageSizes(
                    {int(k): StageSize(*v) for k, v in prof["sizes"]["1"].items()}, "TPC-H SF1 profile"
                )
                small = StageSizes({int(k): StageSize(*v) for k, v in prof["sizes"].get("0.1", {}).items()})
                exps = exponents_between(small, big, 10.0)
            else:
                big, exps = None, {}
                print(f"Q{q}: no matching size profile, guessing stage sizes", file=sys.stderr)
            out[q] = (plan, big, exps)
    finally:
        con.close()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from squall.driver.forecast.scale import PlatformConfig, estimate_workload, load_calibration
    from squall.driver.forecast.scale.workload import guess_sizes, scaled

    cal = load_calibration()
    queries = [int(q) for q in args.queries.split(",")]
    plans = workloads(os.path.join(args.data, "sf1"), queries)
    results: dict[str, Any] = {}
    started = time.perf_counter()
    for sf in [float(s) for s in args.sf.split(",")]:
        for q, (plan, sizes, exps) in plans.items():
            for w in [int(x) for x in args.workers.split(",")]:
                t0 = time.perf_counter()
                work = scaled(plan, sizes or guess_sizes(plan), w, sf / 1.0, exps)
                cfg = PlatformConfig(workers=w, memory_mb=args.memory, exchange_version=args.version)
                est = estimate_workload(work, cfg, cal)
                longest = max(s.end_s for s in est.per_stage)
                results[f"{sf:g}/{q}/{w}"] = {
                    "sf": sf, "query": q, "workers": w, "time_s": est.time_s, "cost_usd": est.cost_usd,
                    "requests": est.requests, "bytes_scanned": work.bytes_scanned,
                    "feasible": longest < LAMBDA_LIMIT_S, "startup_s": est.startup_s,
                    "gb_seconds": est.cost["gb_seconds"], "notes": est.notes,
                    "cost_parts": {k: v for k, v in est.cost.items() if k.endswith("_usd")},
                }  # fmt: skip
                print(f"SF{sf:g} Q{q} W={w}: {est.time_s:.1f} s ${est.cost_usd:.4f} "
                      f"({time.perf_counter() - t0:.1f} s to simulate)", file=sys.stderr, flush=True)  # fmt: skip
    print(
        f"simulated {len(results)} points in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return results


def best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    from squall.driver.forecast.scale import best_workers

    ok = [r for r in rows if r["feasible"]]
    if not ok:
        return None
    w = best_workers([(r["workers"], r["time_s"], r["cost_usd"]) for r in ok])
    return next(r for r in ok if r["workers"] == w)


def tables(results: dict[str, Any]) -> str:
    lines = []
    by_sf: dict[float, list[dict[str, Any]]] = {}
    for r in results.values():
        by_sf.setdefault(r["sf"], []).append(r)
    for sf, rows in sorted(by_sf.items()):
        ws = sorted({r["workers"] for r in rows})
        qs = sorted({r["query"] for r in rows})
        lines.append(f"\n## TPC-H SF{sf:g}: mean over {len(qs)} queries (model, aws profile)")
        lines.append(
            f"{'W':>6} {'time s':>8} {'$/query':>9} {'GET+PUT/query':>14} {'retries':>8} {'feasible':>9}"
        )
        for w in ws:
            sel = [r for r in rows if r["workers"] == w]
            reqs = sum(sum(v for k, v in r["requests"].items() if k not in ("retries", "status_put", "abort_head"))
                       for r in sel) / len(sel)  # fmt: skip
            lines.append(f"{w:>6} {sum(r['time_s'] for r in sel) / len(sel):>8.1f} "
                         f"{sum(r['cost_usd'] for r in sel) / len(sel):>9.4f} {reqs:>14.0f} "
                         f"{sum(r['requests'].get('retries', 0) for r in sel) / len(sel):>8.0f} "
                         f"{sum(r['feasible'] for r in sel):>5}/{len(sel)}")  # fmt: skip
        lines.append(
            "best W per query (cheapest within 10 % of the fastest); Athena = $5/TB of the bytes scanned:"
        )
        lines.append(f"{'query':>6} {'best W':>7} {'time s':>8} {'$/query':>9} {'Athena $':>9}")
        total_cost = 0.0
        for q in qs:
            b = best([r for r in rows if r["query"] == q])
            if b is None:
                lines.append(f"{'Q' + str(q):>6} {'-':>7}  (no W finishes within Lambda's 900 s)")
                continue
            total_cost += b["cost_usd"]
            athena = b["bytes_scanned"] / 1e12 * ATHENA_USD_PER_TB
            lines.append(
                f"{'Q' + str(q):>6} {b['workers']:>7} {b['time_s']:>8.1f} {b['cost_usd']:>9.4f} {athena:>9.4f}"
            )
        lines.append(f"mean $/query at best W: {total_cost / len(qs):.4f}"
                     + (f"   (Starling SF1000 ≈ ${STARLING_SF1000_USD}/query)" if sf == 1000 else ""))  # fmt: skip
    return "\n".join(lines)


def charts(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    by_sf: dict[float, list[dict[str, Any]]] = {}
    for r in results.values():
        by_sf.setdefault(r["sf"], []).append(r)
    for sf, rows in sorted(by_sf.items()):
        qs = sorted({r["query"] for r in rows})
        cmap = plt.get_cmap("tab20", max(len(qs), 1))
        for metric, label, fname in (
            ("time_s", "latency (s)", "latency"),
            ("cost_usd", "cost per query (USD)", "cost"),
        ):
            fig, ax = plt.subplots(figsize=(10, 6))
            for i, q in enumerate(qs):
                sel = sorted((r for r in rows if r["query"] == q), key=lambda r: r["workers"])
                ax.plot([r["workers"] for r in sel], [r[metric] for r in sel], marker="o", ms=3,
                        color=cmap(i), label=f"Q{q}", ls="-" if i < 11 else "--")  # fmt: skip
                b = best(sel)
                if b is not None:
                    ax.plot([b["workers"]], [b[metric]], marker="*", ms=12, color=cmap(i), mec="black")
            if metric == "cost_usd" and sf == 1000:
                ax.axhline(STARLING_SF1000_USD, color="grey", ls=":", label="Starling SF1000 $0.26")
            if metric == "time_s" and max(r["time_s"] for r in rows) > LAMBDA_LIMIT_S / 3:
                ax.axhline(LAMBDA_LIMIT_S, color="red", ls=":", label="Lambda 900 s limit")
            ax.set_xscale("log", base=2)
            ws = sorted({r["workers"] for r in rows})
            ax.set_xticks(ws, [str(w) for w in ws])
            ax.set_yscale("log")
            ax.set_xlabel("workers W")
            ax.set_ylabel(label)
            ax.set_title(f"TPC-H SF{sf:g} on Lambda: {label} vs W (model; ★ = best W)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(ncol=2, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
            fig.tight_layout()
            path = out / f"{fname}_sf{sf:g}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            paths.append(path)
        fig, ax = plt.subplots(figsize=(8, 6))
        pts = [(r["time_s"], r["cost_usd"], r["workers"]) for r in rows if r["feasible"]]
        sc = ax.scatter(
            [p[0] for p in pts], [p[1] for p in pts], c=[math.log2(p[2]) for p in pts], cmap="viridis", s=14
        )
        # the front: for the suite, mean over queries per W
        ws = sorted({r["workers"] for r in rows})
        mean = [(sum(r["time_s"] for r in rows if r["workers"] == w) / len(qs),
                 sum(r["cost_usd"] for r in rows if r["workers"] == w) / len(qs), w) for w in ws]  # fmt: skip
        front = [m for m in mean if not any(o[0] <= m[0] and o[1] <= m[1] and o != m for o in mean)]
        ax.plot([m[0] for m in mean], [m[1] for m in mean], color="black", lw=1, label="suite mean per W")
        ax.plot([m[0] for m in front], [m[1] for m in front], "o", color="red", mfc="none", ms=10,
                label="Pareto front (suite mean)")  # fmt: skip
        for t, c, w in mean:
            ax.annotate(f"W={w}", (t, c), fontsize=7, xytext=(4, 4), textcoords="offset points")
        if sf == 1000:
            ax.axhline(STARLING_SF1000_USD, color="grey", ls=":", label="Starling SF1000 $0.26")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("latency (s)")
        ax.set_ylabel("cost per query (USD)")
        ax.set_title(f"TPC-H SF{sf:g}: cost vs latency, every query and W (model)")
        fig.colorbar(sc, ax=ax, label="log2 W")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"pareto_sf{sf:g}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    from squall import tpch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).with_name("scale-out")))
    ap.add_argument("--sf", default="100,1000,10000")
    ap.add_argument("--queries", default=",".join(str(q) for q in tpch.QUERY_NUMBERS))
    ap.add_argument("--workers", default="16,32,64,128,256,512,1024,2048,4096")
    ap.add_argument("--memory", type=int, default=4096)
    ap.add_argument(
        "--version",
        default="s3-v2",
        help="exchange version: request formulas and polling "
        "(s3-v2: today's exchange; s3-v1: before issue 15; target)",
    )
    ap.add_argument("--data", default=os.environ.get("SQUALL_TPCH_CACHE", "/work/tpch-cache"))
    ap.add_argument("--from-json", default="", help="redo tables and charts from a results.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        results = run(args)
        (out / "results.json").write_text(json.dumps(results, indent=0))
    text = tables(results)
    print(text)
    (out / "tables.txt").write_text(text + "\n")
    for p in charts(results, out):
        print(f"chart: {p}")


if __name__ == "__main__":
    main()
