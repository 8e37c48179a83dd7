"""TPC-H on uniform vs JCC-H-style skewed data (squall/tpch/skew.py): exchange balance, bytes moved, CPU per rank.

    python benchmarks/skew.py --sf 1 --workers 4,8 --planner-option skew_min_bytes=0

For each W and each data setting (``uniform``; ``hot10``/``hot30``: 10 %/30 % of lineitem and orders rows on
one hot order/part/customer; ``zipf1``/``zipf1.5``: Zipf foreign keys; ``dates``: date-correlated order keys)
every query runs once as a warm-up and is checked against DuckDB on the same files
(``squall.testing.compare_results``), then ``--repeat`` timed runs of which the one with the least CPU counts.
Per query it prints:

- per exchange (``x<stage>``, hash exchanges with more than one receiver): the skew factor, max/mean of the
  rows each receiving rank got (``Result.stats["exchanges"][i]["rows_per_rank"]`` when the engine reports it,
  else the workers' stage reports ``rows_received``), and the bytes it moved to other ranks
  (``bytes_moved``; rows a rank keeps for itself do not cross the network), as ``moved`` for all exchanges;
- CPU seconds per worker process during the query (``/proc`` utime+stime of the platform's worker processes,
  all threads): the max over workers (the query's time if every worker had its own core: on this shared
  2-core machine wall times of ranks converge and hide imbalance), the sum, and max/mean;
- the wall time (loaded machine: for reference only).

With ``dates`` among the settings, the date-correlated data also runs with key ranges off
(``skew_locality_ranges=false``: hash partitions only), and a line per W gives the bytes moved with and
without locality (Neo-Join's key ranges keep rows clustered by the join key on the rank holding them; this
shows only on skew-aware joins: ``skew_min_bytes=0`` makes every join of two hashed sides one).

Q21 is not in the default queries: its self-join on ``l_orderkey`` is quadratic in the lines of the one hot
order of ``hot10``/``hot30`` (DuckDB too); the test suite's SF1 settings spread hot lines over many orders.

For a skew-aware join, ``group skew (bytes)`` is max/mean of the bytes each rank received over both sides:
what the assignment balances (a small side may be uneven where the large side makes up for it).

Last, per W and setting: the worst skew factor (also over the exchanges that moved at least 1 MB: a
few-kB exchange of partial aggregates is uneven by nature and costs nothing; and over join groups), bytes moved (all exchanges) and the summed per-query max-worker CPU, each as a
ratio to ``uniform`` measured in the same run. Skewed datasets are generated on first use beside the uniform
one (``$SQUALL_TPCH_CACHE`` or ``--cache``). ``--planner-option NAME=VALUE`` sets a PlannerOptions field (e.g. the
skew handling's switch, printed when the engine has one). Exits 1 if any result differs or fails, 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import duckdb

import squall
import squall.tpch as tpch
from squall.driver.options import PlannerOptions
from squall.driver.report.exchanges import skew_factor
from squall.errors import SquallError
from squall.testing import compare_results
from squall.tpch.skew import SkewSpec, generate_skewed, read_marker

SETTINGS: dict[str, SkewSpec | None] = {
    "uniform": None,
    "hot10": SkewSpec(hot_share=0.1),
    "hot30": SkewSpec(hot_share=0.3),
    "zipf1": SkewSpec(hot_share=0.0, zipf=1.0),
    "zipf1.5": SkewSpec(hot_share=0.0, zipf=1.5),
    "dates": SkewSpec(hot_share=0.0, correlate_dates=True),
}
DEFAULT_SETTINGS = "uniform,hot10,hot30,zipf1,zipf1.5,dates"
DEFAULT_QUERIES = "3,5,9,10,12,13,18"
#: the ``dates`` data run again with hash partitions only (``dates`` in the summary is with key ranges)
NO_RANGES = "dates/hash"
_TICK = os.sysconf("SC_CLK_TCK")
#: the summary's second worst skew counts only exchanges that moved at least this many bytes
BIG_EXCHANGE = 1_000_000


# --- arguments ------------------------------------------------------------------------------------------------


def _ints(text: str, lo: int, hi: int, what: str) -> list[int]:
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} wants numbers like 1,3,5, got {text!r}") from None
    if not values or any(not lo <= v <= hi for v in values):
        raise argparse.ArgumentTypeError(f"{what} must be in {lo}..{hi}, got {text!r}")
    return values


def _settings(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [n for n in names if n not in SETTINGS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"settings are {', '.join(SETTINGS)}; got {text!r}")
    return names


def _planner_option(text: str) -> tuple[str, Any]:
    try:
        return PlannerOptions.setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--planner-option {exc}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sf", type=float, default=0.1, help="scale factor (default 0.1)")
    p.add_argument("--workers", type=lambda t: _ints(t, 1, 64, "--workers"), default=[4, 8])
    p.add_argument(
        "--queries", type=lambda t: _ints(t, 1, 22, "--queries"), default=_ints(DEFAULT_QUERIES, 1, 22, "")
    )
    p.add_argument(
        "--settings", type=_settings, default=_settings(DEFAULT_SETTINGS), help=f"of {', '.join(SETTINGS)}"
    )
    p.add_argument("--repeat", type=lambda t: _ints(t, 1, 20, "--repeat")[0], default=1)
    p.add_argument(
        "--cache", default=None, help="folder of the datasets (default $SQUALL_TPCH_CACHE or data/)"
    )
    p.add_argument(
        "--planner-option", type=_planner_option, action="append", default=[], metavar="NAME=VALUE"
    )
    return p


# --- measurements ---------------------------------------------------------------------------------------------


def _cpu_by_pid(root: int) -> dict[int, float]:
    """CPU seconds (utime + stime, all threads) of every live descendant process of ``root``."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
        pid = int(entry)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    out = {}
    for pid in cpu:
        p = parent.get(pid, 0)
        while p and p != root:
            p = parent.get(p, 0)
        if p == root:
            out[pid] = cpu[pid]
    return out


