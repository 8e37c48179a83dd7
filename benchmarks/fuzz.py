"""Differential fuzzing of Squall against DuckDB, longer than the CI budget.

    python benchmarks/fuzz.py --queries 10000 --seed 1 --workers 1,2,3,4 [--all-workers] [--no-save]
    python benchmarks/fuzz.py --schema tpcds --queries 1000          # TPC-DS SF0.01 instead of TPC-H

Generates ``--queries`` random read-only queries (``tests/fuzz``: seeded grammar over TPC-H SF0.01 plus
NULL-heavy twins, or with ``--schema tpcds`` over TPC-DS SF0.01), runs each on DuckDB and on Squall (query i
at W = workers[i % len]; ``--all-workers``: at every W), minimises every failure and saves it as
``tests/fuzz/cases/NNN.sql`` (its header names the schema, so ``test_fuzz_cases.py`` replays it on the right
data). Prints the counts (generated, rejected by DuckDB, passed, refused by Squall with the top refusal
reasons, wrong answers, errors, internal errors), every failure with its minimised SQL, and the time. Exits 1
if anything failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from squall.errors import DataError  # noqa: E402
from squall.tpch import dataset_files, generate  # noqa: E402
from tests.fuzz.dataset import fuzz_dataset, tpcds_dataset  # noqa: E402
from tests.fuzz.generator import SCHEMAS  # noqa: E402
from tests.fuzz.oracle import Oracle  # noqa: E402
from tests.fuzz.runner import run  # noqa: E402


def _tpch(sf: float, data: str | None) -> Path:
    if data:
        return Path(data)
    base = Path(os.environ.get("SQUALL_TPCH_CACHE", ROOT / "data"))
    out = base / f"sf{sf:g}"
    try:
        dataset_files(out)
    except DataError:
        generate(sf, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first query index (resume a run)")
    ap.add_argument("--workers", default="1,2,3,4")
    ap.add_argument("--all-workers", action="store_true", help="run every query at every worker count")
    ap.add_argument(
        "--schema", choices=sorted(SCHEMAS), default="tpch", help="the data and tables (default tpch)"
    )
    ap.add_argument(
        "--sf", type=float, default=0.01, help="scale factor (the generator's row estimates assume 0.01)"
    )
    ap.add_argument(
        "--data",
        help="TPC-H folder (default $SQUALL_TPCH_CACHE/sf<SF>, generated if missing; the NULL-heavy twins go "
        "beside it) or with --schema tpcds the TPC-DS folder (default $SQUALL_TPCH_CACHE/tpcds-sf<SF>, "
        "generated if missing)",
    )
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="do not write tests/fuzz/cases/NNN.sql")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    workers = tuple(int(w) for w in args.workers.split(",") if w.strip())
    schema = SCHEMAS[args.schema]
    if schema.name == "tpcds":
        data = Path(args.data) if args.data else tpcds_dataset(args.sf)
    else:
        data = fuzz_dataset(_tpch(args.sf, args.data))
    start = time.perf_counter()
    with Oracle(data, workers, schema) as oracle:
        stats = run(
            oracle,
            args.seed,
            args.queries,
            start=args.start,
            cycle=not args.all_workers,
            minimize_failures=not args.no_minimize,
            save=not args.no_save,
            log=None if args.quiet else lambda line: print(line, flush=True),
        )
    print(
        f"{schema.name}: seed {args.seed}, queries {args.start}..{args.start + args.queries - 1}, "
        f"workers {args.workers}"
        f"{' (each query at every W)' if args.all_workers else ' (cycling)'}, {time.perf_counter() - start:.1f} s"
    )
    print(stats.summary(), flush=True)
    return 1 if any(stats.counts[k] for k in ("wrong", "error", "internal")) else 0


if __name__ == "__main__":
    sys.exit(main())
