"""Skew-aware hash join (issue 13, Neo-Join) vs plain hashing on a join with one hot key, same run.

A fact table (``--fact-rows``, 30 % of the rows on one key) joined with a dimension table
(``--dim-rows``, one row per key), at W = 4 and 8, with ``PlannerOptions.skew_handling`` on and off.
Prints per exchange max/mean rows received (skew), bytes moved, and the workers' time summed over the
ranks and the slowest rank's (wall time per rank: on a 2-core machine ranks share cores, so the rows per
rank are the figure that matters). Every answer is checked against DuckDB first.

    nice -n 10 .venv/bin/python benchmarks/skew_exchange.py [--fact-rows N] [--dim-rows N] [--workers 4,8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import squall
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result
from tests.skew_data import JOIN, write_skewed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fact-rows", type=int, default=2_000_000)
    ap.add_argument("--dim-rows", type=int, default=500_000)
    ap.add_argument("--workers", default="4,8")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_skewed(Path(tmp), fact_rows=args.fact_rows, dim_rows=args.dim_rows)
        ref = duckdb.connect()
        for t in ("fact", "dim"):
            ref.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{folder}/{t}.parquet')")
        expected = ref.sql(JOIN).to_arrow_table()
        print(f"fact {args.fact_rows} rows (30 % one key), dim {args.dim_rows} rows; query: {JOIN}")
        for w in (int(x) for x in args.workers.split(",")):
            for on in (False, True):
                opts = PlannerOptions(broadcast_limit=0.0, skew_min_bytes=0.0, skew_handling=on)
                with squall.connect(data=str(folder), workers=w, planner_options=opts) as con:
                    best = None
                    for _ in range(args.repeat):
                        r = con.sql(JOIN)
                        assert_same_result(r.to_arrow(), expected, JOIN)
                        if best is None or r.stats["elapsed_s"] < best.stats["elapsed_s"]:
                            best = r
                assert best is not None
                st = best.stats
                hashed = [e for e in st["exchanges"] if e["kind"] == "hash"]
                per_rank = [p["elapsed_s"] for p in st["per_worker"]]
                label = "on " if on else "off"
                print(
                    f"W={w} skew handling {label}: elapsed {st['elapsed_s']:.2f} s, worker time sum "
                    f"{sum(per_rank):.2f} s, max {max(per_rank):.2f} s"
                )
                for e in hashed:
                    extra = ""
                    if "assignment" in e:
                        extra = (
                            f", kept local {e['rows_kept_local']} moved {e['rows_moved']}, heavy hitters "
                            f"{e['heavy_hitters']} ({e['heavy_handling']}), histogram {e['histogram_s'] * 1000:.0f} ms"
                        )
                    print(
                        f"    stage {e['stage']}: rows/rank {e['rows_per_rank']} skew {e['skew']:.2f}, "
                        f"bytes sent {e.get('bytes_sent', 0)}{extra}"
                    )


if __name__ == "__main__":
    main()
