"""``make run``: a handful of TPC-H queries on the local platform, with results, stage timings and stats.

python -m squall.demo --data data/sf1 [--workers W] [--queries 1,3,6]
"""

from __future__ import annotations

import argparse
import sys
import time

import squall
from squall import tpch
from squall.cli import _format_table

DEFAULT_QUERIES = (1, 3, 5, 6, 10, 12, 14, 19)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--queries", default=",".join(map(str, DEFAULT_QUERIES)))
    args = p.parse_args(argv)
    numbers = [int(x) for x in args.queries.split(",") if x.strip()]
    out = sys.stdout
    start = time.perf_counter()
    with squall.connect(data=args.data, workers=args.workers) as con:
        out.write(
            f"Squall {squall.__version__}: {con.workers} local workers, tables {', '.join(con.tables())}\n"
        )
        for n in numbers:
            try:
                result = con.sql(tpch.query(n))
            except squall.UserError as err:
                out.write(f"\n== TPC-H Q{n:02d} {tpch.NAMES[n]}: error: {err}\n")
                continue
            st = result.stats
            out.write(f"\n== TPC-H Q{n:02d} {tpch.NAMES[n]} — {st['elapsed_s']:.2f} s "
                      f"(plan {st['planning_s']:.2f} s), {len(st['stages'])} stages\n")  # fmt: skip
            _format_table(result.to_arrow().slice(0, 5), out)
            if result.num_rows > 5:
                out.write(f"… {result.num_rows} rows in all\n")
            for s in st["stages"]:
                out.write(
                    f"   stage {s['stage']} ({s['ranks']} ranks → {s['output']}): {s['time_s']:.3f} s, "
                    f"scanned {s['rows_scanned']:,} rows / {_human(s['bytes_scanned'])}, out {s['rows_out']:,} rows"
                    f"{'  -- ' + s['note'] if s['note'] else ''}\n"
                )
            out.write(
                f"   totals: {st['rows_scanned']:,} rows / {_human(st['bytes_scanned'])} scanned, "
                f"storage requests {st['storage_requests'] or '{}'}, exchange requests {st['exchange_requests']}\n"
            )
    out.write(f"\nall queries in {time.perf_counter() - start:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
