"""TPC-H's 22 queries on the engines a user would pick instead of Squall, on the same Parquet files in one run.

    python benchmarks/peers.py --sf 1 --data data/sf1 --workers 1,2 --repeat 3
    python benchmarks/peers.py --sf 0.1 --engines duckdb,squall,polars --queries 1,6,13 --json peers.json

Engines (``--engines``, default every one that is installed; ``pip install 'squall[peers]'`` adds the peers):

- ``duckdb``: the reference, one in-process DuckDB connection with a view per table over the Parquet files (the
  same peer as benchmarks/tpch.py). It always runs: every other answer is checked against it and every time
  is given as a ratio to it.
- ``squall``: ``squall.connect(data=…, workers=W)`` for each W of ``--workers`` (a column ``squall-wW`` each;
  without ``--workers`` one column ``squall`` with Squall's own choice).
- ``polars``: ``polars.SQLContext`` over ``polars.scan_parquet`` (lazy), collected and turned into Arrow.
- ``datafusion``: datafusion-python's ``SessionContext`` with ``register_parquet``.
- ``sail``: LakeSail's Sail (``pysail``, Rust; no JVM) started in this process as a Spark Connect server on a
  free loopback port, queried through PySpark's Spark Connect client (``SparkSession.builder.remote``) over
  temp views of ``spark.read.parquet``; results come back with ``DataFrame.toArrow()``.
- ``chdb``: embedded ClickHouse, a ``chdb`` session with one view per table over ``file('…', Parquet)``.

Every engine gets all cores (the header says what each got): DuckDB's default ``threads``; Squall's W worker
processes with cores/W DuckDB threads each; Polars' thread pool (``POLARS_MAX_THREADS``, default all cores);
DataFusion's ``target_partitions`` set to the core count; Sail's ``execution.default_parallelism`` (0: all
cores; ``SAIL_EXECUTION__DEFAULT_PARALLELISM``); ClickHouse's ``max_threads`` set to the core count.

Each engine runs the query text of ``squall.tpch.query`` unchanged. The only concession to a dialect is a
session setting for ClickHouse, ``join_use_nulls = 1``, which ClickHouse's own TPC-H guide asks for: without
it an outer join fills missing columns with 0 instead of NULL and Q13 counts wrongly (see ``CHDB_SETTINGS``).
ClickHouse's other departures from standard SQL are left to show as DIFFERS: a literal like ``0.06`` is a
Float64, not a decimal (Q6's ``between 0.06 - 0.01 and 0.06 + 0.01`` then leaves out discount 0.07), a
decimal divided by a decimal keeps the dividend's scale (Q8's share comes back as 0.0286), and ``sum`` over no
rows is 0, not NULL (Q17 at SF 0.01).

Each query runs once per engine as a warm-up whose result is checked against DuckDB's with
``squall.testing.compare_results`` (types, exact decimals, float tolerance, ties in ORDER BY compared as
multisets), then ``--repeat`` timed runs of which the best counts, each answer checked the same way. Squall's
answers are compared as they are (names and types must be DuckDB's); a peer's columns are matched by position
and cast to DuckDB's types where Arrow can do so safely, since engines name unaliased expressions and type
results their own way. The time is the wall clock around ``SQL text → Arrow table``. Prints one line per query
with each engine's seconds and ratio to DuckDB, a line under it for each engine that failed or answered
differently (why), and last one line per engine: the geometric mean of its ratios over the queries it answered
correctly, and how many of the queries that is. A query a peer cannot run or answers differently is left out
of its geomean and does not change the exit status; Squall's do. Exits 1 if any Squall result differs or any
query fails on Squall or DuckDB, 2 on bad arguments. ``--json PATH`` writes every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, TextIO

import pyarrow as pa

import squall
import squall.tpch as tpch
from squall.errors import DataError, SquallError
from squall.testing import compare_results


def _load_tpch_benchmark() -> ModuleType:
    """benchmarks/tpch.py, whose argument helpers, DuckDB peer and timing this script shares."""
    name = "squall_benchmark_tpch"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name("tpch.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_bench = _load_tpch_benchmark()

ENGINES: tuple[str, ...] = ("duckdb", "squall", "polars", "datafusion", "sail", "chdb")
"""What ``--engines`` takes, in the order of the output's columns."""