@dataclasses.dataclass
class Run:
    """One query's measurements."""

    wall_s: float
    cpu: list[float]  # per worker process
    exchanges: list[dict[str, Any]]  # hash exchanges: stage, skew, bytes
    moved: int = 0  # bytes received over all exchanges
    error: str | None = None

    @property
    def cpu_max(self) -> float:
        return max(self.cpu, default=0.0)


def _exchanges(stats: dict[str, Any], plan: Any, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hash exchanges with several receivers: skew factor of rows per receiving rank, bytes moved."""
    out = []
    by_stage = {s.id: s for s in plan.stages}
    for e in stats.get("exchanges", []):
        stage = by_stage.get(e["stage"])
        if stage is None or e["kind"] != "hash" or len(stage.output.receivers) < 2:
            continue
        rows = e.get("rows_per_rank")
        if rows is None:  # the engine does not report it: from the workers' stage reports
            got = {
                r["rank"]: s.get("rows_received", 0)
                for r in reports
                for s in r["stages"]
                if s["stage"] == stage.id
            }
            rows = [got.get(rank, 0) for rank in stage.output.receivers]
        item = {
            "stage": e["stage"],
            "skew": skew_factor(rows),
            "bytes": int(e.get("bytes_moved", e.get("bytes_received", 0))),
        }
        for key in ("assignment", "heavy_hitters", "heavy_handling", "rows_kept_local"):
            if key in e:
                item[key] = e[key]
        if stage.output.group and "bytes_per_rank" in e:
            item["group"], item["bytes_per_rank"] = stage.output.group, e["bytes_per_rank"]
        out.append(item)
    return out


def _group_skews(exchanges: list[dict[str, Any]]) -> dict[int, float]:
    """Per skew-aware group (a join's two sides): max/mean of the bytes each rank received over all members,
    what the assignment balances (a small side alone may be uneven where the large side makes up for it)."""
    summed: dict[int, list[int]] = {}
    for e in exchanges:
        if "group" in e:
            got = summed.setdefault(e["group"], [0] * len(e["bytes_per_rank"]))
            for i, b in enumerate(e["bytes_per_rank"]):
                got[i] += int(b)
    return {g: skew_factor(per_rank) for g, per_rank in summed.items()}


def _run(con: squall.Connection, captured: list[list[dict[str, Any]]], sql: str) -> tuple[Run, Any]:
    captured.clear()
    before = _cpu_by_pid(os.getpid())
    start = time.perf_counter()
    result = con.sql(sql)
    wall = time.perf_counter() - start
    after = _cpu_by_pid(os.getpid())
    cpu = sorted((after[p] - before.get(p, 0.0) for p in after), reverse=True)[: con.platform.world_size]
    reports = captured[-1] if captured else []
    moved = sum(
        int(e.get("bytes_moved", e.get("bytes_received", 0))) for e in result.stats.get("exchanges", [])
    )
    return Run(wall, cpu, _exchanges(result.stats, result.plan, reports), moved), result


def _capture_reports(con: squall.Connection) -> list[list[dict[str, Any]]]:
    """Keep each query's per-rank worker reports (the platform's Execution), which Result.stats sums up."""
    captured: list[list[dict[str, Any]]] = []
    execute = con.platform.execute

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        execution = execute(*args, **kwargs)
        captured.append(execution.reports)
        return execution

    con.platform.execute = wrapped  # type: ignore[method-assign]
    return captured


# --- data -----------------------------------------------------------------------------------------------------


def _dataset(cache: Path, sf: float, name: str, out: TextIO) -> Path:
    uniform = cache / f"sf{sf:g}"
    try:
        tpch.dataset_files(uniform)
    except SquallError:
        print(f"generating TPC-H SF {sf:g} in {uniform}", file=out, flush=True)
        tpch.generate(sf, uniform)
    spec = SETTINGS[name]
    if spec is None:
        return uniform
    folder = cache / f"jcch-sf{sf:g}-{spec.label()}"  # the same folder as tests/jcch_data.py
    if read_marker(folder) != {"sf": float(sf), "parts": None, "spec": dataclasses.asdict(spec)}:
        print(f"generating {name} ({spec.label()}) in {folder}", file=out, flush=True)
        generate_skewed(sf, folder, spec, force=True, source=uniform)
    return folder


def _reference(folder: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table, files in tpch.dataset_files(folder).items():
        paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        con.execute(f"create view {table} as select * from read_parquet([{paths}])")
    return con


# --- main -----------------------------------------------------------------------------------------------------


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.1f}MB" if n >= 1e5 else f"{n / 1e3:.0f}kB"


def _line(w: int, name: str, n: int, run: Run) -> str:
    xs = " | ".join(
        f"x{e['stage']} skew {e['skew']:.2f} {_fmt_bytes(e['bytes'])}"
        + (
            f" [{e['assignment']}, {e['heavy_hitters']} heavy: {e['heavy_handling']}]"
            if "assignment" in e
            else ""
        )
        for e in run.exchanges
    )
    groups = _group_skews(run.exchanges)
    if groups:
        xs += " | group skew (bytes) " + ", ".join(f"{g}: {v:.2f}" for g, v in sorted(groups.items()))
    mean = sum(run.cpu) / len(run.cpu) if run.cpu else 0.0
    balance = run.cpu_max / mean if mean else 1.0
    status = "ok" if run.error is None else f"DIFFERS: {run.error}"
    return (
        f"W{w} {name:8s} Q{n:02d}  cpu max {run.cpu_max:6.2f}s sum {sum(run.cpu):6.2f}s (max/mean {balance:4.2f})"
        f"  wall {run.wall_s:6.2f}s  moved {_fmt_bytes(run.moved)}  {xs or 'no hash exchange'}  {status}"
    )


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if not (math.isfinite(args.sf) and args.sf > 0):
        print("--sf must be positive", file=sys.stderr)
        return 2
    cache = Path(args.cache or os.environ.get("SQUALL_TPCH_CACHE") or "data")
    options = PlannerOptions(**dict(args.planner_option))
    switches = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if "skew" in f.name}
    print(
        f"SF {args.sf:g}, queries {','.join(map(str, args.queries))}, planner options {dict(args.planner_option) or 'default'}; "
        + (
            f"skew handling: {switches} (--planner-option NAME=false to disable)"
            if switches
            else "the engine has no skew-handling option"
        ),
        file=out,
        flush=True,
    )
    folders = {name: _dataset(cache, args.sf, name, out) for name in args.settings}
    failed = False
    summary: dict[tuple[int, str], dict[str, float]] = {}
    names = list(args.settings) + ([NO_RANGES] if "dates" in args.settings else [])
    for w in args.workers:
        for name in names:
            folder = folders[name.split("/")[0]]
            ref = _reference(folder)
            opts = dataclasses.replace(options, skew_locality_ranges=False) if name == NO_RANGES else options
            con = squall.connect(data=str(folder), workers=w, planner_options=opts)
            captured = _capture_reports(con)
            totals = {
                "skew": 1.0,
                "skew_1mb": 1.0,
                "group": 1.0,
                "bytes": 0.0,
                "cpu_max": 0.0,
                "cpu_sum": 0.0,
            }
            try:
                for n in args.queries:
                    sql = tpch.query(n, sf=args.sf)
                    try:
                        _warm, result = _run(con, captured, sql)
                        error = compare_results(result.to_arrow(), ref.sql(sql).to_arrow_table(), sql)
                        runs = [_run(con, captured, sql)[0] for _ in range(args.repeat)]
                        best = min(runs, key=lambda r: r.cpu_max)
                        best.error = error.splitlines()[0] if error else None
                    except SquallError as exc:
                        best = Run(0.0, [], [], f"failed: {exc}")
                    failed |= best.error is not None
                    print(_line(w, name, n, best), file=out, flush=True)
                    totals["skew"] = max([totals["skew"], *(e["skew"] for e in best.exchanges)])
                    big = (e["skew"] for e in best.exchanges if e["bytes"] >= BIG_EXCHANGE)
                    totals["skew_1mb"] = max([totals["skew_1mb"], *big])
                    totals["group"] = max([totals["group"], *_group_skews(best.exchanges).values()])
                    totals["bytes"] += best.moved
                    totals["cpu_max"] += best.cpu_max
                    totals["cpu_sum"] += sum(best.cpu)
            finally:
                con.close()
                ref.close()
            summary[(w, name)] = totals
    print(
        "\nsummary (ratios to uniform in this run; cpu max = sum over queries of the busiest worker's CPU)",
        file=out,
    )
    for (w, name), t in summary.items():
        base = summary.get((w, "uniform"))
        ratio = ""
        if base and base["bytes"]:
            ratio += f"  bytes x{t['bytes'] / base['bytes']:.2f}"
        if base and base["cpu_max"]:
            ratio += f"  cpu max x{t['cpu_max'] / base['cpu_max']:.2f}"
        print(
            f"W{w} {name:8s} worst skew {t['skew']:5.2f} (moving >= 1 MB: {t['skew_1mb']:5.2f}; join groups, bytes:"
            f" {t['group']:5.2f})"
            f"  bytes {_fmt_bytes(t['bytes'])}  cpu max {t['cpu_max']:6.2f}s"
            f"  cpu sum {t['cpu_sum']:6.2f}s{ratio}",
            file=out,
        )
    for w in args.workers:
        ranges, hashed = summary.get((w, "dates")), summary.get((w, NO_RANGES))
        if ranges and hashed and hashed["bytes"]:
            print(
                f"W{w} locality on date-correlated data: bytes moved {_fmt_bytes(ranges['bytes'])} with key ranges"
                f" vs {_fmt_bytes(hashed['bytes'])} with hash partitions only (x{ranges['bytes'] / hashed['bytes']:.2f})",
                file=out,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
