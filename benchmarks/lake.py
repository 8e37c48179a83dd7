"""The lake benchmarks in one run: many small files, Iceberg and Delta scans, each against its peers.

    make bench-lake                                  # installs the lake extra and Polars, then runs this
    python benchmarks/lake.py --sf 0.1 --workers 2 --files 500

Runs, in this order and in one process:

- ``benchmarks/lake_files.py``: ``--files`` Parquet files of lineitem, Squall warm at W vs DuckDB warm
  (goal: at most 1.5 times), and planning seconds per 1,000 files (cold: listing and footers; warm: footers cached);
- ``benchmarks/lake_iceberg.py``: an Iceberg lineitem (pyiceberg SQL catalog, month partitions) through
  ``catalogs=``, vs DuckDB over its data files and Polars ``scan_iceberg``;
- ``benchmarks/lake_delta.py``: a Delta lineitem (deltalake, year partitions, appends and a delete) vs
  deltalake's own engine, DuckDB over its active files and Polars ``scan_delta``.

Polars columns appear when Polars is installed. Every answer is checked; a differing one is printed as such.
Returns non-zero when a section found a differing answer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lake_delta
import lake_files
import lake_iceberg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print("== many small files")
    lake_files.run(args.files, args.sf, args.workers, args.repeat)
    common = ["--sf", str(args.sf), "--workers", str(args.workers), "--repeat", str(args.repeat)]
    print("\n== Iceberg")
    failed = lake_iceberg.main(common)
    print("\n== Delta")
    failed |= lake_delta.main(common)
    return failed


if __name__ == "__main__":
    sys.exit(main())
