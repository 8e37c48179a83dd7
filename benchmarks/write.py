"""Writes: COPY of all of lineitem to Parquet, Squall at W=1 and W=2 vs DuckDB's own COPY, in one run.

    make bench-write                                        # TPC-H SF1 (make data), W=1,2, best of 3
    python benchmarks/write.py --data data/sf1 --workers 1,2 --repeat 3

Cases (:data:`CASES`): all of ``lineitem`` as plain Parquet (a folder; DuckDB writes one file), ``lineitem``
partitioned by the year of ``l_shipdate`` (a computed column ``y``, ``PARTITION_BY (y)``: hive folders), and
the small ``nation`` (the driver's memory must not depend on the result's size). For every case and W:

- **DuckDB**: one process (this one), ``threads`` = the threads Squall's W workers use together
  (W x cores // W), ``COPY (same query over read_parquet) TO …``: wall seconds, and CPU seconds of the
  process (every thread);
- **Squall**: a child process (``--child``) that connects with W workers (``writable=[out]``), warms up with
  one query, then runs the ``COPY`` when told: wall and CPU seconds per run (driver + workers, from
  ``/proc``), the phases of the best run (planning, the stage's scan and compute, the slowest rank's
  ``COPY``); at the end the **driver's peak RSS** (``VmHWM``) — next to its peak once ready (connected,
  warmed up), so what the writes add shows apart from the libraries' memory — and **each worker's peak
  RSS** (``VmHWM`` of the worker processes before the connection closes);
- the two engines' runs alternate, ``--repeat`` each (both see the machine's other load alike, as in
  ``lake_files.py``); best of each is reported;
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
#: starts the child's messages on its stdout (anything else there is ignored)
MARK = "@@squall-bench-write "


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


class DuckSide:
    """DuckDB's COPY of one case, in this process with ``threads`` threads."""

    def __init__(self, data: Path, case: Case, out: Path, threads: int) -> None:
        import duckdb

        self.duck = duckdb.connect(config={"threads": threads})
        self.query = case.query.format(src=source_of(data, case.table))
        self.case, self.out, self.runs = case, out, 0

    def run(self) -> dict[str, Any]:
        """One COPY: its target, wall and CPU seconds (every thread of this process)."""
        target = str(self.out / f"duckdb-{self.case.table}-{self.runs}")
        target += "/" if self.case.partitioned else ".parquet"
        self.runs += 1
        c0, t0 = time.process_time(), time.perf_counter()
        self.duck.execute(f"COPY ({self.query}) TO '{target.rstrip('/')}' ({self.case.options})")
        return {"target": target, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


# ------------------------------------------------------------------------------------- Squall (child)


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


def _send(message: dict[str, Any]) -> None:
    print(MARK + json.dumps(message), flush=True)


def child(spec: dict[str, Any]) -> None:
    """The Squall side of one case at one W, in a process of its own: connects, warms up, then runs the
    COPY once per ``run`` line on stdin; at the end (any other line) reports the peaks (see module doc)."""
    import squall

    out = Path(spec["out"])
    con = squall.connect(spec["data"], workers=spec["workers"], writable=[str(out)])
    con.sql(f"SELECT count(*) FROM {spec['table']}").to_arrow()  # warm-up: workers started, planner loaded
    ready = {"driver_ready_rss": _status("self", "VmRSS"), "driver_ready_hwm": _status("self", "VmHWM")}
    _send(ready)
    runs = 0
    while sys.stdin.readline().strip() == "run":
        target = f"{out}/squall-{spec['table']}-w{spec['workers']}-{runs}/"
        runs += 1
        pids = _children()
        c0, t0 = _cpu_s(pids), time.perf_counter()
        result = con.sql(f"COPY ({spec['query']}) TO '{target}' ({spec['options']})")
        answer = result.to_arrow().to_pylist()[0]
        wall = time.perf_counter() - t0
        cpu = _cpu_s(sorted(set(pids) | set(_children()))) - c0
        stats = result.stats
        _send(
            {
                "target": target,
                "wall_s": wall,
                "cpu_s": cpu,
                "rows": answer["rows"],
                "files": answer["files"],
                "planning_s": stats["planning_s"],
                "stage_s": stats["stages"][-1]["time_s"],
                "write_s": [r["write_s"] for r in stats["written"]["per_rank"]],
            }
        )
    workers = sorted(_status(pid, "VmHWM") for pid in _children())
    con.close()
    _send({**ready, "driver_peak": _status("self", "VmHWM"), "worker_peaks": workers})


class SquallSide:
    """:func:`child` running in a new Python process, driven line by line."""

    def __init__(self, data: Path, case: Case, out: Path, workers: int) -> None:
        spec = {"data": str(data), "table": case.table, "query": case.query.format(src=case.table),
                "options": case.options, "workers": workers, "out": str(out)}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.ready = self._receive()

    def _receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return dict(json.loads(line[len(MARK) :]))
        raise RuntimeError(f"the Squall child exited with status {self.proc.wait()}")

    def _ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._receive()

    def run(self) -> dict[str, Any]:
        """One COPY (see :func:`child`)."""
        return self._ask("run")

    def finish(self) -> dict[str, Any]:
        """The driver's and the workers' peak RSS; the child exits."""
        peaks = self._ask("end")
        self.proc.wait(timeout=60)
        return peaks


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


def measure(data: Path, case: Case, out: Path, workers: int, threads: int, repeat: int, check: Any,
            expected: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:  # fmt: skip
    """``repeat`` runs of each engine, interleaved (both see the machine's load alike), every output checked:
    (Squall's runs and peaks, DuckDB's runs, the problems found)."""
    duck, ours = DuckSide(data, case, out, threads), SquallSide(data, case, out, workers)
    mine, theirs, failed = [], [], []
    for _ in range(repeat):
        theirs.append(duck.run())
        mine.append(ours.run())
        failed += check_runs(check, [theirs[-1]["target"], mine[-1]["target"]], case, expected)
        if mine[-1]["rows"] != expected[0]:
            failed.append(
                f"{case.name} W={workers}: {mine[-1]['rows']} rows reported, {expected[0]} expected"
            )
    return {"runs": mine, **ours.finish()}, {"runs": theirs}, failed


def mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


def secs(s: float) -> str:
    return f"{s:.2f}" if s >= 1 else f"{s:.3f}"


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
        for w in workers:
            threads = w * max(1, cores // w)
            ours, theirs, problems = measure(data, case, out, w, threads, repeat, check, expected)
            failed += problems
            rows.append((case, w, threads, ours, theirs))
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
        duck_s, duck_cpu = (min(r[k] for r in theirs["runs"]) for k in ("wall_s", "cpu_s"))
        phases = "+".join(secs(s) for s in (best["planning_s"], best["stage_s"], max(best["write_s"])))
        cells = (
            case.name, str(w), str(threads), secs(best["wall_s"]), secs(duck_s),
            f"{best['wall_s'] / max(duck_s, 1e-6):.2f}", f"{cpu / max(duck_cpu, 1e-6):.2f}", str(best["files"]), phases,
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
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
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
