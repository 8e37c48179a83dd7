"""The 99 TPC-DS queries on Squall's local platform against one DuckDB process, on the same Parquet files.

    python benchmarks/tpcds.py --sf 1 --workers 3            # data in data/tpcds-sf1, generated if missing
    python benchmarks/tpcds.py --sf 0.1 --workers 1,3,4 --queries 1,5,9 --repeat 3 --json report.json

For every worker count and query: DuckDB runs the query (a warm-up, then ``--repeat`` timed runs, the best
counts; ``--repeat 0`` times the single cold run); Squall plans it (``con.plan``), runs it the same way, and every answer (the warm-up's
and each timed run's) is checked with ``squall.testing.compare_results``. Each query ends as one of

- ``pass``     Squall's result equals DuckDB's;
- ``refused``  Squall raised ``NotSupportedError`` (its message is printed);
- ``DIFFERS``  a Squall answer, of the warm-up or of any timed run, differs from DuckDB's (the first
  difference is printed); the query counts in no ratio;
- ``error``    Squall failed with any other exception (an internal error: DuckDB answers the query);

and shows its times (the best run's and the first, cold one's: a query sent once is planned, nothing
cached), the ratios squall/duckdb, the cold planning time, and the shape of its plan: ``distributed``, or ``one-rank`` when a part of it
has no distributed plan yet and runs in DuckDB on rank 0 over its gathered inputs (the planner's note saying
why is printed). The summary per W counts each outcome
and gives the geometric means of the best and of the cold time ratios over the passing queries and the
median cold planning time. ``--profile`` adds under each passing query its cold planning by step (sqlglot
passes, bind, translate, each planner rule) and the best run's time per stage (scan, compute, partition, send,
receive of the slowest rank), and after the summary the biggest costs summed over the queries. Exit status 1 when any query was
wrong or an error (refusals alone exit 0), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import duckdb
import pyarrow as pa

import squall
import squall.tpcds as tpcds
from squall.errors import DataError, NotSupportedError, SquallError
from squall.testing import compare_results


@dataclass
class Outcome:
    """What happened to one query at one worker count."""

    query: int
    workers: int
    status: str  # pass | refused | DIFFERS | error | duckdb-error
    message: str = ""
    squall_s: float | None = None
    duckdb_s: float | None = None
    stages: int = 0
    one_rank_parts: list[str] = field(default_factory=list)  # the plan notes of its one-rank parts
    #: the first run's wall time, planning included (no plan of it cached): what a user sending it once sees
    cold_s: float | None = None
    planning_s: float | None = None  # the first run's planning (a plan-cache miss)
    #: the first run's planning by step (``stats["planning_breakdown"]``) and the best run's stats (--profile)
    planning: dict[str, float] = field(default_factory=dict)
    best_stats: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def cold_ratio(self) -> float | None:
        if self.cold_s is None or not self.duckdb_cold_s:
            return None
        return self.cold_s / self.duckdb_cold_s

    duckdb_cold_s: float | None = None  # DuckDB's first run of the query

    @property
    def ratio(self) -> float | None:
        if self.squall_s is None or not self.duckdb_s:
            return None
        return self.squall_s / self.duckdb_s

    @property
    def shape(self) -> str:
        if not self.stages:
            return ""
        return "one-rank" if self.one_rank_parts else "distributed"


def _parse_list(text: str, lo: int, hi: int, what: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} wants numbers like 1,3,5, got {text!r}") from None
    if not numbers or any(not lo <= n <= hi for n in numbers):
        raise argparse.ArgumentTypeError(f"{what} must be {lo}..{hi}, got {text!r}")
    return numbers


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    parser = argparse.ArgumentParser(prog="benchmarks/tpcds.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", type=_positive_float, default=1.0, help="scale factor (default 1)")
    parser.add_argument(
        "--data", type=Path, help="TPC-DS Parquet folder (default data/tpcds-sf<SF>; made if missing)"
    )
    parser.add_argument(
        "--workers",
        type=lambda t: _parse_list(t, 1, 1024, "--workers"),
        default=[3],
        help="Squall worker counts, e.g. 1,3,4 (default 3)",
    )
    parser.add_argument(
        "--queries",
        type=lambda t: _parse_list(t, 1, 99, "--queries"),
        default=list(tpcds.QUERY_NUMBERS),
        help="e.g. 1,5,9 (default all 99)",
    )
    parser.add_argument(
        "--repeat",
        type=_count,
        default=1,
        metavar="N",
        help="timed runs per query after a warm-up, best counts (0: time the single cold run)",
    )
    parser.add_argument("--json", type=Path, help="also write every outcome to this JSON file")
    parser.add_argument(
        "--profile", action="store_true",
        help="under each query: its cold planning by step and the best run's time per stage; then the biggest "
        "costs summed over the queries",
    )  # fmt: skip
    return parser


def duckdb_peer(data: Path) -> duckdb.DuckDBPyConnection:
    """A plain DuckDB connection (all cores) with one view per TPC-DS table over the Parquet files."""
    con = duckdb.connect()
    for table, files in tpcds.dataset_files(data).items():
        paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        con.execute(f"create view {table} as select * from read_parquet([{paths}])")
    return con


def _best(run: Callable[[], Any], repeat: int) -> tuple[list[Any], float, float, int]:
    """Warm-up run, then the best wall time of ``repeat`` runs (0: time the warm-up); every run's answer, the
    warm-up's first (each is checked, the timed ones too); the warm-up's time; which answer was the best."""
    start = time.perf_counter()
    answers = [run()]
    cold = time.perf_counter() - start
    best, at = (cold, 0) if repeat == 0 else (math.inf, 0)
    for i in range(repeat):
        start = time.perf_counter()
        answers.append(run())
        took = time.perf_counter() - start
        if took < best:
            best, at = took, i + 1
    return answers, best, cold, at


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def plan_shape(plan: Any) -> tuple[int, list[str]]:
    """(number of stages, the plan's notes about parts that run on one rank).

    A part without a distributed plan yet runs in DuckDB on rank 0 over its gathered inputs (the planner's
    one-rank fallback); the planner says so in a plan note starting ``one rank (<reason>)``.
    """
    return len(plan.stages), [note for note in plan.notes if note.startswith("one rank")]


def run_query(con: Any, peer: duckdb.DuckDBPyConnection, n: int, workers: int, repeat: int) -> Outcome:
    """Run TPC-DS query ``n`` on both engines and classify the outcome."""
    sql = tpcds.query(n)
    out = Outcome(n, workers, "pass")
    try:
        answers, out.duckdb_s, out.duckdb_cold_s, _at = _best(lambda: peer.sql(sql).to_arrow_table(), repeat)
        expected = answers[0]
    except Exception as exc:
        out.status, out.message = "duckdb-error", _one_line(exc)
        return out

    def run() -> tuple[pa.Table, dict[str, Any]]:
        result = con.sql(sql)
        return result.to_arrow(), result.stats

    try:
        runs, out.squall_s, out.cold_s, at = _best(run, repeat)  # the first run plans it: nothing is cached
        out.stages, out.one_rank_parts = plan_shape(con.plan(sql))
    except NotSupportedError as exc:
        out.status, out.message = "refused", str(exc).strip().splitlines()[0]
        return out
    except Exception as exc:
        out.status, out.message = "error", _one_line(exc)
        return out
    first = runs[0][1]
    out.planning_s, out.planning = first.get("planning_s"), dict(first.get("planning_breakdown", {}))
    out.best_stats = runs[at][1]
    actuals = [table for table, _stats in runs]
    for i, actual in enumerate(actuals):
        problem = compare_results(actual, expected, sql, reference=peer)
        if problem is not None:
            out.status = "DIFFERS"
            out.message = (f"timed run {i}: " if i else "") + problem.strip().splitlines()[0]
            break
    return out


def _line(o: Outcome) -> str:
    parts = [f"Q{o.query:02d} W{o.workers}", f"{o.status:<8}"]
    if o.squall_s is not None:
        parts.append(f"squall {o.squall_s:7.3f}s")
    if o.duckdb_s is not None:
        parts.append(f"duckdb {o.duckdb_s:7.3f}s")
    if o.ratio is not None:
        parts.append(f"ratio {o.ratio:6.2f}")
    if o.cold_ratio is not None and o.planning_s is not None:
        parts.append(
            f"cold {o.cold_s:7.3f}s ratio {o.cold_ratio:6.2f} (planning {o.planning_s * 1e3:.0f} ms)"
        )
    if o.shape:
        parts.append(f"{o.shape} ({o.stages} stages)")
    text = "  ".join(parts)
    if o.message:
        text += f"\n      {o.message}"
    for stage in o.one_rank_parts:
        text += f"\n      {stage}"
    return text


def profile_lines(o: Outcome) -> list[str]:
    """``--profile`` under a query: its cold planning by step (the largest first), then per stage of the best
    run the slowest rank's scan, compute, partition, send and receive milliseconds."""
    ms = 1e3
    steps = sorted(((k.removesuffix("_s"), v) for k, v in o.planning.items()), key=lambda kv: -kv[1])
    lines = [
        f"      planning (cold) {(o.planning_s or 0) * ms:.1f} ms: "
        + "  ".join(f"{name} {value * ms:.1f}" for name, value in steps[:6] if value * ms >= 0.05)
    ]
    stages = o.best_stats.get("stages", [])
    if stages:
        workers = max((w["elapsed_s"] for w in o.best_stats.get("per_worker", [])), default=0.0)
        lines.append(
            f"      best run: workers {workers * ms:.1f} ms, driver (dispatch, result) "
            f"{max(o.best_stats.get('execution_s', 0.0) - workers, 0.0) * ms:.1f} ms, {len(stages)} stages"
        )
        lines.append(
            "      stage ranks output     rows_in  rows_out  scan_ms  comp_ms  part_ms  send_ms  recv_ms"
        )
        for st in stages:
            lines.append(
                f"      {st['stage']:>5} {st['ranks']:>5} {st['output']:<9} {st['rows_in']:>8} {st['rows_out']:>9}"
                f" {st['scan_s'] * ms:8.1f} {st['compute_s'] * ms:8.1f} {st.get('partition_s', 0.0) * ms:8.1f}"
                f" {st['send_s'] * ms:8.1f} {st['receive_s'] * ms:8.1f}"
            )
    return lines


def biggest_costs(outcomes: Sequence[Outcome], top: int = 8) -> list[str]:
    """``--profile``'s summary: the planning steps and the stage costs that took most, summed over the queries."""
    steps: Counter[str] = Counter()
    stage: Counter[str] = Counter()
    for o in outcomes:
        for name, value in o.planning.items():
            if name not in ("plan_s", "cache_s"):  # plan_s sums the planner.* steps
                steps[name.removesuffix("_s")] += value
        for st in o.best_stats.get("stages", []):
            for kind in ("scan_s", "compute_s", "send_s", "receive_s"):
                stage[kind.removesuffix("_s")] += st.get(kind, 0.0)
    lines = ["  planning (cold), summed over the queries: "
             + "  ".join(f"{n} {v:.2f}s" for n, v in steps.most_common(top))]  # fmt: skip
    lines.append("  best runs' stages, slowest rank, summed: " + "  ".join(
        f"{n} {v:.2f}s" for n, v in stage.most_common() if v))  # fmt: skip
    return lines


def geomean(values: Sequence[float]) -> float | None:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else None


def summary(outcomes: Sequence[Outcome]) -> list[str]:
    """Summary lines of one worker count's outcomes."""
    if not outcomes:
        return []
    counts = Counter(o.status for o in outcomes)
    passed = [o for o in outcomes if o.status == "pass"]
    mean = geomean([o.ratio for o in passed if o.ratio is not None])
    cold = geomean([o.cold_ratio for o in passed if o.cold_ratio is not None])
    plannings = sorted(o.planning_s for o in passed if o.planning_s is not None)
    shapes = Counter(o.shape for o in passed)
    lines = [
        f"W={outcomes[0].workers}: {len(outcomes)} queries: "
        + ", ".join(
            f"{counts[s]} {s}" for s in ("pass", "refused", "DIFFERS", "error", "duckdb-error") if counts[s]
        )
        + f"; passing: {shapes['distributed']} distributed, {shapes['one-rank']} with a one-rank part"
        + f"; geomean ratio squall/duckdb over passing: {'n/a' if mean is None else f'{mean:.2f}'}"
        + f" (best run), {'n/a' if cold is None else f'{cold:.2f}'} (first run, cold: planning included)"
        + (f"; planning (cold) median {plannings[len(plannings) // 2] * 1e3:.0f} ms" if plannings else "")
    ]
    for status in ("DIFFERS", "error", "duckdb-error"):
        names = [f"q{o.query:02d}" for o in outcomes if o.status == status]
        if names:
            lines.append(f"  {status}: {' '.join(names)}")
    reasons: dict[str, list[str]] = {}
    for o in outcomes:
        if o.status == "refused":
            reasons.setdefault(o.message, []).append(f"q{o.query:02d}")
    for message, names in sorted(reasons.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"  refused ({len(names)}): {' '.join(names)}: {message}")
    parts: dict[str, list[str]] = {}
    for o in passed:
        for note in dict.fromkeys(note.split(":")[0] for note in o.one_rank_parts):
            parts.setdefault(note, []).append(f"q{o.query:02d}")
    for note, names in sorted(parts.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"  {note} ({len(names)}): {' '.join(names)}")
    return lines


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the benchmark; return the exit status (0 no wrong answer nor error, 1 otherwise, 2 bad arguments)."""
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    data: Path = args.data or Path("data") / f"tpcds-sf{args.sf:g}"
    if tpcds.dataset_sf(data) != args.sf:
        print(f"generating TPC-DS SF {args.sf:g} into {data} ...", file=out, flush=True)
        start = time.perf_counter()
        try:
            tpcds.generate(args.sf, data)
        except SquallError as exc:
            print(f"error: {exc}", file=out)
            return 1
        print(f"generated in {time.perf_counter() - start:.1f}s", file=out, flush=True)
    try:
        tpcds.dataset_files(data)
    except DataError as exc:
        print(f"error: {exc}", file=out)
        return 1

    peer = duckdb_peer(data)
    results: dict[int, list[Outcome]] = {}
    try:
        for workers in args.workers:
            try:
                con = squall.connect(data=str(data), workers=workers)
            except Exception as exc:
                print(f"error: squall.connect(workers={workers}) failed: {_one_line(exc)}", file=out)
                return 1
            try:
                for n in args.queries:
                    outcome = run_query(con, peer, n, workers, args.repeat)
                    results.setdefault(workers, []).append(outcome)
                    print(_line(outcome), file=out, flush=True)
                    if args.profile and outcome.status == "pass":
                        print("\n".join(profile_lines(outcome)), file=out, flush=True)
            finally:
                con.close()
    finally:
        peer.close()

    print(f"\nTPC-DS SF {args.sf:g}", file=out)
    for outcomes in results.values():
        for line in summary(outcomes):
            print(line, file=out)
        if args.profile:
            for line in biggest_costs([o for o in outcomes if o.status == "pass"]):
                print(line, file=out)
    if args.json:
        records = [
            {k: v for k, v in asdict(o).items() if k != "best_stats"}
            | {"ratio": o.ratio, "cold_ratio": o.cold_ratio, "shape": o.shape}
            for os_ in results.values()
            for o in os_
        ]
        args.json.write_text(json.dumps({"sf": args.sf, "outcomes": records}, indent=1) + "\n")
    bad = any(o.status in ("DIFFERS", "error") for os_ in results.values() for o in os_)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