PEER_MODULES: dict[str, tuple[str, ...]] = {
    "polars": ("polars",),
    "datafusion": ("datafusion",),
    "sail": ("pysail", "pyspark", "grpc"),
    "chdb": ("chdb",),
}
"""The modules a peer needs; a peer missing one is 'not installed'."""

CHDB_SETTINGS: dict[str, str] = {
    # ClickHouse's TPC-H guide: "Setting join_use_nulls should be enabled to produce correct results according
    # to SQL standard" (outer joins otherwise fill the missing side with default values, e.g. 0, not NULL).
    "join_use_nulls": "1",
}
"""Session settings for ClickHouse (chdb): the one documented change it needs for standard SQL results."""

INSTALL_HINT = "pip install 'squall[peers]'"
CELL = 17  # width of one engine's cell in the per-query lines


# --- command line ----------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr and exit status 2 (argparse's usage dump is left to ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parse_engines(text: str) -> list[str]:
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown engine {', '.join(map(repr, unknown)) or repr(text)} (choose from {', '.join(ENGINES)})"
        )
    return [e for e in ENGINES if e in names]


def _parse_workers(text: str) -> list[int]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"--workers wants counts like 1,2, got {text!r}")
    counts = [_bench._positive_int(part) for part in parts]
    return list(dict.fromkeys(counts))


def build_parser() -> argparse.ArgumentParser:
    """The command line of the benchmark."""
    parser = _Parser(prog="benchmarks/peers.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", type=_bench._positive_float, default=1.0, help="scale factor (default 1)")
    parser.add_argument(
        "--data", type=Path, help="TPC-H Parquet folder (default data/sf<SF>; made if missing)"
    )
    parser.add_argument(
        "--engines",
        type=_parse_engines,
        help=f"comma-separated, from {','.join(ENGINES)} (default: every one installed; duckdb always runs)",
    )
    parser.add_argument(
        "--workers",
        type=_parse_workers,
        help="Squall worker counts, e.g. 1,2: one column each (default: one column, Squall's choice)",
    )
    parser.add_argument(
        "--queries",
        type=_bench._parse_queries,
        default=list(tpch.QUERY_NUMBERS),
        help="e.g. 1,3,5 (default all 22)",
    )
    parser.add_argument(
        "--repeat", type=_bench._positive_int, default=1, help="timed runs per query; best counts"
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="use TPC-H random substitution parameters from this seed (default: validation)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write all figures to this JSON file")
    return parser


# --- engines ---------------------------------------------------------------------------------------------------


@dataclass
class Engine:
    """One column of the output: how to run a query on it and what it is."""

    name: str
    run: Callable[[str], pa.Table]
    threads: str  # what share of the machine it got, as said in the output
    version: str
    close: Callable[[], None] = lambda: None
    is_squall: bool = False
    notes: list[str] = field(default_factory=list)


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _cores() -> int:
    return os.cpu_count() or 1


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _location(files: list[Path]) -> tuple[Path, bool]:
    """Where a table's files are: the single file, or (``True``) the folder of its parts."""
    if len(files) == 1:
        return files[0].resolve(), False
    return files[0].parent.resolve(), True


def start_duckdb(data: Path, files: dict[str, list[Path]]) -> Engine:
    con = _bench.duckdb_peer(data)
    threads = con.sql("select current_setting('threads')").fetchall()
    return Engine(
        "duckdb",
        lambda sql: con.sql(sql).to_arrow_table(),
        f"{threads[0][0] if threads else '?'} threads",
        _version("duckdb"),
        con.close,
    )


def start_squall(data: Path, workers: int | None) -> Engine:
    kwargs: dict[str, Any] = {"data": str(data)}
    if workers is not None:
        kwargs["workers"] = workers
    con = squall.connect(**kwargs)
    per_worker = getattr(getattr(con, "platform", None), "threads", None)
    threads = f"{con.workers} worker process(es) x {per_worker or '?'} DuckDB thread(s)"
    return Engine(
        "squall" if workers is None else f"squall-w{workers}",
        lambda sql: con.sql(sql).to_arrow(),
        threads,
        _version("squall"),
        con.close,
        is_squall=True,
    )


