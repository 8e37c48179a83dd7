"""Writes: COPY of all of lineitem to Parquet, Squall at W=1 and W=2 vs DuckDB's own COPY, in one run.

    make bench-write                                        # TPC-H SF1 (make data), W=1,2, best of 3
    python benchmarks/write.py --data data/sf1 --workers 1,2 --repeat 3

Cases (:data:`CASES`): all of ``lineitem`` as plain Parquet (a folder; DuckDB writes one file), ``lineitem``
partitioned by the year of ``l_shipdate`` (a computed column ``y``, ``PARTITION_BY (y)``: hive folders), and
the small ``nation`` (the driver's memory must not depend on the result's size). For every case and W:

- **DuckDB**: one process (this one), ``threads`` = the threads Squall's W workers use together
  (W x cores // W), ``COPY (same query over read_parquet) TO …``; best of ``--repeat`` wall seconds, and
  the CPU seconds of that process (every thread) for the same runs;
- **Squall**: a child process (``--child``) that connects with W workers (``writable=[out]``) and runs the
  ``COPY`` ``--repeat`` times: wall and CPU seconds per run (driver + workers, from ``/proc``), the phases
  of the best run (planning, the stage's scan and compute, each rank's ``COPY``, the rest: start, commit),
  the **driver's peak RSS** (``VmHWM``) — and its RSS once ready (after connecting and one warm-up query),
  so what a write adds shows apart from the libraries' memory — and **each worker's peak RSS** (``VmHWM``
  of the worker processes before the connection closes);
- **checked**: every run's output, both engines', is read back with DuckDB and its row count and
  checksums (``sum(hash(column))`` of every column; for partitioned output also the rows whose ``y``
  folder disagrees with their ``l_shipdate``) compared with the source query's. A differing run is
  printed as such and the exit status is 1: no silent wrong answer.

Prints one table: seconds, ratios Squall/DuckDB (goal at W=2: at most 1.5), CPU ratio (independent of the
machine's other load), memory (goal: driver peak flat, under 200 MB, whatever the result size). On a shared
machine look at the load average printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import best_of


@dataclass(frozen=True)
class Case:
    """One COPY: the query (``{src}`` = the table's source), its options, how to read the output back."""

    name: str
    table: str
    query: str
    options: str = "FORMAT parquet"
    partitioned: bool = False


CASES = (
    Case("lineitem", "lineitem", "SELECT * FROM {src}"),
    Case(
        "lineitem by year",
        "lineitem",
        "SELECT *, year(l_shipdate) AS y FROM {src}",
        "FORMAT parquet, PARTITION_BY (y)",
        partitioned=True,
    ),
    Case("nation", "nation", "SELECT * FROM {src}"),
)
TICK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------- checks


def source_of(data: Path, table: str) -> str:
    """DuckDB's source of a TPC-H table: ``<table>.parquet`` or a folder of files."""
    path = data / f"{table}.parquet"
    return f"read_parquet('{path if path.exists() else data / table / '*.parquet'}')"


def checksum(duck: Any, relation: str, partitioned: bool) -> tuple[Any, ...]:
    """Row count and ``sum(hash(c))`` of every column of ``relation`` (``y`` as BIGINT, and for a partitioned
    write the rows whose ``y`` is not the year of their ``l_shipdate``)."""
    columns = [c for c in duck.sql(f"SELECT * FROM {relation} LIMIT 0").columns]
    sums = [f'sum(hash("{c}"::BIGINT))' if c == "y" else f'sum(hash("{c}"))' for c in sorted(columns)]
    if partitioned:
        sums.append("count(*) FILTER (WHERE y::BIGINT <> year(l_shipdate))")
    return tuple(duck.sql(f"SELECT count(*), {', '.join(sums)} FROM {relation}").fetchall()[0])


def read_back(target: str, partitioned: bool) -> str:
    """DuckDB's relation over what a COPY wrote (a file, or every Parquet file under a folder)."""
    if target.endswith(".parquet"):
        return f"read_parquet('{target}')"
    return (
        f"read_parquet('{target.rstrip('/')}/**/*.parquet', hive_partitioning = {str(partitioned).lower()})"
    )


# -------------------------------------------------------------------------------------------- DuckDB


def duckdb_runs(data: Path, case: Case, out: Path, threads: int, repeat: int) -> dict[str, Any]:
    """DuckDB's COPY of the case in this process, best of ``repeat``; the targets of every run."""
    import duckdb

    duck = duckdb.connect(config={"threads": threads})
    query = case.query.format(src=source_of(data, case.table))
    targets: list[str] = []
    cpu: list[float] = []

    def run() -> str:
        target = str(out / f"duckdb-{case.table}-t{threads}-{len(targets)}")
        target += "/" if case.partitioned else ".parquet"
        c0 = time.process_time()
        duck.execute(f"COPY ({query}) TO '{target.rstrip('/')}' ({case.options})")
        cpu.append(time.process_time() - c0)
        targets.append(target)
        return target

    wall, _ = best_of(run, repeat)
    duck.close()
    return {"wall_s": wall, "cpu_s": min(cpu), "targets": targets}


# --------------------------------------------------------------------------------- Squall (child side)


def _status(pid: int | str, key: str) -> int:
    """A ``/proc/<pid>/status`` memory line (``VmHWM``, ``VmRSS``) in bytes (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children() -> list[int]:
    """This process's child processes (the local platform's workers)."""
    pids: list[int] = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            pids += [int(p) for p in Path(f"/proc/{os.getpid()}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return pids


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) of this process and of ``pids`` so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        except OSError:
            pass
    return total


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """The Squall side of one case at one W, in a process of its own (see module doc)."""
    import squall

    out = Path(spec["out"])
    con = squall.connect(spec["data"], workers=spec["workers"], writable=[str(out)])
    con.sql(f"SELECT count(*) FROM {spec['table']}").to_arrow()  # warm-up: workers started, planner loaded
    ready = {"rss": _status("self", "VmRSS"), "hwm": _status("self", "VmHWM")}
    runs: list[dict[str, Any]] = []

    def run() -> dict[str, Any]:
        target = f"{out}/squall-{spec['table']}-w{spec['workers']}-{len(runs)}/"
        pids = _children()
        c0, t0 = _cpu_s(pids), time.perf_counter()
        result = con.sql(f"COPY ({spec['query']}) TO '{target}' ({spec['options']})")
        answer = result.to_arrow().to_pylist()[0]
        wall = time.perf_counter() - t0
        pids = sorted(set(pids) | set(_children()))
        stats = result.stats
        stage = stats["stages"][-1]
        per_rank = stats["written"]["per_rank"]
        runs.append(
            {
                "target": target,
                "wall_s": wall,
                "cpu_s": _cpu_s(pids) - c0,
                "rows": answer["rows"],
                "files": answer["files"],
                "planning_s": stats["planning_s"],
                "stage_s": stage["time_s"],
                "write_s": [r["write_s"] for r in per_rank],
                "rank_s": [w["elapsed_s"] for w in stats["per_worker"]],
            }
        )
        return runs[-1]

    best_of(run, spec["repeat"])
    workers = {pid: _status(pid, "VmHWM") for pid in _children()}
    con.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {
        "runs": runs,
        "driver_ready_rss": ready["rss"],
        "driver_ready_hwm": ready["hwm"],
        "driver_peak": _status("self", "VmHWM"),
        "worker_peaks": sorted(workers.values()),
        "children_maxrss": children,
    }


def squall_runs(data: Path, case: Case, out: Path, workers: int, repeat: int) -> dict[str, Any]:
    """Run :func:`child` in a new Python process; its JSON answer."""
    spec = {
        "data": str(data),
        "table": case.table,
        "query": case.query.format(src=case.table),
        "options": case.options,
        "workers": workers,
        "repeat": repeat,
        "out": str(out),
    }
    with tempfile.NamedTemporaryFile("r", suffix=".json") as answer:
        subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec), "--answer", answer.name], check=True
        )
        return json.loads(Path(answer.name).read_text())


# ----------------------------------------------------------------------------------------------- main


def check_runs(duck: Any, targets: list[str], case: Case, expected: tuple[Any, ...]) -> list[str]:
    """The runs whose output differs from ``expected`` (their targets), each target removed after."""
    bad = []
    for target in targets:
        got = checksum(duck, read_back(target, case.partitioned), case.partitioned)
        if got != expected:
            bad.append(f"{target}: {got[:1]}… expected {expected[:1]}…")
        if target.endswith("/"):
            shutil.rmtree(target, ignore_errors=True)
        else:
            Path(target).unlink(missing_ok=True)
    return bad


def mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


def bench(data: Path, workers: list[int], repeat: int, out: Path, cases: tuple[Case, ...]) -> int:
    """Every case at every W (see module doc); prints the table; 1 when an output differed."""
    import duckdb

    check = duckdb.connect()
    cores = os.cpu_count() or 1
    rows, failed = [], []
    for case in cases:
        expected = checksum(
            check, f"({case.query.format(src=source_of(data, case.table))})", case.partitioned
        )
        theirs: dict[int, dict[str, Any]] = {}
        for w in workers:
            threads = w * max(1, cores // w)
            if threads not in theirs:
                theirs[threads] = duckdb_runs(data, case, out, threads, repeat)
                failed += check_runs(check, theirs[threads]["targets"], case, expected)
            ours = squall_runs(data, case, out, w, repeat)
            failed += check_runs(check, [r["target"] for r in ours["runs"]], case, expected)
            failed += [
                f"{case.name} W={w}: {r['rows']} rows reported"
                for r in ours["runs"]
                if r["rows"] != expected[0]
            ]
            rows.append((case, w, threads, ours, theirs[threads]))
    print_table(rows, repeat)
    for problem in failed:
        print("DIFFERS:", problem)
    return 1 if failed else 0


def print_table(rows: list[tuple[Case, int, int, dict[str, Any], dict[str, Any]]], repeat: int) -> None:
    load = os.getloadavg()
    print(f"best of {repeat}; {os.cpu_count()} cores; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    head = ("case", "W", "thr", "squall s", "duckdb s", "ratio", "cpu ratio", "files",
            "plan+stage+write s", "driver ready/peak MB", "worker peak MB")  # fmt: skip
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for case, w, threads, ours, theirs in rows:
        best = min(ours["runs"], key=lambda r: r["wall_s"])
        cpu = min(r["cpu_s"] for r in ours["runs"])
        phases = f"{best['planning_s']:.2f}+{best['stage_s']:.2f}+{max(best['write_s']):.2f}"
        cells = (
            case.name, str(w), str(threads), f"{best['wall_s']:.2f}", f"{theirs['wall_s']:.2f}",
            f"{best['wall_s'] / theirs['wall_s']:.2f}", f"{cpu / theirs['cpu_s']:.2f}", str(best["files"]), phases,
            f"{mb(ours['driver_ready_hwm'])}/{mb(ours['driver_peak'])}",
            "/".join(mb(p) for p in ours["worker_peaks"]),
        )  # fmt: skip
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/sf1", help="TPC-H Parquet folder (make data)")
    parser.add_argument("--workers", default="1,2", help="Squall worker counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--out", help="write here (a temporary folder by default; emptied as runs are checked)"
    )
    parser.add_argument("--cases", help="only these cases (names, comma-separated)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--answer", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        Path(args.answer).write_text(json.dumps(child(json.loads(args.child))))
        return 0
    data = Path(args.data).resolve()
    if not (data / "lineitem.parquet").exists() and not (data / "lineitem").is_dir():
        parser.error(f"no TPC-H data in {data}: make data (SF=1)")
    cases = CASES if not args.cases else tuple(c for c in CASES if c.name in args.cases.split(","))
    workers = [int(w) for w in args.workers.split(",")]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        return bench(data, workers, args.repeat, Path(args.out).resolve(), cases)
    with tempfile.TemporaryDirectory(prefix="squall-bench-write-") as tmp:
        return bench(data, workers, args.repeat, Path(tmp), cases)


if __name__ == "__main__":
    sys.exit(main())
