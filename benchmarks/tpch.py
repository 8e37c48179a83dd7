"""TPC-H on Squall's local platform against a single DuckDB process, on the same Parquet files in the same run.

    python benchmarks/tpch.py --sf 1 --data data/sf1 --workers 4 --queries 1,3,5 --repeat 3

Each query runs once on both engines as a warm-up (file cache; not with ``--no-warmup``, for data larger than
the file cache); then ``--repeat`` timed runs on each, of which the best counts. Every Squall answer, the warm-up's and each timed run's, is checked against DuckDB's with
``squall.testing.compare_results``. The time is the wall clock around ``sql → Arrow table`` on both sides.
Prints one line per query (``DIFFERS`` if any run's answer differs) and, last, the geometric mean of the
squall/duckdb ratios over the queries that ran on both with right answers (a differing query counts in none). Exits 1 if any result differs
or any query fails, 2 on bad arguments.

``--profile`` adds, under each query, where Squall's time went (from ``Result.stats``): planning on the first
run (a plan-cache miss: bind, translate, plan), then of the best timed run (a cache hit) the driver's share
(dispatch to the workers and result transfer: the run minus the slowest worker), and per stage the slowest
rank's scan, compute, send (partition + write) and receive (wait + read) seconds.

Each line also gives the bytes Squall's exchanges sent for the query (from ``Result.stats``; a rank's rows
to itself included) and, as ``network``, the bytes they sent to other ranks (``bytes_moved``); then memory: the
largest rank's peak (over its runs; ``/budget`` with ``--worker-memory``), the peak explain expected of a rank
(``expected``: :mod:`squall.driver.forecast.scale.memory`, from the plan alone), all ranks' peaks plus the driver's
(``all``: an upper bound of what Squall held at once), the driver's (this process, which also holds the DuckDB
peer's memory: ``driver+peer``) and the most bytes spilled.
``--worker-memory SIZE`` gives each worker that budget and DuckDB W times it as its ``memory_limit``.
``--no-join-filters`` plans without join filters (Bloom filter / key set pushdown), ``--no-join-in-place``
without joins in place by key range (both sides' scans split by ranges of the join key, no exchange);
``--before-after`` runs every query on a second connection without the rules that cut bytes (join filters,
join sides narrowed to the columns read above them, key ranges in skew-aware joins, joins in place by key
range, and run-time join decisions; ``--no-runtime-joins`` plans without the last alone) as well and prints its time, ratio and bytes on an indented line, then the totals and geomeans
of both. ``--planner-option NAME=VALUE`` sets a ``PlannerOptions`` field on both connections;
``--before-option NAME=VALUE`` makes "before" differ by just these fields instead (an A/B of one rule in
the same run, e.g. ``--before-after --before-option skew_handling=off``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import duckdb
import pyarrow as pa

import squall
import squall.tpch as tpch
from squall.driver.forecast.predict import plan_need
from squall.driver.options import PlannerOptions
from squall.driver.platforms.memory import LOCAL_SHARE, machine_memory
from squall.errors import DataError, SquallError
from squall.operators.memory import PeakMemory
from squall.sizes import parse_size
from squall.testing import compare_results


def _parse_queries(text: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--queries wants numbers like 1,3,5, got {text!r}") from None
    bad = [n for n in numbers if not 1 <= n <= 22]
    if bad or not numbers:
        raise argparse.ArgumentTypeError(f"TPC-H queries are 1..22, got {text!r}")
    return numbers


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    parser = argparse.ArgumentParser(prog="benchmarks/tpch.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", type=_positive_float, default=1.0, help="scale factor (default 1)")
    parser.add_argument(
        "--data", type=Path, help="TPC-H Parquet folder (default data/sf<SF>; made if missing)"
    )
    parser.add_argument("--workers", type=_positive_int, help="Squall workers (default: Squall's choice)")
    parser.add_argument(
        "--worker-memory", metavar="SIZE",
        help="memory budget of each Squall worker (e.g. 512MB); DuckDB then gets W times it as memory_limit",
    )  # fmt: skip
    parser.add_argument(
        "--queries", type=_parse_queries, default=list(tpch.QUERY_NUMBERS), help="e.g. 1,3,5 (default all 22)"
    )
    parser.add_argument("--repeat", type=_positive_int, default=1, help="timed runs per query; best counts")
    parser.add_argument(
        "--no-warmup", action="store_true",
        help="no warm-up run: the first timed run is the checked one (data larger than the file cache)",
    )  # fmt: skip
    parser.add_argument(
        "--seed",
        type=int,
        help="use TPC-H random substitution parameters from this seed (default: validation)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="print where the time goes, per query and per stage"
    )
    parser.add_argument("--no-join-filters", action="store_true", help="plan without join filters")
    parser.add_argument(
        "--no-join-in-place", action="store_true", help="plan without joins in place by key range"
    )
    parser.add_argument(
        "--no-runtime-joins",
        action="store_true",
        help="plan broadcast vs hash from estimates alone (no run-time join decisions)",
    )
    parser.add_argument(
        "--stage-plans-at-w1",
        action="store_true",
        help="at W=1 plan Squall's own stages instead of DuckDB planning the whole query (whole_query_at_w1)",
    )
    parser.add_argument(
        "--before-after",
        action="store_true",
        help="also run each query without the byte-cutting rules (join filters, narrowed join sides, key ranges, "
        "run-time join decisions; "
        "same run) "
        "and compare bytes exchanged and time",
    )
    parser.add_argument(
        "--planner-option",
        type=_planner_option,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a PlannerOptions field for Squall (repeatable), e.g. skew_min_bytes=0",
    )
    parser.add_argument(
        "--before-option",
        type=_planner_option,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --before-after: what 'before' changes instead of the byte-cutting rules (repeatable), "
        "e.g. skew_handling=off for an A/B of one rule in the same run",
    )
    return parser


def _planner_option(text: str) -> tuple[str, Any]:
    try:
        return PlannerOptions.setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def exchanged_bytes(stats: dict[str, Any]) -> int:
    """Bytes all exchanges of one query sent (a rank's rows to itself included)."""
    return sum(int(e.get("bytes_sent", 0)) for e in stats.get("exchanges", []))


def network_bytes(stats: dict[str, Any]) -> int:
    """Arrow bytes of the rows all exchanges of one query sent to other ranks (what crossed the network)."""
    return sum(int(e.get("bytes_moved", 0)) for e in stats.get("exchanges", []))


def memory_text(runs: list[dict[str, Any]], driver_peak: int, expected: float = 0.0) -> str:
    """Over a query's runs: the largest rank's peak (and the budget), what the plan was expected to ask of a rank
    (``expected``, explain's figure), all ranks' peaks summed plus the driver's, the driver's peak and the bytes
    spilled, in MiB."""
    mib = 1 << 20
    ranks = [w for stats in runs for w in stats.get("per_worker", [])]
    top = max((w["peak_memory_bytes"] for w in ranks), default=0)
    together = max((sum(w["peak_memory_bytes"] for w in st.get("per_worker", [])) for st in runs), default=0)
    budget = next((st["memory"]["budget_per_worker_bytes"] for st in runs if st.get("memory")), None)
    spilled = max((st.get("memory", {}).get("spilled_bytes", 0) for st in runs), default=0)
    within = f"/{budget // mib}" if budget else ""
    return (
        f"peak {top // mib}{within} MiB  expected {int(expected) // mib} MiB  all {(together + driver_peak) // mib} MiB"
        f"  driver+peer {driver_peak // mib} MiB"
        f"  spilled {spilled // mib} MiB"
    )


def expected_peak(con: Any, sql: str) -> float:
    """What explain expects the plan of ``sql`` to ask of a rank (:func:`plan_need`)."""
    return plan_need(con.plan(sql)).peak


def _geomean(ratios: list[float]) -> str:
    return f"{math.exp(sum(math.log(r) for r in ratios) / len(ratios)):.2f}" if ratios else "n/a"


def profile_lines(first: dict[str, Any], best: dict[str, Any]) -> list[str]:
    """The ``--profile`` table of one query: planning from the first run's stats (a plan-cache miss), the
    rest from the best run's."""
    ms = 1e3
    pb = first.get("planning_breakdown", {})
    workers = max((w["elapsed_s"] for w in best.get("per_worker", [])), default=0.0)
    driver = max(best["execution_s"] - workers, 0.0)
    lines = [
        f"     planning (miss) {first['planning_s'] * ms:7.1f} ms: bind {pb.get('bind_s', 0) * ms:.1f}"
        f"  translate {pb.get('translate_s', 0) * ms:.1f}  plan {pb.get('plan_s', 0) * ms:.1f}"
        f"  | run: plan {best['planning_s'] * ms:.1f} ({best.get('plan_cache', '?')})"
        f"  workers {workers * ms:.1f}  dispatch+result {driver * ms:.1f}"
        f"  on {best.get('ran_on', 'workers')}",
        "     stage ranks output       rows_in   rows_out    time_ms  scan_ms  comp_ms  part_ms  send_ms   recv_ms",
    ]
    for st in best.get("stages", []):
        lines.append(
            f"     {st['stage']:>5} {st['ranks']:>5} {st['output']:<10} {st['rows_in']:>9} {st['rows_out']:>10}"
            f" {st['time_s'] * ms:10.1f} {st['scan_s'] * ms:8.1f} {st['compute_s'] * ms:8.1f}"
            f" {st.get('partition_s', 0.0) * ms:8.1f} {st['send_s'] * ms:8.1f} {st['receive_s'] * ms:9.1f}"
        )
    return lines


def duckdb_peer(data: Path, memory_limit: int | None = None) -> duckdb.DuckDBPyConnection:
    """A plain DuckDB connection (all cores) with one view per TPC-H table over the Parquet files; with
    ``memory_limit`` (bytes) DuckDB keeps to it, spilling to its default temp folder. Its allocator gives freed
    memory back between queries, as Squall's workers' do (otherwise it kept ~3 GB resident after SF100 Q9, which
    Squall's next query then did not have)."""
    config: dict[str, str | bool] = {"allocator_background_threads": True}
    if memory_limit:
        config["memory_limit"] = f"{memory_limit >> 20}MiB"
    con = duckdb.connect(config=config)
    for table, files in tpch.dataset_files(data).items():
        paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        con.execute(f"create view {table} as select * from read_parquet([{paths}])")
    return con


def _timed(run: Callable[[], pa.Table]) -> tuple[pa.Table, float]:
    start = time.perf_counter()
    table = run()
    return table, time.perf_counter() - start


def first_difference(
    answers: Sequence[pa.Table], expected: pa.Table, sql: str, reference: Callable[[str], pa.Table]
) -> str | None:
    """The first of ``answers`` (the warm-up's, then each timed run's) that differs from DuckDB's, said by
    ``squall.testing.compare_results``; None if every run's answer is right."""
    for i, answer in enumerate(answers):
        problem = compare_results(answer, expected, sql, reference=reference)
        if problem is not None:
            return problem if i == 0 else f"timed run {i}: {problem}"
    return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the benchmark; return the exit status (0 all results agree, 1 a difference or failure)."""
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    data: Path = args.data or Path("data") / f"sf{args.sf:g}"
    try:
        tpch.dataset_files(data)
    except DataError:
        print(f"generating TPC-H SF {args.sf:g} into {data} ...", file=out, flush=True)
        try:
            tpch.generate(args.sf, data)
        except SquallError as exc:
            print(f"error: {exc}", file=out)
            return 1

    connect_kwargs: dict[str, Any] = {"data": str(data)}
    if args.workers is not None:
        connect_kwargs["workers"] = args.workers
    peer_memory = None
    if args.worker_memory:
        connect_kwargs["worker_memory"] = args.worker_memory
        try:
            budget = parse_size(args.worker_memory, "--worker-memory")
        except SquallError as exc:
            print(f"error: {exc}", file=out)
            return 2
        peer_memory = budget * (args.workers or 1)
        print(f"DuckDB memory_limit {peer_memory >> 20} MiB (W x --worker-memory)", file=out, flush=True)
    else:  # what the local platform shares among the driver and its workers
        peer_memory = int(machine_memory() * LOCAL_SHARE)
        print(f"DuckDB memory_limit {peer_memory >> 20} MiB (Squall's local share)", file=out, flush=True)
    peer = duckdb_peer(data, peer_memory)
    driver_peak = PeakMemory()
    options = PlannerOptions(
        disabled_rules=("join_filters",) if args.no_join_filters else (),
        whole_query_at_w1=not args.stage_plans_at_w1,
        join_in_place=not args.no_join_in_place,
        runtime_join=not args.no_runtime_joins,
        **dict(args.planner_option),
    )
    before = dict(args.before_option) or {
        "disabled_rules": ("join_filters",),
        "narrow_join_sides": False,
        "skew_locality_ranges": False,
        "join_in_place": False,
        "runtime_join": False,
    }
    before_label = (
        "before (" + ", ".join(f"{k}={v}" for k, v in args.before_option) + ")"
        if args.before_option
        else "before (no join filters, no narrowing, no key ranges, no joins in place, no run-time joins)"
    )
    if options != PlannerOptions():
        connect_kwargs["planner_options"] = options
    try:
        con = squall.connect(**connect_kwargs)
        base = (
            squall.connect(
                **{
                    **connect_kwargs,
                    "planner_options": dataclasses.replace(options, **before),
                }
            )
            if args.before_after
            else None
        )
    except Exception as exc:
        print(f"error: squall.connect failed: {_one_line(exc)}", file=out)
        return 1

    squall_stats: list[dict[str, Any]] = []

    def run_squall(sql: str) -> pa.Table:
        result = con.sql(sql)
        squall_stats.append(result.stats)
        return result.to_arrow()

    def run_duckdb(sql: str) -> pa.Table:
        return peer.sql(sql).to_arrow_table()

    warmup = 0 if args.no_warmup else 1
    failed = False
    ratios: list[float] = []
    base_ratios: list[float] = []
    total_bytes = [0, 0]  # after, before (--before-after)
    total_network = [0, 0]
    try:
        for n in args.queries:
            params = (
                tpch.random_params(n, args.seed, sf=args.sf)
                if args.seed is not None
                else tpch.validation_params(n, sf=args.sf)
            )
            sql = tpch.query(n, params, sf=args.sf)
            label = f"Q{n:02d}"
            try:
                duck_runs = [_timed(lambda sql=sql: run_duckdb(sql)) for _ in range(args.repeat + warmup)]
                expected = duck_runs[0][0]
                best_duck = min(t for _, t in duck_runs[warmup:])
            except Exception as exc:
                print(f"{label}  duckdb FAILED: {_one_line(exc)}", file=out, flush=True)
                failed = True
                continue
            try:
                squall_stats.clear()
                driver_peak.reset()
                runs = [_timed(lambda sql=sql: run_squall(sql)) for _ in range(args.repeat + warmup)]
                timed = runs[warmup:]
                times = [t for _, t in timed]
                best_squall = min(times)
                best_stats = squall_stats[warmup + times.index(best_squall)]
            except Exception as exc:
                print(
                    f"{label}  squall FAILED: {_one_line(exc)}  duckdb {best_duck:.3f}s", file=out, flush=True
                )
                failed = True
                continue
            # every run's answer is checked, the timed ones too; a query whose answer differs counts in no ratio
            problem = first_difference([r for r, _ in runs], expected, sql, run_duckdb)
            ratio = best_squall / best_duck if best_duck > 0 else math.inf
            if math.isfinite(ratio) and ratio > 0 and problem is None:
                ratios.append(ratio)
            verdict = "ok" if problem is None else "DIFFERS"
            sent, moved = exchanged_bytes(best_stats), network_bytes(best_stats)
            print(
                f"{label}  squall {best_squall:.3f}s  duckdb {best_duck:.3f}s  ratio {ratio:.2f}  "
                f"bytes {sent}  network {moved}  "
                f"{memory_text(squall_stats, driver_peak.peak(), expected_peak(con, sql))}  {verdict}",
                file=out,
                flush=True,
            )
            if base is not None:
                try:
                    base_answers = [base.sql(sql).to_arrow()]
                    runs = []
                    for _ in range(args.repeat):
                        t0 = time.perf_counter()
                        res = base.sql(sql)
                        base_answers.append(res.to_arrow())
                        runs.append((time.perf_counter() - t0, res.stats))
                    base_time, base_stats = min(runs, key=lambda r: r[0])
                    base_problem = first_difference(base_answers, expected, sql, run_duckdb)
                except Exception as exc:
                    print(
                        f"     {before_label} FAILED: {_one_line(exc)}",
                        file=out,
                        flush=True,
                    )
                    failed = True
                else:
                    base_sent = exchanged_bytes(base_stats)
                    base_ratio = base_time / best_duck if best_duck > 0 else math.inf
                    if (
                        math.isfinite(base_ratio)
                        and base_ratio > 0
                        and base_problem is None
                        and problem is None
                    ):
                        base_ratios.append(base_ratio)
                    total_bytes[0] += sent
                    total_bytes[1] += base_sent
                    total_network[0] += moved
                    total_network[1] += network_bytes(base_stats)
                    removed = sum(f.get("rows_removed", 0) for f in best_stats.get("join_filters", []))
                    print(
                        f"     {before_label}: squall {base_time:.3f}s  "
                        f"ratio {base_ratio:.2f}  bytes {base_sent}  network {network_bytes(base_stats)}  "
                        f"(after: {sent / base_sent if base_sent else 1:.2f}x bytes, "
                        f"{removed} rows removed)  {'ok' if base_problem is None else 'DIFFERS'}",
                        file=out,
                        flush=True,
                    )
                    failed = failed or base_problem is not None
            if problem is not None:
                print(f"     {problem}", file=out, flush=True)
                failed = True
            if args.profile:
                print("\n".join(profile_lines(squall_stats[0], best_stats)), file=out, flush=True)
    finally:
        for c in (con, base):
            close = getattr(c, "close", None)
            if callable(close):
                close()
        peer.close()

    print(f"geomean ratio squall/duckdb: {_geomean(ratios)}", file=out)
    if base is not None:
        before, after = total_bytes[1], total_bytes[0]
        change = f"{(1 - after / before) * 100:.1f} % less" if before else "n/a"
        print(f"bytes exchanged: {after} after, {before} before ({change})", file=out)
        before, after = total_network[1], total_network[0]
        change = f"{(1 - after / before) * 100:.1f} % less" if before else "n/a"
        print(f"bytes to other ranks (network): {after} after, {before} before ({change})", file=out)
        print(f"geomean ratio squall/duckdb before: {_geomean(base_ratios)}", file=out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