def start_polars(data: Path, files: dict[str, list[Path]]) -> Engine:
    import polars as pl

    ctx = pl.SQLContext({table: pl.scan_parquet([str(f) for f in paths]) for table, paths in files.items()})
    return Engine(
        "polars",
        lambda sql: ctx.execute(sql, eager=False).collect().to_arrow(),
        f"thread pool of {pl.thread_pool_size()} (POLARS_MAX_THREADS)",
        _version("polars"),
    )


def start_datafusion(data: Path, files: dict[str, list[Path]]) -> Engine:
    from datafusion import SessionConfig, SessionContext

    partitions = _cores()
    ctx = SessionContext(SessionConfig().with_target_partitions(partitions))
    for table, paths in files.items():
        where, folder = _location(paths)
        if folder:
            ctx.register_parquet(table, str(where), file_extension=".parquet")
        else:
            ctx.register_parquet(table, str(where))
    return Engine(
        "datafusion",
        lambda sql: ctx.sql(sql).to_arrow_table(),
        f"target_partitions {partitions}",
        _version("datafusion"),
    )


def start_sail(data: Path, files: dict[str, list[Path]]) -> Engine:
    os.environ.setdefault("RUST_LOG", "error")  # Sail logs every session at INFO on stderr otherwise
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\.|$)")
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    spark = None
    try:
        _, port = server.listening_address
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        for table, paths in files.items():
            spark.read.parquet(*[str(p.resolve()) for p in paths]).createOrReplaceTempView(table)
    except BaseException as exc:
        if spark is not None:
            spark.stop()
        server.stop()
        if "is not running" in str(exc):  # the server drops the client's session: a protocol mismatch
            raise RuntimeError(
                f"{_bench._one_line(exc)} (pyspark {_version('pyspark')} does not work with pysail "
                f"{_version('pysail')}; pyspark 4.2 does: pip install 'pyspark[connect]>=4.2,<4.3')"
            ) from exc
        raise

    def close() -> None:
        spark.stop()
        server.stop()

    setting = os.environ.get("SAIL_EXECUTION__DEFAULT_PARALLELISM", "0")
    threads = f"default_parallelism {setting}" + (f" = all {_cores()} cores" if setting == "0" else "")
    return Engine(
        "sail",
        lambda sql: spark.sql(sql).toArrow(),
        threads,
        f"{_version('pysail')} (pyspark {_version('pyspark')})",
        close,
    )


def start_chdb(data: Path, files: dict[str, list[Path]]) -> Engine:
    from chdb import session as chdb_session

    sess = chdb_session.Session()
    try:
        settings = {**CHDB_SETTINGS, "max_threads": str(_cores())}
        for name, value in settings.items():
            sess.query(f"SET {name} = {value}")
        for table, paths in files.items():
            where, folder = _location(paths)
            pattern = f"{where}/*.parquet" if folder else str(where)
            sess.query(f"CREATE VIEW {table} AS SELECT * FROM file({_sql_string(pattern)}, Parquet)")
        got = sess.query("SELECT getSetting('max_threads')", "CSV")
    except BaseException:
        sess.close()
        raise
    return Engine(
        "chdb",
        lambda sql: sess.query(sql, "ArrowTable"),
        f"max_threads {str(got).strip() or '?'}; {', '.join(f'{k}={v}' for k, v in CHDB_SETTINGS.items())}",
        _version("chdb"),
        sess.close,
    )


STARTERS: dict[str, Callable[[Path, dict[str, list[Path]]], Engine]] = {
    "polars": start_polars,
    "datafusion": start_datafusion,
    "sail": start_sail,
    "chdb": start_chdb,
}


def installed(engine: str) -> bool:
    """The modules ``engine`` needs can be imported (squall and duckdb always can)."""
    return all(importlib.util.find_spec(m) is not None for m in PEER_MODULES.get(engine, ()))


# --- one query on one engine -----------------------------------------------------------------------------------


@dataclass
class Cell:
    """One engine's outcome on one query."""

    status: str  # "ok", "differs" or "error"
    seconds: float | None = None  # best timed run
    times: list[float] = field(default_factory=list)
    ratio: float | None = None  # seconds / DuckDB's
    detail: str | None = None  # why it is not "ok"

    def text(self) -> str:
        if self.status == "error":
            return "ERROR"
        seconds = f"{self.seconds:.3f}s" if self.seconds is not None else ""
        if self.status == "differs":
            return f"DIFFERS {seconds}".strip()
        return f"{seconds} {self.ratio:.2f}x" if self.ratio is not None else seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "seconds": self.seconds,
            "times": self.times,
            "ratio": self.ratio,
            "detail": self.detail,
        }


def align_columns(actual: pa.Table, expected: pa.Table) -> pa.Table:
    """A peer's ``actual`` with ``expected``'s column names and, where Arrow casts them safely, its types,
    when it has as many columns: other engines name unaliased expressions their own way (Q18's
    ``sum(l_quantity)``) and type results in their own dialect, and their values are what is checked, by
    position. Never applied to Squall's answers, whose names and types must be DuckDB's."""
    if actual.num_columns != expected.num_columns:
        return actual
    if actual.column_names != expected.column_names:
        actual = actual.rename_columns(expected.column_names)
    try:
        return actual.cast(expected.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        return actual


_DIFFER_PREFIX = re.compile(
    r"^Results differ for `.*?` "
)  # compare_results' opening: the query's first words


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _difference(engine: Engine, answer: pa.Table, expected: pa.Table, sql: str, reference: Any) -> str | None:
    """``compare_results`` on one answer: Squall's as it is, a peer's with its names and types aligned."""
    checked = answer if engine.is_squall else align_columns(answer, expected)
    try:
        return compare_results(checked, expected, sql, reference=reference)
    except Exception as exc:  # a result the comparison cannot read is a wrong answer, not a crash
        return f"cannot compare: {_bench._one_line(exc)}"


def measure(engine: Engine, sql: str, expected: pa.Table, repeat: int, reference: Any = None) -> Cell:
    """Warm-up, then the best of ``repeat`` timed runs; every run's answer is checked against ``expected``
    (``reference`` answers SQL as DuckDB for rows tied with a group LIMIT cut)."""
    try:
        answers, times = [], []
        actual, _ = _bench._timed(lambda: engine.run(sql))
        answers.append(actual)
        for _ in range(repeat):
            answer, seconds = _bench._timed(lambda: engine.run(sql))
            answers.append(answer)
            times.append(seconds)
    except Exception as exc:
        where = "timed run failed: " if answers else ""
        return Cell("error", detail=_short(where + _bench._one_line(exc)))
    for i, answer in enumerate(answers):
        problem = _difference(engine, answer, expected, sql, reference)
        if problem is not None:
            run = "" if i == 0 else f"timed run {i}: "
            detail = _short(run + _DIFFER_PREFIX.sub("", problem, count=1))
            return Cell("differs", min(times), times, detail=detail)
    return Cell("ok", min(times), times)


def geomean(ratios: list[float]) -> float | None:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None


# --- main ------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the benchmark; return the exit status (0: Squall and DuckDB ran and agree, 1: they did not)."""
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    data: Path = args.data or Path("data") / f"sf{args.sf:g}"
    try:
        files = tpch.dataset_files(data)
    except DataError:
        say(f"generating TPC-H SF {args.sf:g} into {data} ...")
        try:
            tpch.generate(args.sf, data)
            files = tpch.dataset_files(data)
        except SquallError as exc:
            say(f"error: {exc}")
            return 1

    wanted = args.engines or list(ENGINES)
    engines: list[Engine] = []
    setup: dict[str, str] = {}  # engine -> why it is not in the run
    failed = False
    try:
        engines.append(start_duckdb(data, files))
    except Exception as exc:
        say(f"error: duckdb could not start: {_bench._one_line(exc)}")
        return 1
    try:
        for name in wanted:
            if name == "duckdb":
                continue
            if name == "squall":
                for w in args.workers or [None]:
                    label = "squall" if w is None else f"squall-w{w}"
                    try:
                        engines.append(start_squall(data, w))
                    except Exception as exc:
                        setup[label] = f"could not start: {_bench._one_line(exc)}"
                        failed = True
                continue
            if not installed(name):
                setup[name] = f"not installed ({INSTALL_HINT})"
                continue
            try:
                engines.append(STARTERS[name](data, files))
            except Exception as exc:
                setup[name] = f"could not start: {_short(_bench._one_line(exc), 200)}"

        say(
            f"TPC-H SF {args.sf:g} on {data}: {len(args.queries)} quer{'y' if len(args.queries) == 1 else 'ies'}, "
            f"best of {args.repeat} after a checked warm-up, {_cores()} cores"
        )
        for e in engines:
            say(f"  {e.name:<11} {e.version:<28} {e.threads}")
        for name, why in setup.items():
            say(f"{name}: {why}")
        say()
        say("seconds per engine (best run) and ratio to duckdb (>1: slower than duckdb)")
        say(("query  " + "".join(f"{e.name:<{CELL}}" for e in engines)).rstrip())

        results: list[dict[str, Any]] = []
        cells: dict[str, list[tuple[int, Cell]]] = {e.name: [] for e in engines[1:]}
        reference = engines[0]
        for n in args.queries:
            params = (
                tpch.random_params(n, args.seed, sf=args.sf)
                if args.seed is not None
                else tpch.validation_params(n, sf=args.sf)
            )
            sql = tpch.query(n, params, sf=args.sf)
            label = f"Q{n:02d}"
            try:
                expected, _ = _bench._timed(lambda sql=sql: reference.run(sql))
                duck_times = [
                    _bench._timed(lambda sql=sql: reference.run(sql))[1] for _ in range(args.repeat)
                ]
            except Exception as exc:
                say(f"{label}    duckdb FAILED: {_bench._one_line(exc)}")
                failed = True
                results.append({"query": n, "duckdb": {"status": "error", "detail": _bench._one_line(exc)}})
                continue
            best_duck = min(duck_times)
            row = {"query": n, "duckdb": Cell("ok", best_duck, duck_times, 1.0).as_json(), "engines": {}}
            line = f"{label:<7}" + f"{best_duck:.3f}s".ljust(CELL)
            notes: list[str] = []
            for engine in engines[1:]:
                cell = measure(engine, sql, expected, args.repeat, reference.run)
                if cell.seconds is not None and best_duck > 0:
                    cell.ratio = cell.seconds / best_duck
                cells[engine.name].append((n, cell))
                row["engines"][engine.name] = cell.as_json()
                line += cell.text().ljust(CELL)
                if cell.status != "ok":
                    notes.append(f"       {engine.name} {cell.status.upper()}: {cell.detail}")
                    if engine.is_squall:
                        failed = True
            say(line.rstrip())
            for note in notes:
                say(note)
            results.append(row)
    finally:
        for e in engines:
            try:
                e.close()
            except Exception:
                pass

    say()
    summary: dict[str, Any] = {}
    total = len(args.queries)
    for engine in engines[1:]:
        ran = cells[engine.name]
        ratios = [
            c.ratio for _, c in ran if c.status == "ok" and c.ratio and math.isfinite(c.ratio) and c.ratio > 0
        ]
        differs = [n for n, c in ran if c.status == "differs"]
        errors = [n for n, c in ran if c.status == "error"]
        g = geomean(ratios)
        extra = "".join(
            f"; {what} on {', '.join(f'Q{n:02d}' for n in which)}"
            for what, which in (("differs", differs), ("error", errors))
            if which
        )
        say(
            f"geomean ratio {engine.name}/duckdb: {'n/a' if g is None else f'{g:.2f}'} "
            f"over {len(ratios)} of {total} queries{extra}"
        )
        summary[engine.name] = {
            "geomean_ratio": g,
            "queries": len(ratios),
            "of": total,
            "differs": differs,
            "errors": errors,
        }
    for name, why in setup.items():
        summary[name] = {"geomean_ratio": None, "queries": 0, "of": total, "skipped": why}

    if args.json is not None:
        report = {
            "sf": args.sf,
            "data": str(data),
            "repeat": args.repeat,
            "seed": args.seed,
            "cores": _cores(),
            "queries": args.queries,
            "engines": {e.name: {"version": e.version, "threads": e.threads} for e in engines},
            "skipped": setup,
            "results": results,
            "geomean": summary,
            "exit_status": 1 if failed else 0,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        say(f"figures written to {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
